package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/indexify-go/indexify/test/deploy/chart"
	"github.com/indexify-go/indexify/test/harness"
)

// Kube plays the part of the Kubernetes control plane and kubelet for one
// release of the chart on one Docker network.
type Kube struct {
	t       testing.TB
	Image   string
	Network string
	dir     string

	mu      sync.Mutex
	r       *chart.Rendered
	nextIP  netip.Addr
	pods    map[string]*Pod
	volumes map[string]bool
	logs    map[string]string // output of deleted incarnations
	secrets map[string]map[string]string
}

// Pod is one running pod (container).
type Pod struct {
	Name  string
	IP    string
	ports map[int32]string // container port -> 127.0.0.1:hostport
	spec  corev1.PodTemplateSpec
}

// New renders the chart with values and creates the test's network.
// Everything it creates is removed when the test ends.
func New(t testing.TB, values map[string]any) *Kube {
	t.Helper()
	img, err := Image()
	if err != nil {
		t.Fatal(err)
	}
	r, err := chart.Render(values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	k := &Kube{t: t, Image: img, Network: "ixtest-" + hex.EncodeToString(b), dir: t.TempDir(),
		r: r, pods: map[string]*Pod{}, volumes: map[string]bool{}, logs: map[string]string{},
		secrets: map[string]map[string]string{}}
	if err := writeConfigMaps(r, k.dir); err != nil {
		t.Fatal(err)
	}
	k.createNetwork()
	t.Cleanup(k.cleanup)
	return k
}

// createNetwork makes a network with an explicit subnet, so the harness can
// hand out addresses itself and never give a recreated pod its old IP
// (Docker would reuse the lowest free one). Docker picks the subnet: we
// create the network once to learn a free one, then again with it fixed.
func (k *Kube) createNetwork() {
	ctx := context.Background()
	if _, err := docker(ctx, "network", "create", "--label", "indexify-test=1", k.Network); err != nil {
		k.t.Fatal(err)
	}
	out, err := docker(ctx, "network", "inspect", "--format", "{{range .IPAM.Config}}{{.Subnet}} {{.Gateway}}{{end}}", k.Network)
	if err != nil {
		k.t.Fatal(err)
	}
	if _, err := docker(ctx, "network", "rm", k.Network); err != nil {
		k.t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		k.t.Fatalf("network %s: subnet/gateway %q", k.Network, out)
	}
	prefix, err := netip.ParsePrefix(f[0])
	if err != nil {
		k.t.Fatal(err)
	}
	if _, err := docker(ctx, "network", "create", "--label", "indexify-test=1", "--subnet", f[0], "--gateway", f[1], k.Network); err != nil {
		k.t.Fatal(err)
	}
	ip := prefix.Addr()
	for range 10 {
		ip = ip.Next()
	}
	k.nextIP = ip
}

func (k *Kube) cleanup() {
	ctx := context.Background()
	if k.t.Failed() {
		k.mu.Lock()
		for name, l := range k.logs {
			k.t.Logf("---- earlier incarnations of %s ----\n%s", name, tail(l, 60))
		}
		names := make([]string, 0, len(k.pods))
		for n := range k.pods {
			names = append(names, n)
		}
		k.mu.Unlock()
		for _, n := range names {
			l, _ := dockerCombined(ctx, "logs", n)
			k.t.Logf("---- %s ----\n%s", n, tail(l, 60))
		}
	}
	if ids, _ := docker(ctx, "ps", "-aq", "--filter", "label=indexify-test="+k.Network); ids != "" {
		_, _ = docker(ctx, append([]string{"rm", "-f", "-v"}, strings.Fields(ids)...)...)
	}
	for v := range k.volumes {
		_, _ = docker(ctx, "volume", "rm", "-f", v)
	}
	if _, err := docker(ctx, "network", "rm", k.Network); err != nil {
		k.t.Errorf("cleanup: %v", err)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func dockerCombined(ctx context.Context, args ...string) (string, error) {
	return dockerOut(ctx, true, args...)
}

// Rendered is the current render (as last applied).
func (k *Kube) Rendered() *chart.Rendered {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.r
}

// CreateSecret is `kubectl create secret generic`: pods started afterwards
// can read its keys through secretKeyRef env and Secret volumes.
func (k *Kube) CreateSecret(name string, data map[string]string) {
	k.t.Helper()
	if err := writeKeys(filepath.Join(k.secretDir(), name), data); err != nil {
		k.t.Fatal(err)
	}
	k.mu.Lock()
	k.secrets[name] = data
	k.mu.Unlock()
}

// secretDir is beside the ConfigMaps' directories; "_" cannot start a
// ConfigMap name, so the two never collide.
func (k *Kube) secretDir() string { return filepath.Join(k.dir, "_secrets") }

func (k *Kube) secretsCopy() map[string]map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]map[string]string, len(k.secrets))
	for n, d := range k.secrets {
		out[n] = d
	}
	return out
}

// StatefulSetName is the coordinator StatefulSet's name.
func (k *Kube) StatefulSetName() string {
	for n := range k.Rendered().StatefulSets {
		return n
	}
	k.t.Fatal("no StatefulSet rendered")
	return ""
}

// CoordinatorPod is the name of ordinal i.
func (k *Kube) CoordinatorPod(i int) string { return fmt.Sprintf("%s-%d", k.StatefulSetName(), i) }

// StartCoordinator creates pod i of the StatefulSet with its claim (a Docker
// volume that outlives the container, like a PVC).
func (k *Kube) StartCoordinator(i int) *Pod {
	k.t.Helper()
	s := k.Rendered().StatefulSets[k.StatefulSetName()]
	name := k.CoordinatorPod(i)
	claims := map[string]string{}
	for _, c := range s.Spec.VolumeClaimTemplates {
		vol := k.Network + "-" + c.Name + "-" + name
		claims[c.Name] = vol
		k.mu.Lock()
		k.volumes[vol] = true
		k.mu.Unlock()
	}
	return k.start(name, s.Spec.Template, claims)
}

// StartDeploymentPod creates one pod of Deployment deploy, named
// <deploy>-<suffix>. A persistentVolumeClaim volume of the pod is the
// claim's Docker volume, made on first use and kept until the test ends
// (pods replaced meanwhile find its data, as they find a bound PVC's);
// every pod naming the claim shares it. The claim must be one the chart
// rendered: a pod whose claim does not exist would stay Pending.
func (k *Kube) StartDeploymentPod(deploy, suffix string) *Pod {
	k.t.Helper()
	r := k.Rendered()
	d := r.Deployments[deploy]
	if d == nil {
		k.t.Fatalf("no Deployment %s", deploy)
	}
	claims := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		name := v.PersistentVolumeClaim.ClaimName
		if r.PVCs[name] == nil {
			k.t.Fatalf("%s mounts claim %s, which the chart did not render (the pod would stay Pending)", deploy, name)
		}
		claims[v.Name] = k.claimVolume(name)
	}
	return k.start(deploy+"-"+suffix, d.Spec.Template, claims)
}

// ClaimVolume is the Docker volume that plays PersistentVolumeClaim claim.
func (k *Kube) ClaimVolume(claim string) string { return k.Network + "-pvc-" + claim }

func (k *Kube) claimVolume(claim string) string {
	vol := k.ClaimVolume(claim)
	k.mu.Lock()
	k.volumes[vol] = true
	k.mu.Unlock()
	return vol
}

func (k *Kube) start(name string, tpl corev1.PodTemplateSpec, claims map[string]string) *Pod {
	k.t.Helper()
	k.mu.Lock()
	ip := k.nextIP
	k.nextIP = ip.Next()
	r := k.r
	k.mu.Unlock()
	run := &podRun{name: name, ip: ip.String(), template: tpl, claims: claims,
		aliases: serviceAliases(r, name, tpl.Labels), configDir: k.dir,
		secretDir: k.secretDir(), secrets: k.secretsCopy()}
	args, err := run.runArgs(k.Network, k.Image)
	if err != nil {
		k.t.Fatal(err)
	}
	if _, err := docker(context.Background(), args...); err != nil {
		k.t.Fatal(err)
	}
	p := &Pod{Name: name, IP: ip.String(), ports: map[int32]string{}, spec: tpl}
	for _, port := range tpl.Spec.Containers[0].Ports {
		out, err := docker(context.Background(), "port", name, fmt.Sprintf("%d/tcp", port.ContainerPort))
		if err != nil {
			k.t.Fatal(err)
		}
		// One line per host binding; we bind 127.0.0.1 only.
		p.ports[port.ContainerPort] = strings.Fields(out)[0]
	}
	k.mu.Lock()
	k.pods[name] = p
	k.mu.Unlock()
	return p
}

// Pod returns a running pod by name.
func (k *Kube) Pod(name string) *Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pods[name]
}

// Addr is the loopback address published for the pod's container port.
func (p *Pod) Addr(port int32) string { return p.ports[port] }

// Ready runs the pod's readiness probe once.
func (p *Pod) Ready() error {
	c := p.spec.Spec.Containers[0]
	pr := c.ReadinessProbe
	if pr == nil || pr.HTTPGet == nil {
		return fmt.Errorf("%s has no HTTP readiness probe", p.Name)
	}
	port := pr.HTTPGet.Port.IntVal
	for _, cp := range c.Ports {
		if cp.Name == pr.HTTPGet.Port.String() {
			port = cp.ContainerPort
		}
	}
	cl := &http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + p.Addr(port) + pr.HTTPGet.Path)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s readiness: %s", p.Name, resp.Status)
	}
	return nil
}

// WaitReady polls the readiness probes of pods until all pass.
func (k *Kube) WaitReady(timeout time.Duration, pods ...*Pod) {
	k.t.Helper()
	for _, p := range pods {
		harness.Eventually(k.t, timeout, p.Name+" ready", p.Ready)
	}
}
