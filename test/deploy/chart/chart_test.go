package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const (
	sts      = ReleaseName + "-coordinator"
	headless = ReleaseName + "-coordinator-headless"
	client   = ReleaseName + "-coordinator"
	apiName  = ReleaseName + "-api"
)

func mustRender(t *testing.T, values map[string]any) *Rendered {
	t.Helper()
	r, err := Render(values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

// The variants every invariant is checked on.
var variants = []struct {
	name     string
	values   map[string]any
	replicas int
}{
	{"defaults", nil, 3},
	{"1 replica", Values("coordinator.replicas", 1), 1},
	{"3 replicas", Values("coordinator.replicas", 3), 3},
	{"5 replicas", Values("coordinator.replicas", 5), 5},
	{"persistence off", Values("coordinator.persistence.enabled", false), 3},
	{"API persistence off", Values("server.persistence.enabled", false), 3},
	{"API on an existing claim", Values("server.persistence.existingClaim", "indexify-data", "server.persistence.accessMode", "ReadWriteMany"), 3},
	{"tls on", Values("tls.enabled", true, "tls.secretName", "indexify-tls"), 3},
	{"everything on", Values("coordinator.replicas", 7, "coordinator.antiAffinity", "hard",
		"server.ingress.enabled", true, "server.ingress.hosts", []any{map[string]any{"host": "ix.example.com"}},
		"metrics.serviceMonitor.enabled", true, "tls.enabled", true, "tls.secretName", "s",
		"server.replicas", 2, "server.blob.existingClaim", "blobs",
		"vectorStore.type", "weaviate", "vectorStore.weaviate.url", "http://weaviate:8080",
		"structuredStore.type", "postgres", "structuredStore.postgres.dsnSecret.name", "pg"), 7},
	{"s3 and security on", s3SecurityValues(), 3},
}

func TestInvariants(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			r := mustRender(t, v.values)
			checkCoordinator(t, r, v.replicas)
			checkServices(t, r)
			checkPDB(t, r, v.replicas)
			checkPods(t, r)
			checkClients(t, r)
			checkNoNamespace(t, r)
			checkFileFlags(t, r)
			checkBlobStore(t, r)
			checkRetrievalStores(t, r)
			checkAPIData(t, r)
		})
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func argValue(args []string, flag string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

func mustArg(t *testing.T, args []string, flag string) string {
	t.Helper()
	v, ok := argValue(args, flag)
	if !ok {
		t.Fatalf("no %s in %q", flag, args)
	}
	return v
}

func mountPath(t *testing.T, c corev1.Container, volume string) string {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	t.Fatalf("container %s does not mount %q", c.Name, volume)
	return ""
}

func volume(t *testing.T, spec corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %q", name)
	return corev1.Volume{}
}

func checkCoordinator(t *testing.T, r *Rendered, n int) {
	t.Helper()
	if len(r.StatefulSets) != 1 {
		t.Fatalf("%d StatefulSets, want 1", len(r.StatefulSets))
	}
	s := r.StatefulSets[sts]
	if s == nil {
		t.Fatalf("no StatefulSet %s", sts)
	}
	if s.Spec.Replicas == nil || int(*s.Spec.Replicas) != n {
		t.Fatalf("replicas %v, want %d", s.Spec.Replicas, n)
	}
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel", s.Spec.PodManagementPolicy)
	}
	if s.Spec.ServiceName != headless {
		t.Errorf("serviceName %q, want %q", s.Spec.ServiceName, headless)
	}
	pod := s.Spec.Template.Spec
	c := container(t, pod, "coordinator")
	if c.Args[0] != "coordinator" {
		t.Fatalf("args %q do not run the coordinator", c.Args)
	}
	// Identity: the pod name, through the hostname default; never per pod config.
	if _, ok := argValue(c.Args, "--node-id"); ok {
		t.Errorf("--node-id given; identity must come from the pod name (host name)")
	}
	if len(c.Env) == 0 || c.Env[0].Name != "POD_NAME" || c.Env[0].ValueFrom == nil ||
		c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("POD_NAME is not the downward-API pod name: %+v", c.Env)
	}
	for flag, port := range map[string]string{"--advertise": "8970", "--coordinator-advertise": "8950"} {
		if got, want := mustArg(t, c.Args, flag), "$(POD_NAME)."+headless+":"+port; got != want {
			t.Errorf("%s=%s, want %s", flag, got, want)
		}
	}
	// One shared ConfigMap, mounted; topology derived from the replica count.
	var coordCMs []string
	for name := range r.ConfigMaps {
		if strings.HasPrefix(name, sts) {
			coordCMs = append(coordCMs, name)
		}
	}
	if len(coordCMs) != 1 {
		t.Fatalf("coordinator ConfigMaps %v, want exactly one shared by all pods", coordCMs)
	}
	cm := r.ConfigMaps[coordCMs[0]]
	cv := volume(t, pod, "config")
	if cv.ConfigMap == nil || cv.ConfigMap.Name != cm.Name {
		t.Fatalf("config volume %+v does not use ConfigMap %s", cv, cm.Name)
	}
	dir := mountPath(t, c, "config")
	for flag, key := range map[string]string{"--config": "coordinator.yaml", "--replicas-file": "replicas"} {
		if got := mustArg(t, c.Args, flag); got != dir+"/"+key {
			t.Errorf("%s=%s, want %s/%s", flag, got, dir, key)
		}
		if _, ok := cm.Data[key]; !ok {
			t.Errorf("ConfigMap has no key %q", key)
		}
	}
	if cm.Data["replicas"] != fmt.Sprint(n) {
		t.Errorf("replicas file %q, want %d", cm.Data["replicas"], n)
	}
	var file struct {
		BootstrapExpect int    `json:"bootstrap_expect"`
		Join            string `json:"join"`
		MinQuorum       int    `json:"min_quorum"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["coordinator.yaml"]), &file); err != nil {
		t.Fatalf("coordinator.yaml: %v", err)
	}
	if file.BootstrapExpect != n || file.MinQuorum != n/2+1 {
		t.Errorf("bootstrap_expect %d min_quorum %d, want %d and %d", file.BootstrapExpect, file.MinQuorum, n, n/2+1)
	}
	join := strings.Split(file.Join, ",")
	if len(join) != n {
		t.Fatalf("join %q has %d entries, want %d", file.Join, len(join), n)
	}
	for i, e := range join {
		pod := fmt.Sprintf("%s-%d", sts, i)
		if want := fmt.Sprintf("%s=%s.%s:8950", pod, pod, headless); e != want {
			t.Errorf("join[%d] = %q, want %q", i, e, want)
		}
	}
	// Probes on the health port, split by purpose.
	httpPort := containerPort(t, c, "http")
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/startupz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/livez"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v, want GET %s on port http", p.what, p.probe, p.path)
		}
	}
	if httpPort != 8960 {
		t.Errorf("http port %d, want 8960", httpPort)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
		t.Fatalf("no preStop sleep: %+v", c.Lifecycle)
	}
	// Grace: preStop + leadership transfer (10 s bound) + server stop (4 s).
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < c.Lifecycle.PreStop.Sleep.Seconds+15 {
		t.Errorf("terminationGracePeriodSeconds %v too short for preStop %d + transfer", g, c.Lifecycle.PreStop.Sleep.Seconds)
	}
	// Storage.
	dataPath := mountPath(t, c, "data")
	if mustArg(t, c.Args, "--data-dir") != dataPath {
		t.Errorf("--data-dir is not the data mount %s", dataPath)
	}
	aff := pod.Affinity
	if aff == nil || aff.PodAntiAffinity == nil {
		t.Fatalf("no pod anti-affinity")
	}
	terms := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	for _, w := range aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		terms = append(terms, w.PodAffinityTerm)
	}
	if len(terms) != 1 || !selects(t, terms[0].LabelSelector.MatchLabels, s.Spec.Template.Labels) {
		t.Errorf("anti-affinity terms %+v do not select the coordinator pods", terms)
	}
}

func checkPersistence(t *testing.T, r *Rendered, on bool) {
	t.Helper()
	s := r.StatefulSets[sts]
	var emptyDirData bool
	for _, v := range s.Spec.Template.Spec.Volumes {
		if v.Name == "data" && v.EmptyDir != nil {
			emptyDirData = true
		}
	}
	if on {
		if len(s.Spec.VolumeClaimTemplates) != 1 || s.Spec.VolumeClaimTemplates[0].Name != "data" || emptyDirData {
			t.Fatalf("persistence on: claim templates %+v, emptyDir data %v", s.Spec.VolumeClaimTemplates, emptyDirData)
		}
		p := s.Spec.PersistentVolumeClaimRetentionPolicy
		if p == nil || p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType || p.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			t.Errorf("retention policy %+v, want whenDeleted Retain, whenScaled Delete", p)
		}
		if strings.Contains(r.Notes, "WARNING") {
			t.Errorf("NOTES warn although persistence is on:\n%s", r.Notes)
		}
		return
	}
	if len(s.Spec.VolumeClaimTemplates) != 0 || !emptyDirData {
		t.Fatalf("persistence off: claim templates %d, emptyDir data %v", len(s.Spec.VolumeClaimTemplates), emptyDirData)
	}
	if !strings.Contains(r.Notes, "WARNING: coordinator.persistence.enabled=false") {
		t.Errorf("NOTES do not warn about emptyDir data:\n%s", r.Notes)
	}
}

func TestPersistence(t *testing.T) {
	checkPersistence(t, mustRender(t, nil), true)
	checkPersistence(t, mustRender(t, Values("coordinator.persistence.enabled", false)), false)
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

func selects(t *testing.T, selector, podLabels map[string]string) bool {
	t.Helper()
	if len(selector) == 0 {
		return false
	}
	return labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

// podTemplates returns every workload's pod template by workload name.
func podTemplates(r *Rendered) map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	for n, s := range r.StatefulSets {
		out[n] = s.Spec.Template
	}
	for n, d := range r.Deployments {
		out[n] = d.Spec.Template
	}
	return out
}

func checkServices(t *testing.T, r *Rendered) {
	t.Helper()
	h, c := r.Services[headless], r.Services[client]
	if h == nil || c == nil {
		t.Fatalf("services %v: want %s and %s", keys(r.Services), headless, client)
	}
	if h.Spec.ClusterIP != corev1.ClusterIPNone || !h.Spec.PublishNotReadyAddresses {
		t.Errorf("headless service: clusterIP %q publishNotReadyAddresses %v", h.Spec.ClusterIP, h.Spec.PublishNotReadyAddresses)
	}
	if c.Spec.ClusterIP == corev1.ClusterIPNone || c.Spec.PublishNotReadyAddresses {
		t.Errorf("client service must be a normal service of ready pods")
	}
	pods := podTemplates(r)
	for name, svc := range r.Services {
		// Every service selects exactly one workload and its ports exist there.
		var hit []string
		for w, tpl := range pods {
			if selects(t, svc.Spec.Selector, tpl.Labels) {
				hit = append(hit, w)
				for _, p := range svc.Spec.Ports {
					found := false
					for _, ctr := range tpl.Spec.Containers {
						for _, cp := range ctr.Ports {
							found = found || cp.Name == p.TargetPort.String() || fmt.Sprint(cp.ContainerPort) == p.TargetPort.String()
						}
					}
					if !found {
						t.Errorf("service %s port %s targets %s, which %s does not expose", name, p.Name, p.TargetPort.String(), w)
					}
				}
			}
		}
		if len(hit) != 1 {
			t.Errorf("service %s selects %v, want one workload", name, hit)
		}
	}
	for name, ing := range r.Ingresses {
		for _, rule := range ing.Spec.Rules {
			for _, p := range rule.HTTP.Paths {
				svc := r.Services[p.Backend.Service.Name]
				if svc == nil || p.Backend.Service.Port.Name != "http" {
					t.Errorf("ingress %s points at %+v, not the API service's http port", name, p.Backend.Service)
				}
			}
		}
	}
	for name, sm := range r.ServiceMonitors {
		if sm["apiVersion"] != "monitoring.coreos.com/v1" {
			t.Errorf("ServiceMonitor %s apiVersion %v", name, sm["apiVersion"])
		}
		spec := sm["spec"].(map[string]any)
		sel := map[string]string{}
		for k, v := range spec["selector"].(map[string]any)["matchLabels"].(map[string]any) {
			sel[k] = v.(string)
		}
		if !selects(t, sel, h.Labels) || !selects(t, sel, c.Labels) {
			t.Errorf("ServiceMonitor %s selector %v misses the coordinator services", name, sel)
		}
	}
}

func keys[T any](m map[string]T) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func checkPDB(t *testing.T, r *Rendered, n int) {
	t.Helper()
	if n == 1 {
		if len(r.PDBs) != 0 {
			t.Fatalf("one replica: a PDB would block drains forever: %v", keys(r.PDBs))
		}
		return
	}
	p := r.PDBs[sts]
	if p == nil || p.Spec.MaxUnavailable == nil {
		t.Fatalf("no PDB with maxUnavailable for %s", sts)
	}
	if got, want := p.Spec.MaxUnavailable.IntValue(), n-(n/2+1); got != want {
		t.Errorf("PDB maxUnavailable %d, want replicas - quorum = %d", got, want)
	}
	if !selects(t, p.Spec.Selector.MatchLabels, r.StatefulSets[sts].Spec.Template.Labels) {
		t.Errorf("PDB selector does not select the coordinator pods")
	}
}

func checkPods(t *testing.T, r *Rendered) {
	t.Helper()
	for w, tpl := range podTemplates(r) {
		ps := tpl.Spec
		if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot ||
			ps.SecurityContext.RunAsUser == nil || *ps.SecurityContext.RunAsUser == 0 {
			t.Errorf("%s: pod security context %+v is not non-root", w, ps.SecurityContext)
		}
		if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks {
			t.Errorf("%s: service links on (INDEXIFY_* variables would become settings)", w)
		}
		for _, c := range ps.Containers {
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("%s/%s: container security context %+v", w, c.Name, sc)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s/%s: resources %+v", w, c.Name, c.Resources)
			}
			if mountPath(t, c, "tmp") != "/tmp" || volume(t, ps, "tmp").EmptyDir == nil {
				t.Errorf("%s/%s: /tmp is not an emptyDir", w, c.Name)
			}
			if c.Image != "indexify:dev" {
				t.Errorf("%s/%s: image %q, want indexify:dev (appVersion)", w, c.Name, c.Image)
			}
		}
	}
	for n, d := range r.Deployments {
		if !selects(t, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("deployment %s selector does not match its pods", n)
		}
	}
	s := r.StatefulSets[sts]
	if !selects(t, s.Spec.Selector.MatchLabels, s.Spec.Template.Labels) {
		t.Errorf("StatefulSet selector does not match its pods")
	}
}

func checkClients(t *testing.T, r *Rendered) {
	t.Helper()
	want := "dns:" + client + ":8950"
	api := r.Deployments[apiName]
	if api == nil {
		t.Fatalf("no API deployment %s", apiName)
	}
	ac := container(t, api.Spec.Template.Spec, "api")
	if got := mustArg(t, ac.Args, "--coordinator-addr"); got != want {
		t.Errorf("API server --coordinator-addr %s, want %s", got, want)
	}
	// A terminating API pod keeps serving while it leaves the service's
	// endpoints (test/k8s: a rolling update under load failed no request),
	// and the grace period covers that plus the server's 15 s stop.
	if ac.Lifecycle == nil || ac.Lifecycle.PreStop == nil || ac.Lifecycle.PreStop.Sleep == nil || ac.Lifecycle.PreStop.Sleep.Seconds < 1 {
		t.Errorf("API container has no preStop sleep: %+v", ac.Lifecycle)
	} else if g := api.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g < ac.Lifecycle.PreStop.Sleep.Seconds+15 {
		t.Errorf("API terminationGracePeriodSeconds %v too short for preStop %d + 15 s stop", g, ac.Lifecycle.PreStop.Sleep.Seconds)
	}
	svc := r.Services[apiName]
	if svc == nil || svc.Spec.Ports[0].Port != 8900 {
		t.Fatalf("API service %+v", svc)
	}
	if store, _ := argValue(ac.Args, "--blob-store"); store != "s3" &&
		mustArg(t, ac.Args, "--blob-dir") != mountPath(t, ac, "data")+"/blobs" {
		t.Errorf("API blobs are not on the data volume")
	}
	execs := 0
	for name, d := range r.Deployments {
		if !strings.Contains(name, "-executor-") {
			continue
		}
		execs++
		ec := container(t, d.Spec.Template.Spec, "executor")
		if got := mustArg(t, ec.Args, "--coordinator-addr"); got != want {
			t.Errorf("%s --coordinator-addr %s, want %s", name, got, want)
		}
		scheme := "http"
		if _, tls := argValue(ec.Args, "--tls-ca-file"); tls {
			scheme = "https"
		}
		if got, want := mustArg(t, ec.Args, "--api-server"), scheme+"://"+apiName+":8900"; got != want {
			t.Errorf("%s --api-server %s, want %s", name, got, want)
		}
		// The executor id outlives a container restart (issue 16).
		if v := volume(t, d.Spec.Template.Spec, "state"); v.EmptyDir == nil ||
			mustArg(t, ec.Args, "--state-dir") != mountPath(t, ec, "state") {
			t.Errorf("%s: --state-dir is not the mounted emptyDir", name)
		}
		cfg := mustArg(t, ec.Args, "--extractors-config")
		v := volume(t, d.Spec.Template.Spec, "extractors")
		cm := r.ConfigMaps[v.ConfigMap.Name]
		dir := mountPath(t, ec, "extractors")
		key, ok := strings.CutPrefix(cfg, dir+"/")
		if cm == nil || !ok || cm.Data[key] == "" {
			t.Errorf("%s: --extractors-config %s is not a key of the mounted ConfigMap", name, cfg)
		}
	}
	if execs == 0 {
		t.Errorf("no executor deployment")
	}
	// TLS: all or nothing.
	for w, tpl := range podTemplates(r) {
		for _, c := range tpl.Spec.Containers {
			_, cert := argValue(c.Args, "--tls-cert-file")
			hasVol := false
			for _, v := range tpl.Spec.Volumes {
				hasVol = hasVol || (v.Name == "tls" && v.Secret != nil && v.Secret.SecretName != "")
			}
			if cert != hasVol {
				t.Errorf("%s: TLS flag %v but Secret volume %v", w, cert, hasVol)
			}
			if cert && mustArg(t, c.Args, "--tls-cert-file") != mountPath(t, c, "tls")+"/tls.crt" {
				t.Errorf("%s: --tls-cert-file is not in the mounted Secret", w)
			}
		}
	}
}

// The chart never names a namespace: objects go to the release namespace
// and pods use short names resolved in their own namespace.
func checkNoNamespace(t *testing.T, r *Rendered) {
	t.Helper()
	for file, body := range r.ManifestsByFile {
		if strings.Contains(body, "indexify-test") || strings.Contains(body, "svc.cluster.local") {
			t.Errorf("%s mentions the namespace or a cluster domain", file)
		}
	}
}

func TestTLS(t *testing.T) {
	r := mustRender(t, Values("tls.enabled", true, "tls.secretName", "indexify-tls"))
	for w, tpl := range podTemplates(r) {
		v := volume(t, tpl.Spec, "tls")
		if v.Secret.SecretName != "indexify-tls" {
			t.Errorf("%s: tls volume secret %q", w, v.Secret.SecretName)
		}
		for _, c := range tpl.Spec.Containers {
			for _, f := range []string{"--tls-cert-file", "--tls-key-file", "--tls-ca-file"} {
				mustArg(t, c.Args, f)
			}
		}
	}
	if _, err := Render(Values("tls.enabled", true)); err == nil || !strings.Contains(err.Error(), "tls.secretName") {
		t.Fatalf("TLS without a Secret name rendered: %v", err)
	}
	// Off: no TLS anywhere (checked by checkClients too).
	for w, tpl := range podTemplates(mustRender(t, nil)) {
		for _, c := range tpl.Spec.Containers {
			if _, ok := argValue(c.Args, "--tls-cert-file"); ok {
				t.Errorf("%s: TLS flag with tls.enabled=false", w)
			}
		}
	}
}

func TestAntiAffinityHard(t *testing.T) {
	r := mustRender(t, Values("coordinator.antiAffinity", "hard"))
	a := r.StatefulSets[sts].Spec.Template.Spec.Affinity.PodAntiAffinity
	if len(a.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(a.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("hard anti-affinity: %+v", a)
	}
	if a := mustRender(t, nil).StatefulSets[sts].Spec.Template.Spec.Affinity.PodAntiAffinity; len(a.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("default anti-affinity is not preferred: %+v", a)
	}
	if a := mustRender(t, Values("coordinator.antiAffinity", "none")).StatefulSets[sts].Spec.Template.Spec.Affinity; a != nil {
		t.Fatalf("antiAffinity none rendered %+v", a)
	}
}

func TestExecutorsConfig(t *testing.T) {
	ext := []any{map[string]any{"name": "acme/upper", "command": []any{"/opt/upper"}, "input_mime_types": []any{"text/plain"}}}
	r := mustRender(t, Values("executors", []any{
		map[string]any{"name": "default", "replicas": 2},
		map[string]any{"name": "gpu", "replicas": 1, "extractors": ext, "image": map[string]any{"repository": "acme/extractors", "tag": "1.0"}},
	}))
	d := r.Deployments[ReleaseName+"-executor-gpu"]
	if d == nil {
		t.Fatalf("deployments %v", keys(r.Deployments))
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "acme/extractors:1.0" {
		t.Errorf("image override: %s", img)
	}
	var file struct {
		Extractors []map[string]any `json:"extractors"`
	}
	if err := yaml.UnmarshalStrict([]byte(r.ConfigMaps[ReleaseName+"-executor-gpu"].Data["extractors.yaml"]), &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Extractors) != 1 || file.Extractors[0]["name"] != "acme/upper" {
		t.Fatalf("extractors.yaml: %+v", file)
	}
	if *r.Deployments[ReleaseName+"-executor-default"].Spec.Replicas != 2 {
		t.Errorf("executor replicas not applied")
	}
	// The two groups' pods are told apart by their selectors.
	if selects(t, d.Spec.Selector.MatchLabels, r.Deployments[ReleaseName+"-executor-default"].Spec.Template.Labels) {
		t.Errorf("executor groups share a selector")
	}
}

func TestBadValuesFail(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"2 replicas", Values("coordinator.replicas", 2), "odd number"},
		{"4 replicas", Values("coordinator.replicas", 4), "odd number"},
		{"6 replicas", Values("coordinator.replicas", 6), "odd number"},
		{"0 replicas", Values("coordinator.replicas", 0), "replicas"},
		{"fractional", Values("coordinator.replicas", 2.5), "replicas"},
		{"string", Values("coordinator.replicas", "3"), "replicas"},
		{"typo", Values("coordinator.replica", 3), "replica"},
		{"bad duration", Values("coordinator.electionTimeout", "1 second"), "electionTimeout"},
		{"two API servers on the default stores", Values("server.replicas", 2), "or use 1 replica"},
		{"bad anti-affinity", Values("coordinator.antiAffinity", "maybe"), "antiAffinity"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render succeeded or failed for another reason: %v (want %q)", err, c.want)
			}
		})
	}
}

// helm lint --strict: warnings count as failures.
func TestLintStrict(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			l := lint.All(Dir(), v.values, "indexify-test", true)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}
