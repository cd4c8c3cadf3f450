package k8s

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// heldClass is a storage class no volume has (until the test gives one):
// a claim of that class stays Pending, and so does the pod that needs it.
const heldClass = "idxk8s-held"

// TestInstallWithoutPodZero: pod 0 cannot start at install (its claim,
// made beforehand under the StatefulSet's claim name, stays unbound, so the
// scheduler keeps the pod Pending); pods 1 and 2 form the cluster and the
// API works end to end; once a volume is given to the claim, pod 0 starts
// and joins the same cluster.
func TestInstallWithoutPodZero(t *testing.T) {
	start := time.Now()
	r := newRelease(t)
	mustKubectl(t, "create", "namespace", r.ns)
	pod0 := r.sts() + "-0"
	claim := "data-" + pod0
	applyStdin(t, r.ns, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: %s
  resources: {requests: {storage: 10Gi}}
`, claim, heldClass))
	r.install(t, testValues(t))
	names := []string{pod0, r.sts() + "-1", r.sts() + "-2"}

	harness.Eventually(t, 4*time.Minute, "pods 1 and 2 ready, pod 0 pending unschedulable", func() error {
		for _, n := range names[1:] {
			p, err := r.pod(t, n)
			if err != nil {
				return err
			}
			if ok, _ := podReady(p); !ok {
				return fmt.Errorf("%s not ready (%s)", n, p.Status.Phase)
			}
		}
		return pendingUnschedulable(t, r, pod0)
	})
	t.Logf("pods 1 and 2 ready without pod 0 after %s", time.Since(r.installed).Round(time.Second))
	mustKubectl(t, "-n", r.ns, "wait", "--for=condition=Available", "deployment", "--all", "--timeout=180s")
	api := harness.NewHTTP("http://" + r.portForward(t, "svc/"+r.api(), 8900))

	// GET /cluster: one cluster led by 1 or 2, both healthy voters.
	var v wire.ClusterStatus
	harness.Eventually(t, 2*time.Minute, "a cluster of pods 1 and 2", func() error {
		v = wire.ClusterStatus{}
		code, body, err := api.JSON(http.MethodGet, "/cluster", nil, &v)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v %s", code, err, body)
		}
		if v.ClusterID == "" || !slices.Contains(names[1:], v.LeaderID) {
			return fmt.Errorf("cluster %q leader %q", v.ClusterID, v.LeaderID)
		}
		healthy := 0
		for _, m := range v.Members {
			if slices.Contains(names[1:], m.ID) && m.Suffrage == "voter" && m.Healthy {
				healthy++
			}
			if m.ID == pod0 && m.Healthy {
				return fmt.Errorf("%s healthy while its pod is pending", pod0)
			}
		}
		if healthy != 2 {
			return fmt.Errorf("members %+v", v.Members)
		}
		return nil
	})
	t.Logf("cluster %s led by %s, members %+v", v.ClusterID, v.LeaderID, v.Members)
	if err := pendingUnschedulable(t, r, pod0); err != nil {
		t.Fatal(err)
	}

	const ns = "nozero"
	createGraph(t, api, ns)
	text := "formed by pods 1 and 2 alone"
	id, err := uploadOnce(api, ns, text)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(chunksOf(t, api, ns, id), ""); got != text {
		t.Fatalf("chunks reassemble to %q", got)
	}

	// Give the claim a volume: one of the cluster's unused ones, moved to
	// the held class.
	var pvs corev1.PersistentVolumeList
	if err := getJSON(t, &pvs, "pv"); err != nil {
		t.Fatal(err)
	}
	pv := ""
	for _, p := range pvs.Items {
		if p.Status.Phase == corev1.VolumeAvailable && p.Spec.ClaimRef == nil {
			pv = p.Name
			break
		}
	}
	if pv == "" {
		t.Fatal("no Available volume left (restart the cluster: cluster-up.sh makes 30)")
	}
	mustKubectl(t, "patch", "pv", pv, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"storageClassName":%q}}`, heldClass))
	released := time.Now()
	harness.Eventually(t, 3*time.Minute, pod0+" bound, started and ready", func() error {
		p, err := r.pod(t, pod0)
		if err != nil {
			return err
		}
		if ok, _ := podReady(p); !ok {
			return fmt.Errorf("%s: %s", pod0, p.Status.Phase)
		}
		return nil
	})
	t.Logf("%s ready %s after its volume was given", pod0, time.Since(released).Round(time.Second))
	after := oneCluster(t, api, 2*time.Minute, names)
	if after.ClusterID != v.ClusterID {
		t.Fatalf("cluster id %s after pod 0 joined, was %s", after.ClusterID, v.ClusterID)
	}
	if !contentIDs(t, api, ns)[id] {
		t.Fatalf("content %s gone after pod 0 joined", id)
	}
	id2, err := uploadOnce(api, ns, "after pod 0 joined")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(chunksOf(t, api, ns, id2), ""); got != "after pod 0 joined" {
		t.Fatalf("chunks reassemble to %q", got)
	}
	t.Logf("timing: install without pod 0: %s", time.Since(start).Round(time.Second))
}

// pendingUnschedulable is nil when the pod exists, is Pending and the
// scheduler said why it cannot place it (its claim is unbound).
func pendingUnschedulable(t testing.TB, r *release, name string) error {
	p, err := r.pod(t, name)
	if err != nil {
		return err
	}
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		return fmt.Errorf("%s: %s on %q, want Pending unscheduled", name, p.Status.Phase, p.Spec.NodeName)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "PersistentVolumeClaim") {
			return nil
		}
	}
	return fmt.Errorf("%s: no unschedulable condition naming its claim: %+v", name, p.Status.Conditions)
}
