package k8s

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"helm.sh/helm/v3/pkg/action"

	"github.com/indexify-go/indexify/test/harness"
)

// TestAPIDataKept: what the API server's claim promises, on the real
// cluster, in one release (1 coordinator, to spare the machine):
//   - installed with server.persistence.enabled=false, the API server's data
//     is on an emptyDir and the Deployment rolls (RollingUpdate);
//   - `helm upgrade` to the default makes the claim and switches the
//     Deployment to Recreate (the chart's `rollingUpdate: null` lets the
//     API server accept that patch); the bytes uploaded on the emptyDir are
//     gone with the old pod (the documented loss), listed but not served;
//   - from then on the bytes survive `kubectl delete pod` of the API server;
//   - `helm uninstall` keeps the claim (helm.sh/resource-policy: keep), and
//     a new `helm install` of the release in the namespace takes it over:
//     the content and its bytes are there (the coordinator's claim is
//     retained too).
func TestAPIDataKept(t *testing.T) {
	start := time.Now()
	r := newRelease(t)
	sets := []string{"coordinator.replicas=1"}
	claim := r.api() + "-data"
	r.install(t, testValues(t, append(sets, "server.persistence.enabled=false")...))
	r.waitReady(t, 5*time.Minute)
	if got := r.apiStrategy(t); got != appsv1.RollingUpdateDeploymentStrategyType {
		t.Fatalf("API strategy %s on an emptyDir, want RollingUpdate", got)
	}
	if out, err := kubectl(30*time.Second, "-n", r.ns, "get", "pvc", claim); err == nil {
		t.Fatalf("a claim with persistence off:\n%s", out)
	}
	api := harness.NewHTTP("http://" + r.portForward(t, "svc/"+r.api(), 8900))
	const ns = "kept"
	createGraph(t, api, ns)
	const onEmptyDir = "uploaded while the API server's data was on an emptyDir"
	lost, err := uploadOnce(api, ns, onEmptyDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := download(t, api, ns, lost); got.code != http.StatusOK || got.body != onEmptyDir {
		t.Fatalf("download before the upgrade: %v", got)
	}

	// helm upgrade to the default: the claim, Recreate.
	upStart := time.Now()
	oldAPI := r.podUIDs(t, "api")
	r.upgrade(t, testValues(t, sets...))
	mustKubectl(t, "-n", r.ns, "rollout", "status", "deployment/"+r.api(), "--timeout=180s")
	if got := r.apiStrategy(t); got != appsv1.RecreateDeploymentStrategyType {
		t.Fatalf("API strategy %s on the chart's claim, want Recreate", got)
	}
	r.claimBound(t, claim)
	r.waitNewAPIPod(t, oldAPI)
	t.Logf("helm upgrade to the claim: new API pod ready after %s", time.Since(upStart).Round(time.Second))
	api = harness.NewHTTP("http://" + r.portForward(t, "svc/"+r.api(), 8900))
	// The loss the default now prevents: listed, bytes gone.
	if !contentIDs(t, api, ns)[lost] {
		t.Fatalf("content %s is no longer listed", lost)
	}
	if got := download(t, api, ns, lost); got.code != http.StatusNotFound || !strings.Contains(got.body, "not available on this server") {
		t.Fatalf("the emptyDir's bytes after the pod was replaced: %v, want 404 not available", got)
	}

	const onClaim = "uploaded while the API server's data was on its claim"
	kept, err := uploadOnce(api, ns, onClaim)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(chunksOf(t, api, ns, kept), ""); got != onClaim {
		t.Fatalf("chunks %q", got)
	}

	// kubectl delete pod: the ReplicaSet replaces it (no Recreate here: the
	// replacement is made as soon as the old pod is terminating).
	delStart := time.Now()
	oldAPI = r.podUIDs(t, "api")
	watch := r.watchRoll(t, 1)
	mustKubectl(t, "-n", r.ns, "delete", "pod", "-l", "app.kubernetes.io/component=api", "--wait=false")
	r.waitNewAPIPod(t, oldAPI)
	seen := watch.stop()
	t.Logf("kubectl delete pod of the API server: new pod ready after %s; API pods running at once: %d; API not served for %v",
		time.Since(delStart).Round(time.Second), seen.maxAPIPods, seen.apiDown)
	api = harness.NewHTTP("http://" + r.portForward(t, "svc/"+r.api(), 8900))
	if got := download(t, api, ns, kept); got.code != http.StatusOK || got.body != onClaim {
		t.Fatalf("bytes after kubectl delete pod: %v", got)
	}

	// helm uninstall keeps the claim; a new install takes it over.
	un := action.NewUninstall(r.helmConfig())
	un.Timeout = time.Minute
	if _, err := un.Run(r.name); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	harness.Eventually(t, 2*time.Minute, "every pod of the release gone", func() error {
		var pods corev1.PodList
		if err := getJSON(t, &pods, "-n", r.ns, "pods", "-l", "app.kubernetes.io/instance="+r.name); err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d pods left, e.g. %s", n, pods.Items[0].Name)
		}
		return nil
	})
	var pvc corev1.PersistentVolumeClaim
	if err := getJSON(t, &pvc, "-n", r.ns, "pvc", claim); err != nil {
		t.Fatalf("helm uninstall deleted the API server's claim: %v", err)
	}
	if pvc.DeletionTimestamp != nil || pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("claim %s after helm uninstall: deleting %v, %s", claim, pvc.DeletionTimestamp != nil, pvc.Status.Phase)
	}
	t.Logf("after helm uninstall: claim %s still bound to %s", claim, pvc.Spec.VolumeName)
	r.install(t, testValues(t, sets...))
	r.waitReady(t, 5*time.Minute)
	var again corev1.PersistentVolumeClaim
	if err := getJSON(t, &again, "-n", r.ns, "pvc", claim); err != nil {
		t.Fatal(err)
	}
	if again.UID != pvc.UID || again.Spec.VolumeName != pvc.Spec.VolumeName {
		t.Fatalf("the new install has claim %s on %s, the kept one was %s on %s", again.UID, again.Spec.VolumeName, pvc.UID, pvc.Spec.VolumeName)
	}
	api = harness.NewHTTP("http://" + r.portForward(t, "svc/"+r.api(), 8900))
	harness.Eventually(t, 2*time.Minute, "the content kept across uninstall and install", func() error {
		if got := download(t, api, ns, kept); got.code != http.StatusOK || got.body != onClaim {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
	t.Logf("timing: API data kept: %s", time.Since(start).Round(time.Second))
}

type downloaded struct {
	code int
	body string
	err  error
}

func (d downloaded) String() string { return fmt.Sprintf("%d %v %q", d.code, d.err, d.body) }

func download(t testing.TB, api *harness.HTTP, ns, id string) downloaded {
	t.Helper()
	code, body, err := api.Do(context.Background(), http.MethodGet, "/namespaces/"+ns+"/content/"+id+"/download", "", nil)
	return downloaded{code, string(body), err}
}

func (r *release) apiStrategy(t testing.TB) appsv1.DeploymentStrategyType {
	t.Helper()
	var d appsv1.Deployment
	if err := getJSON(t, &d, "-n", r.ns, "deployment", r.api()); err != nil {
		t.Fatal(err)
	}
	return d.Spec.Strategy.Type
}

// claimBound checks the claim is bound and kept by helm uninstall.
func (r *release) claimBound(t testing.TB, claim string) {
	t.Helper()
	var pvc corev1.PersistentVolumeClaim
	if err := getJSON(t, &pvc, "-n", r.ns, "pvc", claim); err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Fatalf("claim %s: %s, annotations %v", claim, pvc.Status.Phase, pvc.Annotations)
	}
}

// waitNewAPIPod waits for a ready API pod that is none of old, and for the
// old ones to be gone.
func (r *release) waitNewAPIPod(t testing.TB, old map[string]bool) {
	t.Helper()
	harness.Eventually(t, 3*time.Minute, "a new API pod ready, the old one gone", func() error {
		var pods corev1.PodList
		if err := getJSON(t, &pods, "-n", r.ns, "pods", "-l", "app.kubernetes.io/instance="+r.name+",app.kubernetes.io/component=api"); err != nil {
			return err
		}
		fresh := 0
		for i := range pods.Items {
			p := &pods.Items[i]
			if old[string(p.UID)] {
				return fmt.Errorf("old pod %s still there (%s)", p.Name, p.Status.Phase)
			}
			if ok, _ := podReady(p); ok && p.DeletionTimestamp == nil {
				fresh++
			}
		}
		if fresh != 1 {
			return fmt.Errorf("%d new API pods ready", fresh)
		}
		return nil
	})
}
