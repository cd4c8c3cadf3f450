package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/indexify-go/indexify/test/deploy/chart"
)

// podRun is what `docker run` needs to play one pod.
type podRun struct {
	name      string // pod name = container name = host name
	ip        string
	template  corev1.PodTemplateSpec
	claims    map[string]string // volume name -> docker volume (claim templates and persistentVolumeClaim volumes)
	aliases   []string
	configDir string // where ConfigMaps are written: <configDir>/<configmap>/<key>
	secretDir string // where Secrets are written: <secretDir>/<secret>/<key>
	secrets   map[string]map[string]string
}

// serviceAliases reproduces the Services that select a pod: a headless
// service gives <pod>.<svc> and <svc> (every pod), a normal service <svc>.
// Docker's DNS cannot drop a not-ready pod from a name, so a client service
// here resolves to every pod, ready or not: clients must cope (they retry),
// which is stricter than Kubernetes.
func serviceAliases(r *chart.Rendered, pod string, podLabels map[string]string) []string {
	var out []string
	for name, svc := range r.Services {
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
			continue
		}
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			out = append(out, pod+"."+name)
		}
		out = append(out, name)
	}
	return out
}

// writeConfigMaps writes every ConfigMap's keys as files, readable by the
// image's non-root user, the way the kubelet projects them. Rewriting them
// later is what a kubelet does after a ConfigMap update.
func writeConfigMaps(r *chart.Rendered, dir string) error {
	for name, cm := range r.ConfigMaps {
		if err := writeKeys(filepath.Join(dir, name), cm.Data); err != nil {
			return err
		}
	}
	return nil
}

// writeKeys writes one ConfigMap's or Secret's keys into directory d. The
// files are world-readable: the kubelet makes Secret files readable by the
// pod's fsGroup, which the harness cannot reproduce with a bind mount.
func writeKeys(d string, data map[string]string) error {
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(d, 0o755); err != nil {
		return err
	}
	for k, v := range data {
		// Write-then-rename, like the kubelet's atomic symlink swap: a
		// reader never sees a half-written file.
		tmp := filepath.Join(d, "."+k+".tmp")
		if err := os.WriteFile(tmp, []byte(v), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(d, k)); err != nil {
			return err
		}
	}
	return nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// runArgs builds `docker run` arguments for the pod's first container.
func (p *podRun) runArgs(network, image string) ([]string, error) {
	spec := p.template.Spec
	if len(spec.Containers) != 1 {
		return nil, fmt.Errorf("pod %s: %d containers, the harness plays one", p.name, len(spec.Containers))
	}
	c := spec.Containers[0]
	args := []string{"run", "-d", "--name", p.name, "--hostname", p.name,
		"--network", network, "--ip", p.ip, "--label", "indexify-test=" + network}
	for _, a := range p.aliases {
		args = append(args, "--network-alias", a)
	}
	// Security context, as the kubelet would apply it.
	if psc := spec.SecurityContext; psc != nil && psc.RunAsUser != nil {
		u := fmt.Sprint(*psc.RunAsUser)
		if psc.RunAsGroup != nil {
			u += fmt.Sprintf(":%d", *psc.RunAsGroup)
		}
		args = append(args, "--user", u)
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
			args = append(args, "--read-only")
		}
		if sc.Capabilities != nil {
			for _, d := range sc.Capabilities.Drop {
				args = append(args, "--cap-drop", string(d))
			}
		}
		if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			args = append(args, "--security-opt", "no-new-privileges")
		}
	}
	// Environment with downward-API fields filled.
	env := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			// A missing Secret or key stops the pod from starting, as the
			// kubelet's CreateContainerConfigError does.
			ref := e.ValueFrom.SecretKeyRef
			val, ok := p.secrets[ref.Name][ref.Key]
			if !ok {
				return nil, fmt.Errorf("pod %s: env %s: Secret %s has no key %s", p.name, e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = val
			args = append(args, "-e", e.Name+"="+val)
			continue
		}
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				return nil, fmt.Errorf("pod %s: env %s: only fieldRef and secretKeyRef are supported", p.name, e.Name)
			}
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = p.name
			case "metadata.namespace":
				v = "default"
			case "status.podIP":
				v = p.ip
			default:
				return nil, fmt.Errorf("pod %s: env %s: unsupported field %s", p.name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		env[e.Name] = v
		args = append(args, "-e", e.Name+"="+v)
	}
	// Volumes.
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		if claim, ok := p.claims[m.Name]; ok {
			args = append(args, "-v", claim+":"+m.MountPath)
			continue
		}
		v, ok := vols[m.Name]
		switch {
		case !ok:
			return nil, fmt.Errorf("pod %s: mount of unknown volume %s", p.name, m.Name)
		case v.ConfigMap != nil:
			args = append(args, "-v", filepath.Join(p.configDir, v.ConfigMap.Name)+":"+m.MountPath+":ro")
		case v.Secret != nil:
			if _, ok := p.secrets[v.Secret.SecretName]; !ok {
				return nil, fmt.Errorf("pod %s: volume %s: no Secret %s", p.name, m.Name, v.Secret.SecretName)
			}
			args = append(args, "-v", filepath.Join(p.secretDir, v.Secret.SecretName)+":"+m.MountPath+":ro")
		case v.EmptyDir != nil:
			// An anonymous volume: empty, owned like the image's directory
			// (the image prepares /tmp and /var/lib/indexify for its user),
			// gone with the container (docker rm -v). A tmpfs would be
			// closer, but its mode option is not honoured on every engine.
			args = append(args, "-v", m.MountPath)
		default:
			return nil, fmt.Errorf("pod %s: volume %s: only configMap, secret, emptyDir and claims are played", p.name, m.Name)
		}
	}
	for _, port := range c.Ports {
		args = append(args, "-p", fmt.Sprintf("127.0.0.1::%d", port.ContainerPort))
	}
	if len(c.Command) > 0 {
		args = append(args, "--entrypoint", c.Command[0])
	}
	args = append(args, image)
	if len(c.Command) > 1 {
		args = append(args, expand(c.Command[1:], env)...)
	}
	return append(args, expand(c.Args, env)...), nil
}

// expand replaces $(VAR) with the container's environment, as the kubelet
// does for command and args (unknown references stay as written).
func expand(in []string, env map[string]string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = varRef.ReplaceAllStringFunc(s, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	return out
}

// Args returns the container's args with $(VAR) references expanded for a
// pod named pod (for assertions).
func podArgs(tpl corev1.PodTemplateSpec, pod string) []string {
	env := map[string]string{}
	for _, e := range tpl.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			env[e.Name] = pod
		}
	}
	return expand(tpl.Spec.Containers[0].Args, env)
}
