// Package k8s runs the Helm chart (deploy/helm/indexify) on a real
// single-node Kubernetes: the cluster of cluster-up.sh in this directory.
// It installs the chart with Helm's Go library and checks what a user sees
// with kubectl and through `kubectl port-forward` to the API (bound to
// 127.0.0.1).
//
// If no cluster answers at the kubeconfig of cluster-up.sh, TestMain starts
// one (root only; it builds the binaries first when they are not cached)
// and tears it down at the end; a cluster started beforehand (by .ci/k8s.sh)
// is used as it is and left running.
package k8s

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// The settings of env.sh (the scripts' defaults, same overrides).
const k8sVersion = "v1.34.4"

// appImage is what cluster-up.sh imported into the cluster's containerd
// (the first of $IDXK8S_APP_TAGS); pods use it with imagePullPolicy Never.
const (
	appRepo = "indexify"
	appTag  = "idxk8s-a"
)

func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

func chartDir() string { return filepath.Join(here(), "..", "..", "deploy", "helm", "indexify") }

func clusterDir() string {
	if d := os.Getenv("IDXK8S_DIR"); d != "" {
		return d
	}
	return "/var/tmp/idxk8s"
}

func kubeconfig() string { return filepath.Join(clusterDir(), "pki", "admin.conf") }

func kubectlBin() string {
	tools := os.Getenv("INDEXIFY_TOOLS_DIR")
	if tools == "" {
		home, _ := os.UserHomeDir()
		tools = filepath.Join(home, ".cache", "indexify-tools")
	}
	return filepath.Join(tools, "kubernetes-"+k8sVersion, "kubectl")
}

// kubectl runs one kubectl command (bounded) and returns its combined output.
func kubectl(timeout time.Duration, args ...string) (string, error) {
	return kubectlIn(timeout, nil, args...)
}

// kubectlIn is kubectl with stdin.
func kubectlIn(timeout time.Duration, stdin io.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin(), append([]string{"--kubeconfig", kubeconfig()}, args...)...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func mustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := kubectl(2*time.Minute, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// getJSON runs `kubectl get ... -o json` into out.
func getJSON(t testing.TB, out any, args ...string) error {
	t.Helper()
	s, err := kubectl(30*time.Second, append(append([]string{"get"}, args...), "-o", "json")...)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), out)
}

func clusterUp() error {
	if _, err := os.Stat(kubectlBin()); err != nil {
		return err
	}
	if _, err := kubectl(10*time.Second, "get", "--raw", "/readyz"); err != nil {
		return err
	}
	_, err := kubectl(10*time.Second, "wait", "--for=condition=Ready", "node/idxk8s-node", "--timeout=5s")
	return err
}

// script runs one of this directory's scripts, bounded.
func script(timeout time.Duration, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(here(), name))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if err := clusterUp(); err != nil {
		if os.Geteuid() != 0 {
			fmt.Fprintf(os.Stderr, "test/k8s: no cluster at %s (%v), and starting one needs root: run `sudo bash test/k8s/cluster-up.sh` first\n", kubeconfig(), err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "test/k8s: no cluster running (%v); starting one with cluster-up.sh\n", err)
		start := time.Now()
		// A cold start builds the binaries first (45-70 minutes on 2 loaded cores).
		if err := script(90*time.Minute, "cluster-up.sh"); err != nil {
			fmt.Fprintf(os.Stderr, "test/k8s: cluster-up.sh: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "test/k8s: cluster up in %s\n", time.Since(start).Round(time.Second))
		defer func() {
			if err := script(5*time.Minute, "cluster-down.sh"); err != nil {
				fmt.Fprintf(os.Stderr, "test/k8s: cluster-down.sh: %v\n", err)
			}
		}()
	}
	return m.Run()
}

// release is one Helm release of the chart, in a namespace of its own.
type release struct {
	t         testing.TB
	name, ns  string
	installed time.Time
}

func (r *release) sts() string { return r.name + "-coordinator" }
func (r *release) api() string { return r.name + "-api" }

func (r *release) helmConfig() *action.Configuration {
	kc, ns := kubeconfig(), r.ns
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kc, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, r.ns, "secret", func(format string, v ...any) {}); err != nil {
		r.t.Fatalf("helm init: %v", err)
	}
	return cfg
}

// testValues: the chart's defaults with our imported image, then each
// `--set` expression of sets in order (Helm's own parser, as the CLI does).
func testValues(t testing.TB, sets ...string) map[string]any {
	t.Helper()
	v := map[string]any{
		"image": map[string]any{"repository": appRepo, "tag": appTag, "pullPolicy": "Never"},
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, v); err != nil {
			t.Fatalf("--set %s: %v", s, err)
		}
	}
	return v
}

// upgrade runs `helm upgrade` of the release with the given values (the
// library's action, no --wait, as install).
func (r *release) upgrade(t *testing.T, values map[string]any) {
	t.Helper()
	ch, err := loader.Load(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	up := action.NewUpgrade(r.helmConfig())
	up.Namespace, up.Timeout = r.ns, 2*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := up.RunWithContext(ctx, r.name, ch, values); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
}

// install runs `helm install` (the library's action, no --wait: readiness is
// checked with kubectl as a user would) into a fresh namespace. Cleanup
// prints what a user would look at when the test failed, then uninstalls
// and deletes the namespace.
func install(t *testing.T, values map[string]any) *release {
	t.Helper()
	r := newRelease(t)
	return r.install(t, values)
}

// newRelease names a release and its namespace (not created yet).
func newRelease(t *testing.T) *release {
	r := &release{t: t, name: "indexify", ns: fmt.Sprintf("idx-%s-%d", strings.ToLower(t.Name()), time.Now().UnixNano()%1e6)}
	if len(r.ns) > 63 {
		r.ns = r.ns[len(r.ns)-63:]
	}
	t.Cleanup(func() { r.cleanup() })
	return r
}

// install runs `helm install` of r into its namespace (created when
// missing).
func (r *release) install(t *testing.T, values map[string]any) *release {
	t.Helper()
	ch, err := loader.Load(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(r.helmConfig())
	in.ReleaseName, in.Namespace, in.CreateNamespace, in.Timeout = r.name, r.ns, true, 2*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := in.RunWithContext(ctx, ch, values); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	r.installed = time.Now()
	return r
}

func (r *release) cleanup() {
	if r.t.Failed() {
		for _, args := range [][]string{
			{"get", "all,pvc,pdb,endpointslices", "-o", "wide"},
			{"get", "events", "--sort-by=.lastTimestamp"},
			{"describe", "pods"},
		} {
			out, err := kubectl(30*time.Second, append([]string{"-n", r.ns}, args...)...)
			r.t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), out, errOrNil(err))
		}
		var pods corev1.PodList
		if err := getJSON(r.t, &pods, "-n", r.ns, "pods"); err == nil {
			for _, p := range pods.Items {
				out, _ := kubectl(30*time.Second, "-n", r.ns, "logs", "--tail=150", "--all-containers", p.Name)
				r.t.Logf("kubectl logs %s:\n%s", p.Name, out)
			}
		}
		nodeDiagnostics(r.t)
	}
	un := action.NewUninstall(r.helmConfig())
	un.Timeout = time.Minute
	if _, err := un.Run(r.name); err != nil {
		r.t.Logf("helm uninstall: %v", err)
	}
	if out, err := kubectl(3*time.Minute, "delete", "namespace", r.ns, "--wait=true", "--timeout=150s"); err != nil {
		r.t.Logf("delete namespace: %s %v", out, err)
	}
}

// nodeDiagnostics logs what the node itself saw when a test failed: the
// tails of the cluster's own daemons (CoreDNS answers the pods' lookups,
// kube-proxy programs the service addresses), the drop counters of the
// guard table, the conntrack table's fill and the kernel's last messages (a
// full conntrack table drops new flows, DNS and connects alike, while
// established streams go on).
func nodeDiagnostics(t testing.TB) {
	t.Helper()
	for _, n := range []string{"coredns", "kube-proxy", "kubelet"} {
		b, err := os.ReadFile(filepath.Join(clusterDir(), "logs", n+".log"))
		if err != nil {
			t.Logf("%s log: %v", n, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		t.Logf("%s log (last %d lines):\n%s", n, len(lines), strings.Join(lines, "\n"))
	}
	for _, c := range [][]string{
		{"nft", "list", "table", "inet", "idxk8s_guard"},
		{"sh", "-c", "echo conntrack $(cat /proc/sys/net/netfilter/nf_conntrack_count) of $(cat /proc/sys/net/netfilter/nf_conntrack_max)"},
		// Without the bridge ports' state changes, which every pod start
		// and stop writes.
		{"sh", "-c", "dmesg 2>&1 | grep -Ev 'veth|entered (blocking|disabled|forwarding|allmulticast|promiscuous)' | tail -n 20"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput()
		cancel()
		t.Logf("%s:\n%s%v", strings.Join(c, " "), out, errOrNil(err))
	}
}

func errOrNil(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// waitReady waits, as `kubectl rollout status` shows a user, for the
// coordinators, the API servers and the executors; it returns how long
// after install they were all ready.
func (r *release) waitReady(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	to := fmt.Sprintf("--timeout=%ds", int(timeout.Seconds()))
	// kubectl is given its own --timeout plus a margin: bounded by
	// mustKubectl's 2 minutes instead, a slow start was reported as "signal:
	// killed" with none of what kubectl was waiting for.
	for _, args := range [][]string{
		{"-n", r.ns, "rollout", "status", "statefulset/" + r.sts(), to},
		{"-n", r.ns, "wait", "--for=condition=Available", "deployment", "--all", to},
	} {
		if _, err := kubectl(timeout+30*time.Second, args...); err != nil {
			t.Fatalf("not ready %s after install: %v", time.Since(r.installed).Round(time.Second), err)
		}
	}
	return time.Since(r.installed)
}

func (r *release) coordinatorPods(t testing.TB) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := getJSON(t, &pods, "-n", r.ns, "pods", "-l", "app.kubernetes.io/component=coordinator"); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// podUIDs returns the UIDs of the component's pods that are not being
// deleted.
func (r *release) podUIDs(t testing.TB, component string) map[string]bool {
	t.Helper()
	var pods corev1.PodList
	if err := getJSON(t, &pods, "-n", r.ns, "pods", "-l", "app.kubernetes.io/instance="+r.name+",app.kubernetes.io/component="+component); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[string(p.UID)] = true
		}
	}
	return out
}

func (r *release) pod(t testing.TB, name string) (*corev1.Pod, error) {
	t.Helper()
	var p corev1.Pod
	if err := getJSON(t, &p, "-n", r.ns, "pod", name); err != nil {
		return nil, err
	}
	return &p, nil
}

func podReady(p *corev1.Pod) (bool, time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> `)

// portForward runs `kubectl port-forward --address 127.0.0.1 TARGET :PORT`
// for the rest of the test and returns the local address.
func (r *release) portForward(t *testing.T, target string, port int) string {
	t.Helper()
	addr, err := r.openPortForward(t, target, port)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// openPortForward is portForward that returns its error (for a port-forward
// that must outlive the subtest opening it: owner is the parent test, which
// must not be failed from a subtest's goroutine).
func (r *release) openPortForward(owner testing.TB, target string, port int) (string, error) {
	cmd := exec.Command(kubectlBin(), "--kubeconfig", kubeconfig(), "-n", r.ns, "port-forward",
		"--address", "127.0.0.1", target, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return "", err
	}
	owner.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	var mu sync.Mutex
	var said []string
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			said = append(said, sc.Text())
			mu.Unlock()
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case p := <-found:
		return "127.0.0.1:" + p, nil
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		return "", fmt.Errorf("kubectl port-forward %s: no local port within 30s; it said: %s", target, strings.Join(said, "\n"))
	}
}
