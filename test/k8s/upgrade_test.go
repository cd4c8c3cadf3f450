package k8s

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/indexify-go/indexify/test/harness"
)

// The second tag cluster-up.sh gave our image in the cluster's containerd
// ($IDXK8S_APP_TAGS): a "new version" for helm upgrade.
const appTagNext = "idxk8s-b"

// reopenAPI replaces the port-forward after the API pod was replaced (a
// port-forward is pinned to the pod it started on). It lives as long as the
// whole TestChart.
func (s *suite) reopenAPI(t *testing.T) {
	t.Helper()
	addr, err := s.r.openPortForward(s.top, "svc/"+s.r.api(), 8900)
	if err != nil {
		t.Fatal(err)
	}
	s.api = harness.NewHTTP("http://" + addr)
}

// imageUpgrade: `helm upgrade --set image.tag=<new>` under an upload load
// sent through the API service (the API server's service proxy: ready
// endpoints only, one per request, as a client inside the cluster). The
// StatefulSet replaces the coordinators one at a time within the
// PodDisruptionBudget; the one API server, on the ReadWriteOnce claim the
// chart made, is replaced with the Recreate strategy (the old pod gone
// before the new one starts), so uploads are refused while no API pod is
// ready: they are counted and reported, and each must fall in such a span
// (the coordinators' rolling update itself fails nothing). No acknowledged
// upload may be lost, nor any byte of one.
func (s *suite) imageUpgrade(t *testing.T) {
	start := time.Now()
	names := s.names(replicas)
	oneCluster(t, s.api, time.Minute, names)
	old := s.coordinators(t)
	oldAPI := s.r.podUIDs(t, "api")
	before := contentIDs(t, s.api, s.ns)
	quorum := replicas/2 + 1

	via := s.r.serviceProxy(t, s.r.api(), "http")
	w := startWriter(via, s.ns, len(s.acked), 3000, 100*time.Millisecond)
	defer w.stop()
	resumed(t, w, 3, time.Minute)
	watch := s.r.watchRoll(t, quorum)
	defer watch.stop()

	s.sets = append(s.sets, "image.tag="+appTagNext)
	s.r.upgrade(t, testValues(t, s.sets...))
	mustKubectl(t, "-n", s.r.ns, "rollout", "status", "statefulset/"+s.r.sts(), "--timeout=300s")
	mustKubectl(t, "-n", s.r.ns, "rollout", "status", "deployment", "-l", "app.kubernetes.io/instance="+s.r.name, "--timeout=180s")
	rolled := time.Since(start)
	resumed(t, w, 10, time.Minute)
	seen := watch.stop()
	acks, failed := w.stop()
	s.acked = append(s.acked, acks...)
	var down time.Duration
	for _, d := range seen.apiDown {
		down += d.to.Sub(d.from)
	}
	t.Logf("rolling update done after %s; %d uploads acknowledged, %d refused; API not served for %s in %v; fewest ready coordinators %d in %d samples",
		rolled.Round(time.Second), len(acks), len(failed), down.Round(100*time.Millisecond), seen.apiDown, seen.minReady, seen.samples)
	if seen.samples < 10 {
		t.Errorf("only %d samples of the pods during the update", seen.samples)
	}
	if seen.minReady < quorum {
		t.Errorf("only %d coordinators ready at one point (the PDB keeps %d): %v", seen.minReady, quorum, seen.low[:min(5, len(seen.low))])
	}
	// Recreate (one API pod on the chart's claim, as TestChart installs
	// it): never two API servers on the claim at once.
	if s.r.apiStrategy(t) == appsv1.RecreateDeploymentStrategyType && seen.maxAPIPods > 1 {
		t.Errorf("%d API pods ran at once: two processes on one claim's index and SQLite files", seen.maxAPIPods)
	}
	const slack = time.Second
	var outside []refusal
	for _, f := range failed {
		if !seen.whileDown(f.sent, f.failed, slack) {
			outside = append(outside, f)
		}
	}
	if len(outside) > 0 {
		t.Errorf("%d of %d refused uploads were refused while an API pod was ready (API down %v), e.g. %v",
			len(outside), len(failed), seen.apiDown, outside[:min(5, len(outside))])
	}

	// Every pod of the release runs the new tag; every coordinator and the
	// API server are new pods.
	var all corev1.PodList
	if err := getJSON(t, &all, "-n", s.r.ns, "pods", "-l", "app.kubernetes.io/instance="+s.r.name); err != nil {
		t.Fatal(err)
	}
	for _, p := range all.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if img := p.Spec.Containers[0].Image; img != appRepo+":"+appTagNext {
			t.Errorf("%s runs %s after the upgrade", p.Name, img)
		}
	}
	for n, p := range s.coordinators(t) {
		if p.uid == old[n].uid {
			t.Errorf("%s was not replaced", n)
		}
	}
	for uid := range s.r.podUIDs(t, "api") {
		if oldAPI[uid] {
			t.Errorf("API pod %s was not replaced", uid)
		}
	}
	pdb := s.r.pdb(t)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != replicas-quorum {
		t.Fatalf("PDB after the upgrade: maxUnavailable %v", pdb.Spec.MaxUnavailable)
	}
	harness.Eventually(t, time.Minute, "the PDB allows 1 disruption again", func() error {
		if p := s.r.pdb(t); p.Status.DisruptionsAllowed != 1 {
			return fmt.Errorf("allowed %d", p.Status.DisruptionsAllowed)
		}
		return nil
	})

	s.reopenAPI(t)
	v := oneCluster(t, s.api, 2*time.Minute, names)
	if v.ClusterID != s.clusterID {
		t.Fatalf("cluster id %s, was %s", v.ClusterID, s.clusterID)
	}
	s.keptAll(t, before, acks)
	// The new API pod serves the bytes the old one stored (on the claim).
	s.bytesKept(t)
	text := "extracted by the upgraded release"
	id, err := uploadOnce(s.api, s.ns, text)
	if err != nil {
		t.Fatal(err)
	}
	s.acked = append(s.acked, uploaded{id, text})
	if got := strings.Join(chunksOf(t, s.api, s.ns, id), ""); got != text {
		t.Fatalf("chunks after the upgrade: %q", got)
	}
	t.Logf("timing: helm upgrade image: %s", time.Since(start).Round(time.Second))
}

// scale: `helm upgrade --set coordinator.replicas=5`, then back to 3. The
// running pods are not rolled; the members follow the count; data is kept;
// the scaled-away pods' claims go (whenScaled: Delete).
func (s *suite) scale(t *testing.T) {
	start := time.Now()
	oneCluster(t, s.api, time.Minute, s.names(3))
	old := s.coordinators(t)
	before := contentIDs(t, s.api, s.ns)
	var acked []uploaded
	upload := func(what string) {
		t.Helper()
		text := "written " + what
		var id string
		harness.Eventually(t, time.Minute, "an upload "+what, func() (err error) {
			id, err = uploadOnce(s.api, s.ns, text)
			return err
		})
		acked = append(acked, uploaded{id, text})
	}
	unrolled := func() {
		t.Helper()
		now := s.coordinators(t)
		for _, n := range s.names(3) {
			if now[n].uid != old[n].uid {
				t.Errorf("%s was replaced by the scaling", n)
			}
		}
	}

	for _, step := range []struct{ to, maxUnavailable int }{{5, 2}, {3, 1}} {
		stepStart := time.Now()
		s.sets = append(s.sets, fmt.Sprintf("coordinator.replicas=%d", step.to))
		s.r.upgrade(t, testValues(t, s.sets...))
		harness.Eventually(t, 3*time.Minute, fmt.Sprintf("%d coordinator pods", step.to), func() error {
			if n := len(s.r.coordinatorPods(t)); n != step.to {
				return fmt.Errorf("%d pods", n)
			}
			return nil
		})
		mustKubectl(t, "-n", s.r.ns, "rollout", "status", "statefulset/"+s.r.sts(), "--timeout=300s")
		v := oneCluster(t, s.api, 7*time.Minute, s.names(step.to))
		if v.ClusterID != s.clusterID {
			t.Fatalf("cluster id %s, was %s", v.ClusterID, s.clusterID)
		}
		t.Logf("%d healthy voters %s after helm upgrade", step.to, time.Since(stepStart).Round(time.Second))
		unrolled()
		if p := s.r.pdb(t); p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != step.maxUnavailable {
			t.Errorf("PDB with %d replicas: maxUnavailable %v, want %d", step.to, p.Spec.MaxUnavailable, step.maxUnavailable)
		}
		upload(fmt.Sprintf("with %d coordinators", step.to))
	}
	// The scaled-away pods' claims were deleted, the others kept.
	harness.Eventually(t, time.Minute, "only the 3 remaining pods' claims", func() error {
		out, err := kubectl(30*time.Second, "-n", s.r.ns, "get", "pvc", "-o", "name", "-l", "app.kubernetes.io/component=coordinator")
		if err != nil {
			return err
		}
		got := strings.Fields(out)
		if len(got) != 3 {
			return fmt.Errorf("claims %v", got)
		}
		for i, n := range s.names(3) {
			if want := "persistentvolumeclaim/data-" + n; got[i] != want {
				return fmt.Errorf("claims %v", got)
			}
		}
		return nil
	})
	s.keptAll(t, before, acked)
	s.acked = append(s.acked, acked...)
	s.bytesKept(t)
	t.Logf("timing: scale 3 -> 5 -> 3: %s", time.Since(start).Round(time.Second))
}
