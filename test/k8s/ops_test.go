package k8s

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/indexify-go/indexify/test/harness"
)

// clientset talks to the API server with the admin kubeconfig; used where
// a kubectl process per sample would be too heavy (rollWatch).
func clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

var serving = regexp.MustCompile(`Starting to serve on 127\.0\.0\.1:(\d+)`)

// serviceProxy runs `kubectl proxy --address 127.0.0.1 --port 0` for the
// rest of the test and returns a client for the API service through the API
// server's service proxy: every request goes to one of the service's READY
// endpoints, chosen per request, as a client inside the cluster would see
// the service (a port-forward is pinned to one pod and dies with it).
func (r *release) serviceProxy(t *testing.T, svc, port string) *harness.HTTP {
	t.Helper()
	cmd := exec.Command(kubectlBin(), "--kubeconfig", kubeconfig(), "proxy", "--address", "127.0.0.1", "--port", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case p := <-found:
		return harness.NewHTTP(fmt.Sprintf("http://127.0.0.1:%s/api/v1/namespaces/%s/services/%s:%s/proxy", p, r.ns, svc, port))
	case <-time.After(30 * time.Second):
		t.Fatal("kubectl proxy: no local port within 30s")
		return nil
	}
}

// rollWatch samples the release every 200ms while a change runs: how many
// coordinators are ready and not being deleted (what the disruption budget
// counts), how many API pods run (not in a terminal phase), and whether the
// API is served: an API pod ready and not being deleted, and a ready
// endpoint in the API service's EndpointSlices.
type rollWatch struct {
	mu         sync.Mutex
	quorum     int
	samples    int
	minReady   int       // fewest ready coordinators in one sample
	low        []string  // samples under the quorum
	maxAPIPods int       // most API pods running in one sample
	lastUp     time.Time // the last sample that saw the API served
	downSince  time.Time // zero while the API is served
	apiDown    []span    // from the last sample up to the first sample up again
	quit, done chan struct{}
}

// span is a stretch of time.
type span struct{ from, to time.Time }

func (s span) String() string {
	return fmt.Sprintf("%s-%s (%s)", s.from.Format("15:04:05.000"), s.to.Format("15:04:05.000"), s.to.Sub(s.from).Round(100*time.Millisecond))
}

func (r *release) watchRoll(t *testing.T, quorum int) *rollWatch {
	t.Helper()
	cs := clientset(t)
	w := &rollWatch{quorum: quorum, minReady: 1 << 30, lastUp: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	sel := "app.kubernetes.io/instance=" + r.name
	go func() {
		defer close(w.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for n := 0; n < 3000; n++ { // at most 10 minutes
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
			at := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			pods, err := cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
			var eps *discoveryv1.EndpointSliceList
			if err == nil {
				eps, err = cs.DiscoveryV1().EndpointSlices(r.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + r.api()})
			}
			cancel()
			if err != nil {
				continue
			}
			ready, apiPods, apiReady := 0, 0, 0
			var states []string
			for i := range pods.Items {
				p := &pods.Items[i]
				ok, _ := podReady(p)
				serving := ok && p.DeletionTimestamp == nil
				switch p.Labels["app.kubernetes.io/component"] {
				case "coordinator":
					if serving {
						ready++
					}
					states = append(states, fmt.Sprintf("%s ready=%v deleting=%v", p.Name, ok, p.DeletionTimestamp != nil))
				case "api":
					if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
						apiPods++
					}
					if serving {
						apiReady++
					}
				}
			}
			endpoints := 0
			for _, sl := range eps.Items {
				for _, e := range sl.Endpoints {
					if e.Conditions.Ready == nil || *e.Conditions.Ready {
						endpoints++
					}
				}
			}
			w.mu.Lock()
			w.samples++
			w.minReady = min(w.minReady, ready)
			w.maxAPIPods = max(w.maxAPIPods, apiPods)
			if ready < w.quorum {
				w.low = append(w.low, at.Format("15:04:05.000")+" "+strings.Join(states, ", "))
			}
			switch up := apiReady > 0 && endpoints > 0; {
			case up && !w.downSince.IsZero():
				w.apiDown = append(w.apiDown, span{w.downSince, at})
				w.downSince = time.Time{}
				w.lastUp = at
			case up:
				w.lastUp = at
			case w.downSince.IsZero():
				w.downSince = w.lastUp
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// rollSeen is what a rollWatch saw.
type rollSeen struct {
	samples, minReady, maxAPIPods int
	low                           []string
	apiDown                       []span // a span still open at stop ends then
}

// stop ends the sampling and returns what it saw.
func (w *rollWatch) stop() rollSeen {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	down := append([]span(nil), w.apiDown...)
	if !w.downSince.IsZero() {
		down = append(down, span{w.downSince, time.Now()})
	}
	return rollSeen{samples: w.samples, minReady: w.minReady, maxAPIPods: w.maxAPIPods, low: w.low, apiDown: down}
}

// whileDown says whether a request between sent and failed overlapped a
// span without the API served, give or take slack (the samples are 200ms
// apart and the service proxy learns of endpoints a moment after the
// EndpointSlice changes).
func (s rollSeen) whileDown(sent, failed time.Time, slack time.Duration) bool {
	for _, d := range s.apiDown {
		if !failed.Before(d.from.Add(-slack)) && !sent.After(d.to.Add(slack)) {
			return true
		}
	}
	return false
}

func (r *release) pdb(t testing.TB) policyv1.PodDisruptionBudget {
	t.Helper()
	var pdb policyv1.PodDisruptionBudget
	if err := getJSON(t, &pdb, "-n", r.ns, "pdb", r.sts()); err != nil {
		t.Fatal(err)
	}
	return pdb
}

// processOf finds, on this host, the PID of a pod's container through the
// cluster's containerd (`ctr task ls`), to read what the kernel enforces
// on it in /proc.
func processOf(t testing.TB, p *corev1.Pod) int {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("%s: no container status", p.Name)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", "-a", filepath.Join(clusterDir(), "containerd", "containerd.sock"),
		"-n", "k8s.io", "task", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr task ls: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == id {
			var pid int
			if _, err := fmt.Sscan(f[1], &pid); err == nil && pid > 0 {
				return pid
			}
		}
	}
	t.Fatalf("%s: container %s not among containerd's tasks:\n%s", p.Name, id, out)
	return 0
}

// procStatus returns the fields of /proc/PID/status.
func procStatus(t testing.TB, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return m
}

// rootMountOptions returns the mount options of "/" as the process sees it
// (/proc/PID/mountinfo: field 5 is the mount point, field 6 its options).
func rootMountOptions(t testing.TB, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			return f[5]
		}
	}
	t.Fatalf("no / in /proc/%d/mountinfo", pid)
	return ""
}
