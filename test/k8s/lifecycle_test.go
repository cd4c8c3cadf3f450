package k8s

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/indexify-go/indexify/test/harness"
)

// suite is what TestChart's scenarios share: one release, the API client of
// the moment (a port-forward, re-opened when the API pod is replaced), the
// graph namespace, the cluster id, the values the release runs with and
// every upload acknowledged so far.
type suite struct {
	top       *testing.T // TestChart itself
	r         *release
	api       *harness.HTTP
	ns        string
	clusterID string
	sets      []string   // the --set expressions of the last install/upgrade
	acked     []uploaded // in the order acknowledged; texts never repeat
}

func (s *suite) names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", s.r.sts(), i)
	}
	return out
}

// snapshot maps each coordinator pod to its UID and IP.
type podID struct{ uid, ip string }

func (s *suite) coordinators(t testing.TB) map[string]podID {
	t.Helper()
	out := map[string]podID{}
	for _, p := range s.r.coordinatorPods(t) {
		out[p.Name] = podID{string(p.UID), p.Status.PodIP}
	}
	return out
}

// keptAll fails the test for any id of before or acked missing from the
// graph's content now.
func (s *suite) keptAll(t *testing.T, before map[string]bool, acked []uploaded) {
	t.Helper()
	have := contentIDs(t, s.api, s.ns)
	for id := range before {
		if !have[id] {
			t.Errorf("content %s written before is gone", id)
		}
	}
	for _, u := range acked {
		if !have[u.id] {
			t.Errorf("acknowledged upload %s is gone", u.id)
		}
	}
}

// bytesKept downloads, through the API, a sample of every upload the run
// acknowledged so far (up to 50 spread evenly, the first and the last
// among them) and fails on any whose bytes are not exactly those uploaded.
// The coordinators list content whose bytes live on the API server's
// volume: listing ids proves nothing about them.
func (s *suite) bytesKept(t *testing.T) {
	t.Helper()
	sample := harness.Spread(len(s.acked), 50)
	bad := 0
	for _, i := range sample {
		u := s.acked[i]
		code, body, err := s.api.Do(context.Background(), http.MethodGet, "/namespaces/"+s.ns+"/content/"+u.id+"/download", "", nil)
		if err != nil || code != http.StatusOK || string(body) != u.text {
			bad++
			t.Errorf("upload %d of %d (%s): download %d %v %q, want %q", i, len(s.acked), u.id, code, err, body, u.text)
		}
	}
	t.Logf("bytes of %d of the %d uploads acknowledged so far downloaded: %d wrong or missing", len(sample), len(s.acked), bad)
}

// apiClaimBound checks that the API server's data is on the claim the
// chart made, bound, kept by helm uninstall, and that the one API pod on it
// is updated with Recreate.
func (s *suite) apiClaimBound(t *testing.T) {
	t.Helper()
	s.r.claimBound(t, s.r.api()+"-data")
	if got := s.r.apiStrategy(t); got != appsv1.RecreateDeploymentStrategyType {
		t.Fatalf("API Deployment strategy %s, want Recreate (one pod on a ReadWriteOnce claim)", got)
	}
}

// resumed waits for n more acknowledged uploads of w.
func resumed(t *testing.T, w *writer, n int, timeout time.Duration) {
	t.Helper()
	from := w.acked()
	harness.Eventually(t, timeout, "writes resume", func() error {
		if got := w.acked() - from; got < n {
			return fmt.Errorf("%d acknowledged since; failures %d, last %v", got, len(w.failures()), lastOf(w.failures()))
		}
		return nil
	})
}

func lastOf(s []refusal) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1].String()
}

// everyPodDeleted: `kubectl delete pod` of all coordinators at once.
func (s *suite) everyPodDeleted(t *testing.T) {
	start := time.Now()
	names := s.names(replicas)
	oneCluster(t, s.api, time.Minute, names)
	old := s.coordinators(t)
	before := contentIDs(t, s.api, s.ns)
	w := startWriter(s.api, s.ns, len(s.acked), 900, 100*time.Millisecond)
	defer w.stop()
	resumed(t, w, 1, 30*time.Second)

	mustKubectl(t, "-n", s.r.ns, "delete", "pod", "-l", "app.kubernetes.io/component=coordinator", "--wait=false")
	harness.Eventually(t, 4*time.Minute, "every coordinator back as a new pod, ready, with a new IP", func() error {
		pods := s.r.coordinatorPods(t)
		if len(pods) != replicas {
			return fmt.Errorf("%d pods", len(pods))
		}
		for i := range pods {
			p := &pods[i]
			o := old[p.Name]
			if string(p.UID) == o.uid {
				return fmt.Errorf("%s: still the old pod", p.Name)
			}
			if ok, _ := podReady(p); !ok {
				return fmt.Errorf("%s: new pod not ready (%s)", p.Name, p.Status.Phase)
			}
			if p.Status.PodIP == "" || p.Status.PodIP == o.ip {
				return fmt.Errorf("%s: ip %q, the old pod had %s", p.Name, p.Status.PodIP, o.ip)
			}
		}
		return nil
	})
	now := s.coordinators(t)
	for _, n := range names {
		t.Logf("%s: %s -> %s", n, old[n].ip, now[n].ip)
	}
	t.Logf("every pod back ready after %s", time.Since(start).Round(time.Second))
	v := oneCluster(t, s.api, 2*time.Minute, names)
	if v.ClusterID != s.clusterID {
		t.Fatalf("cluster id %s, was %s", v.ClusterID, s.clusterID)
	}
	resumed(t, w, 5, 2*time.Minute)
	acks, failed := w.stop()
	s.acked = append(s.acked, acks...)
	s.keptAll(t, before, acks)
	// While no coordinator ran, uploads were refused (no quorum): the
	// count is reported, not asserted; what was acknowledged is kept.
	t.Logf("%d uploads acknowledged, all kept; %d refused while the cluster was down", len(acks), len(failed))
	last := acks[len(acks)-1]
	if got := strings.Join(chunksOf(t, s.api, s.ns, last.id), ""); got != last.text {
		t.Fatalf("last upload's chunks: %q, want %q", got, last.text)
	}
	s.bytesKept(t)
	t.Logf("timing: every pod deleted: %s", time.Since(start).Round(time.Second))
}

// drainRefused: `kubectl drain` of the only node, for the coordinators:
// the eviction API lets one pod go (maxUnavailable 1 of 3), the evicted pod
// cannot come back on the cordoned node, so every further eviction is
// refused with the budget's reason until the drain gives up; the two left
// keep the quorum and serve writes. Uncordoned, the third comes back.
func (s *suite) drainRefused(t *testing.T) {
	start := time.Now()
	names := s.names(replicas)
	oneCluster(t, s.api, time.Minute, names)
	pdb := s.r.pdb(t)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("PDB maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	harness.Eventually(t, time.Minute, "the PDB allows 1 disruption", func() error {
		if p := s.r.pdb(t); p.Status.DisruptionsAllowed != 1 || p.Status.CurrentHealthy != replicas {
			return fmt.Errorf("allowed %d, healthy %d", p.Status.DisruptionsAllowed, p.Status.CurrentHealthy)
		}
		return nil
	})
	old := s.coordinators(t)
	t.Cleanup(func() {
		if out, err := kubectl(time.Minute, "uncordon", "idxk8s-node"); err != nil {
			t.Errorf("uncordon: %s %v", out, err)
		}
	})
	out, err := kubectl(2*time.Minute, "drain", "idxk8s-node", "--pod-selector=app.kubernetes.io/component=coordinator",
		"--delete-emptydir-data", "--timeout=25s")
	t.Logf("kubectl drain:\n%s", out)
	if err == nil {
		t.Fatal("kubectl drain of the coordinators' only node succeeded: the PDB let every pod go")
	}
	if !strings.Contains(out, "disruption budget") {
		t.Fatalf("kubectl drain failed, but not on the disruption budget: %v", err)
	}
	// Exactly one of the three was evicted; the two others are the same pods.
	var kept, gone []string
	for _, p := range s.r.coordinatorPods(t) {
		if old[p.Name].uid == string(p.UID) && p.DeletionTimestamp == nil {
			kept = append(kept, p.Name)
		}
	}
	for _, n := range names {
		if !slices.Contains(kept, n) {
			gone = append(gone, n)
		}
	}
	if len(kept) != replicas-1 {
		t.Fatalf("pods kept %v, evicted %v: want exactly one evicted", kept, gone)
	}
	if p := s.r.pdb(t); p.Status.DisruptionsAllowed != 0 {
		t.Fatalf("PDB allows %d disruptions with %s gone", p.Status.DisruptionsAllowed, gone[0])
	}
	// The replacement waits unscheduled on the cordoned node.
	if p, err := s.r.pod(t, gone[0]); err == nil && p.Spec.NodeName != "" {
		t.Fatalf("%s scheduled on the cordoned node", gone[0])
	}
	// The quorum serves: an upload is acknowledged.
	harness.Eventually(t, time.Minute, "an upload with one coordinator evicted", func() error {
		text := uploadText(len(s.acked))
		id, err := uploadOnce(s.api, s.ns, text)
		if err == nil {
			s.acked = append(s.acked, uploaded{id, text})
		}
		return err
	})
	mustKubectl(t, "uncordon", "idxk8s-node")
	v := oneCluster(t, s.api, 3*time.Minute, names)
	if v.ClusterID != s.clusterID {
		t.Fatalf("cluster id %s, was %s", v.ClusterID, s.clusterID)
	}
	mustKubectl(t, "-n", s.r.ns, "rollout", "status", "statefulset/"+s.r.sts(), "--timeout=120s")
	s.bytesKept(t)
	t.Logf("evicted %s, kept %v; timing: drain: %s", gone[0], kept, time.Since(start).Round(time.Second))
}

// securityEnforced: the chart's securityContext is what the kernel applies
// to each running container (read in /proc on the node), the containers
// still work with it, and the kubelet refuses a container that would run
// as root under runAsNonRoot.
func (s *suite) securityEnforced(t *testing.T) {
	start := time.Now()
	var all corev1.PodList
	if err := getJSON(t, &all, "-n", s.r.ns, "pods", "-l", "app.kubernetes.io/instance="+s.r.name); err != nil {
		t.Fatal(err)
	}
	components := map[string]bool{}
	var apiPod string
	for i := range all.Items {
		p := &all.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		comp := p.Labels["app.kubernetes.io/component"]
		components[comp] = true
		if comp == "api" {
			apiPod = p.Name
		}
		pid := processOf(t, p)
		st := procStatus(t, pid)
		for k, want := range map[string]string{
			"Uid":        "65532 65532 65532 65532",
			"Gid":        "65532 65532 65532 65532",
			"CapEff":     "0000000000000000",
			"CapPrm":     "0000000000000000",
			"CapBnd":     "0000000000000000",
			"NoNewPrivs": "1",
			"Seccomp":    "2",
		} {
			if st[k] != want {
				t.Errorf("%s (pid %d): %s %q, want %q", p.Name, pid, k, st[k], want)
			}
		}
		if opts := rootMountOptions(t, pid); !slices.Contains(strings.Split(opts, ","), "ro") {
			t.Errorf("%s (pid %d): / mounted %s, not read-only", p.Name, pid, opts)
		}
	}
	for _, c := range []string{"coordinator", "api", "executor"} {
		if !components[c] {
			t.Fatalf("no running %s pod among %d", c, len(all.Items))
		}
	}
	// The container still works, and only /tmp (an emptyDir) is writable:
	// `indexify content download` inside the API pod writes a file.
	id, err := uploadOnce(s.api, s.ns, "written by a read-only container")
	if err != nil {
		t.Fatal(err)
	}
	s.acked = append(s.acked, uploaded{id, "written by a read-only container"})
	dl := func(file string) (string, error) {
		return kubectl(time.Minute, "-n", s.r.ns, "exec", apiPod, "--", "/indexify", "content", "download",
			"--server", "http://127.0.0.1:8900", "-n", s.ns, id, "--file", file)
	}
	if out, err := dl("/tmp/probe"); err != nil || !strings.Contains(out, "wrote") {
		t.Fatalf("download to /tmp in the API pod: %s %v", out, err)
	}
	if out, err := dl("/probe"); err == nil || !strings.Contains(out, "read-only file system") {
		t.Fatalf("download to / in the API pod: want a read-only file system error, got %s %v", out, err)
	}
	// runAsNonRoot is the kubelet's check, not the image's: the same image
	// told to run as UID 0 is refused before it starts.
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: idxk8s-root-probe}
spec:
  automountServiceAccountToken: false
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 0}
  containers:
  - name: probe
    image: %s:%s
    imagePullPolicy: Never
    args: [version]
`, appRepo, appTag)
	applyStdin(t, s.r.ns, pod)
	var reason, msg string
	harness.Eventually(t, time.Minute, "the kubelet refuses the root container", func() error {
		p, err := s.r.pod(t, "idxk8s-root-probe")
		if err != nil {
			return err
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Waiting != nil && c.State.Waiting.Reason == "CreateContainerConfigError" {
				reason, msg = c.State.Waiting.Reason, c.State.Waiting.Message
				return nil
			}
			if c.State.Terminated != nil || c.State.Running != nil {
				t.Fatalf("a runAsUser 0 container under runAsNonRoot ran: %+v", c.State)
			}
		}
		return fmt.Errorf("phase %s", p.Status.Phase)
	})
	if !strings.Contains(msg, "non-root") {
		t.Fatalf("refused with %s: %q, not the non-root policy", reason, msg)
	}
	t.Logf("root container refused: %s: %s", reason, msg)
	mustKubectl(t, "-n", s.r.ns, "delete", "pod", "idxk8s-root-probe", "--wait=false")
	t.Logf("timing: securityContext: %s", time.Since(start).Round(time.Second))
}

func applyStdin(t testing.TB, ns, manifest string) {
	t.Helper()
	if _, err := kubectlIn(time.Minute, strings.NewReader(manifest), "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}
