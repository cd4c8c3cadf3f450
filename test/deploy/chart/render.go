// Package chart renders the Helm chart in deploy/helm/indexify with Helm's
// own Go library and decodes every object strictly into the Kubernetes API
// types, so a misspelt field fails instead of being silently dropped by the
// API server. It is test support only: the indexify binary never imports
// Helm (the chart tests here and the Docker pod harness in test/docker do).
package chart

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// ReleaseName is the release every render uses; resource names derive from
// it ("indexify" keeps them short: indexify-coordinator-0, ...).
const ReleaseName = "indexify"

// Dir returns the chart directory.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "helm", "indexify")
}

// Load reads the chart from disk.
func Load() (*chart.Chart, error) { return loader.Load(Dir()) }

// Rendered is one render of the chart: every object decoded into its API
// type, by kind and name, plus NOTES.txt.
type Rendered struct {
	StatefulSets     map[string]*appsv1.StatefulSet
	Deployments      map[string]*appsv1.Deployment
	Services         map[string]*corev1.Service
	ConfigMaps       map[string]*corev1.ConfigMap
	PVCs             map[string]*corev1.PersistentVolumeClaim
	PDBs             map[string]*policyv1.PodDisruptionBudget
	Ingresses        map[string]*networkingv1.Ingress
	ServiceMonitors  map[string]map[string]any // CRD: decoded as plain data
	Notes            string
	Count            int // objects rendered
	ManifestsByFile  map[string]string
	NamespaceQueried bool
}

// Render renders the chart with values (nil = defaults), validating them
// against values.schema.json as `helm install` does.
func Render(values map[string]any) (*Rendered, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	if values == nil {
		values = map[string]any{}
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	vals, err := chartutil.ToRenderValues(ch, values,
		chartutil.ReleaseOptions{Name: ReleaseName, Namespace: "indexify-test", IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	// Strict: a template reading a value that does not exist fails.
	files, err := engine.Engine{Strict: true}.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	return decode(files)
}

func decode(files map[string]string) (*Rendered, error) {
	r := &Rendered{
		StatefulSets:    map[string]*appsv1.StatefulSet{},
		Deployments:     map[string]*appsv1.Deployment{},
		Services:        map[string]*corev1.Service{},
		ConfigMaps:      map[string]*corev1.ConfigMap{},
		PVCs:            map[string]*corev1.PersistentVolumeClaim{},
		PDBs:            map[string]*policyv1.PodDisruptionBudget{},
		Ingresses:       map[string]*networkingv1.Ingress{},
		ServiceMonitors: map[string]map[string]any{},
		ManifestsByFile: files,
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		body := files[name]
		if strings.HasSuffix(name, "NOTES.txt") {
			r.Notes = body
			continue
		}
		if strings.HasSuffix(name, ".tpl") {
			continue
		}
		for i, doc := range splitDocs(body) {
			if err := r.add(doc); err != nil {
				return nil, fmt.Errorf("%s document %d: %w\n%s", name, i, err, doc)
			}
		}
	}
	return r, nil
}

// splitDocs cuts a manifest at "---" lines and drops empty documents
// (comments only).
func splitDocs(s string) []string {
	var out []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		empty := true
		for _, line := range strings.Split(d, "\n") {
			t := strings.TrimSpace(line)
			if t != "" && !strings.HasPrefix(t, "#") {
				empty = false
				break
			}
		}
		if !empty {
			out = append(out, d)
		}
	}
	return out
}

func (r *Rendered) add(doc string) error {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
		return err
	}
	if meta.Metadata.Name == "" {
		return fmt.Errorf("object without a name")
	}
	if meta.Metadata.Namespace != "" {
		return fmt.Errorf("%s %s sets a namespace; the chart installs into the release namespace", meta.Kind, meta.Metadata.Name)
	}
	strict := func(want string, into any) error {
		if meta.APIVersion != want {
			return fmt.Errorf("%s has apiVersion %s, want %s", meta.Kind, meta.APIVersion, want)
		}
		return yaml.UnmarshalStrict([]byte(doc), into)
	}
	var err error
	switch meta.Kind {
	case "StatefulSet":
		o := &appsv1.StatefulSet{}
		err = strict("apps/v1", o)
		err = put(r.StatefulSets, o.Name, o, err)
	case "Deployment":
		o := &appsv1.Deployment{}
		err = strict("apps/v1", o)
		err = put(r.Deployments, o.Name, o, err)
	case "Service":
		o := &corev1.Service{}
		err = strict("v1", o)
		err = put(r.Services, o.Name, o, err)
	case "ConfigMap":
		o := &corev1.ConfigMap{}
		err = strict("v1", o)
		err = put(r.ConfigMaps, o.Name, o, err)
	case "PersistentVolumeClaim":
		o := &corev1.PersistentVolumeClaim{}
		err = strict("v1", o)
		err = put(r.PVCs, o.Name, o, err)
	case "PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		err = strict("policy/v1", o)
		err = put(r.PDBs, o.Name, o, err)
	case "Ingress":
		o := &networkingv1.Ingress{}
		err = strict("networking.k8s.io/v1", o)
		err = put(r.Ingresses, o.Name, o, err)
	case "ServiceMonitor":
		// A CRD: no Go types are required; checked as plain data.
		o := map[string]any{}
		err = yaml.UnmarshalStrict([]byte(doc), &o)
		err = put(r.ServiceMonitors, meta.Metadata.Name, o, err)
	default:
		return fmt.Errorf("unexpected kind %q (add it to the strict decoder)", meta.Kind)
	}
	if err == nil {
		r.Count++
	}
	return err
}

func put[T any](m map[string]T, name string, v T, err error) error {
	if err != nil {
		return err
	}
	if _, dup := m[name]; dup {
		return fmt.Errorf("two objects of one kind named %q", name)
	}
	m[name] = v
	return nil
}

// Values builds a values map from dotted keys, like `helm --set a.b=c`
// with typed values: Values("coordinator.replicas", 5).
func Values(kv ...any) map[string]any {
	out := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		path := strings.Split(kv[i].(string), ".")
		m := out
		for _, p := range path[:len(path)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[path[len(path)-1]] = kv[i+1]
	}
	return out
}
