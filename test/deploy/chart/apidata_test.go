package chart

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const apiClaim = apiName + "-data"

// checkAPIData: the API server's local state (disk blobs, the embedded
// index, SQLite files) is on one volume at /var/lib/indexify and nowhere
// else; a claim the chart makes is mounted and kept on uninstall; the
// update strategy never has two pods open that state at once nor needs a
// ReadWriteOnce claim on two pods; without a claim the update rolls one
// extra pod at a time.
func checkAPIData(t *testing.T, r *Rendered) {
	t.Helper()
	api := r.Deployments[apiName]
	spec := api.Spec.Template.Spec
	ac := container(t, spec, "api")
	embedded := mustArg(t, ac.Args, "--vector-store") == "embedded" || mustArg(t, ac.Args, "--structured-store") == "sqlite"
	local := mustArg(t, ac.Args, "--blob-store") == "disk" || embedded
	var data *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == "data" {
			data = &spec.Volumes[i]
		}
	}
	if local != (data != nil) {
		t.Fatalf("local state %v but data volume %+v", local, data)
	}
	for _, flag := range []string{"--blob-dir", "--index-dir", "--sql-dir"} {
		if dir, ok := argValue(ac.Args, flag); ok && !strings.HasPrefix(dir, mountPath(t, ac, "data")+"/") {
			t.Errorf("%s=%s is not on the data volume", flag, dir)
		}
	}
	made := r.PVCs[apiClaim]
	if len(r.PVCs) > 1 || (len(r.PVCs) == 1 && made == nil) {
		t.Errorf("claims %v, want at most %s", keys(r.PVCs), apiClaim)
	}
	strategy := api.Spec.Strategy
	manifest := r.ManifestsByFile["indexify/templates/api.yaml"]
	if data == nil || data.PersistentVolumeClaim == nil {
		if made != nil {
			t.Errorf("claim %s made but not mounted (data volume %+v)", apiClaim, data)
		}
		if strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || strategy.RollingUpdate == nil ||
			strategy.RollingUpdate.MaxUnavailable == nil || strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
			t.Errorf("no claim: strategy %+v, want RollingUpdate with maxUnavailable 0", strategy)
		}
		return
	}
	if mountPath(t, ac, "data") != "/var/lib/indexify" {
		t.Errorf("data volume mounted at %s", mountPath(t, ac, "data"))
	}
	replicas := *api.Spec.Replicas
	claim := data.PersistentVolumeClaim.ClaimName
	if made != nil {
		if claim != made.Name {
			t.Errorf("the chart made %s but the pods mount %s", made.Name, claim)
		}
		if made.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("claim %s annotations %v: helm uninstall would delete the data", made.Name, made.Annotations)
		}
		if len(made.Spec.AccessModes) != 1 {
			t.Fatalf("claim %s access modes %v, want one", made.Name, made.Spec.AccessModes)
		}
		if q := made.Spec.Resources.Requests[corev1.ResourceStorage]; q.IsZero() {
			t.Errorf("claim %s requests no storage", made.Name)
		}
		if replicas > 1 && made.Spec.AccessModes[0] != corev1.ReadWriteMany {
			t.Errorf("%d replicas on the %s claim the chart made", replicas, made.Spec.AccessModes[0])
		}
	}
	mustRecreate := replicas <= 1 && (embedded || (made != nil && made.Spec.AccessModes[0] != corev1.ReadWriteMany))
	switch {
	case mustRecreate && strategy.Type != appsv1.RecreateDeploymentStrategyType:
		t.Errorf("one pod on claim %s (embedded stores %v): strategy %s, want Recreate", claim, embedded, strategy.Type)
	case replicas > 1 && strategy.Type != appsv1.RollingUpdateDeploymentStrategyType:
		t.Errorf("%d replicas on a shared claim: strategy %s, want RollingUpdate", replicas, strategy.Type)
	}
	if strategy.Type == appsv1.RecreateDeploymentStrategyType &&
		(strategy.RollingUpdate != nil || !strings.Contains(manifest, "rollingUpdate: null")) {
		// null, not absent: `helm upgrade` from a RollingUpdate release
		// must remove the live object's rollingUpdate, or the API server
		// refuses the patch.
		t.Errorf("Recreate without rollingUpdate: null")
	}
}

func TestAPIPersistence(t *testing.T) {
	strategyOf := func(r *Rendered) appsv1.DeploymentStrategyType { return r.Deployments[apiName].Spec.Strategy.Type }
	dataClaim := func(t *testing.T, r *Rendered) string {
		t.Helper()
		v := volume(t, r.Deployments[apiName].Spec.Template.Spec, "data")
		if v.PersistentVolumeClaim == nil {
			return ""
		}
		return v.PersistentVolumeClaim.ClaimName
	}

	t.Run("defaults: a kept ReadWriteOnce claim, Recreate", func(t *testing.T) {
		r := mustRender(t, nil)
		checkAPIData(t, r)
		c := r.PVCs[apiClaim]
		if c == nil || dataClaim(t, r) != apiClaim {
			t.Fatalf("claims %v, data volume on %q", keys(r.PVCs), dataClaim(t, r))
		}
		if got := c.Spec.AccessModes; len(got) != 1 || got[0] != corev1.ReadWriteOnce {
			t.Errorf("access modes %v", got)
		}
		if q := c.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("10Gi")) != 0 {
			t.Errorf("size %s, want 10Gi", q.String())
		}
		if c.Spec.StorageClassName != nil {
			t.Errorf("storage class %q, want the cluster default (none named)", *c.Spec.StorageClassName)
		}
		if strategyOf(r) != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("strategy %s", strategyOf(r))
		}
		for _, want := range []string{apiClaim, "helm.sh/resource-policy=keep", "kubectl delete pvc " + apiClaim, "Recreate"} {
			if !strings.Contains(r.Notes, want) {
				t.Errorf("NOTES do not say %q:\n%s", want, r.Notes)
			}
		}
		if strings.Contains(r.Notes, "WARNING") {
			t.Errorf("NOTES warn with every store on claims:\n%s", r.Notes)
		}
	})

	t.Run("size and storage class", func(t *testing.T) {
		r := mustRender(t, Values("server.persistence.size", "50Gi", "server.persistence.storageClass", "fast"))
		c := r.PVCs[apiClaim]
		if q := c.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("50Gi")) != 0 {
			t.Errorf("size %s", q.String())
		}
		if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "fast" {
			t.Errorf("storage class %v", c.Spec.StorageClassName)
		}
	})

	t.Run("disabled: an emptyDir, RollingUpdate, NOTES warn", func(t *testing.T) {
		r := mustRender(t, Values("server.persistence.enabled", false))
		checkAPIData(t, r)
		if len(r.PVCs) != 0 || volume(t, r.Deployments[apiName].Spec.Template.Spec, "data").EmptyDir == nil {
			t.Fatalf("claims %v, data volume not an emptyDir", keys(r.PVCs))
		}
		if strategyOf(r) != appsv1.RollingUpdateDeploymentStrategyType {
			t.Errorf("strategy %s", strategyOf(r))
		}
		if !strings.Contains(r.Notes, "WARNING: server.persistence.enabled=false") || !strings.Contains(r.Notes, "loses all of it") {
			t.Errorf("NOTES do not warn about losing the API server's data:\n%s", r.Notes)
		}
	})

	t.Run("an existing claim: none made, Recreate unless ReadWriteMany without embedded stores", func(t *testing.T) {
		for _, c := range []struct {
			name     string
			values   map[string]any
			strategy appsv1.DeploymentStrategyType
		}{
			{"ReadWriteOnce", Values("server.persistence.existingClaim", "mine"), appsv1.RecreateDeploymentStrategyType},
			{"by its former key", Values("server.blob.existingClaim", "mine"), appsv1.RecreateDeploymentStrategyType},
			{"ReadWriteMany with embedded stores", Values("server.persistence.existingClaim", "mine",
				"server.persistence.accessMode", "ReadWriteMany"), appsv1.RecreateDeploymentStrategyType},
			{"ReadWriteMany, shared stores, disk blobs", sharedStores(Values("server.persistence.existingClaim", "mine",
				"server.persistence.accessMode", "ReadWriteMany")), appsv1.RollingUpdateDeploymentStrategyType},
			{"ReadWriteMany, 3 replicas", sharedStores(Values("server.replicas", 3, "server.persistence.existingClaim", "mine",
				"server.persistence.accessMode", "ReadWriteMany")), appsv1.RollingUpdateDeploymentStrategyType},
			{"the same claim under both keys", Values("server.persistence.existingClaim", "mine", "server.blob.existingClaim", "mine"),
				appsv1.RecreateDeploymentStrategyType},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := mustRender(t, c.values)
				checkAPIData(t, r)
				if len(r.PVCs) != 0 || dataClaim(t, r) != "mine" {
					t.Fatalf("claims %v, data volume on %q", keys(r.PVCs), dataClaim(t, r))
				}
				if strategyOf(r) != c.strategy {
					t.Errorf("strategy %s, want %s", strategyOf(r), c.strategy)
				}
				if !strings.Contains(r.Notes, "your claim mine") {
					t.Errorf("NOTES do not name the claim:\n%s", r.Notes)
				}
			})
		}
	})

	t.Run("nothing local: no volume, no claim, RollingUpdate", func(t *testing.T) {
		r := mustRender(t, sharedStores(s3Values("server.replicas", 2)))
		checkAPIData(t, r)
		for _, v := range r.Deployments[apiName].Spec.Template.Spec.Volumes {
			if v.Name == "data" {
				t.Errorf("a data volume with S3 and the shared stores")
			}
		}
		if len(r.PVCs) != 0 || strategyOf(r) != appsv1.RollingUpdateDeploymentStrategyType {
			t.Errorf("claims %v, strategy %s", keys(r.PVCs), strategyOf(r))
		}
		if strings.Contains(r.Notes, "PersistentVolumeClaim") || strings.Contains(r.Notes, "emptyDir") {
			t.Errorf("NOTES speak of API data that does not exist:\n%s", r.Notes)
		}
	})

	t.Run("the chart's ReadWriteMany claim for several replicas", func(t *testing.T) {
		r := mustRender(t, sharedStores(Values("server.replicas", 2, "server.persistence.accessMode", "ReadWriteMany")))
		checkAPIData(t, r)
		if c := r.PVCs[apiClaim]; c == nil || c.Spec.AccessModes[0] != corev1.ReadWriteMany {
			t.Fatalf("claims %v", keys(r.PVCs))
		}
		if strategyOf(r) != appsv1.RollingUpdateDeploymentStrategyType {
			t.Errorf("strategy %s", strategyOf(r))
		}
	})
}

func TestBadAPIPersistenceValuesFail(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"2 replicas on the chart's ReadWriteOnce claim", sharedStores(Values("server.replicas", 2)), "ReadWriteOnce claim the chart makes"},
		{"2 replicas on an emptyDir", sharedStores(Values("server.replicas", 2, "server.persistence.enabled", false)), "emptyDir per pod"},
		{"two different claims", Values("server.persistence.existingClaim", "a", "server.blob.existingClaim", "b"), "two different claims"},
		{"a claim with persistence off", Values("server.persistence.existingClaim", "a", "server.persistence.enabled", false), "enabled is false"},
		{"a claim with nothing local", sharedStores(s3Values("server.persistence.existingClaim", "a")), "keeps nothing on disk"},
		{"unknown access mode", Values("server.persistence.accessMode", "ReadOnlyMany"), "accessMode"},
		{"bad size", Values("server.persistence.size", "ten gigs"), "size"},
		{"bad claim name", Values("server.persistence.existingClaim", "My_Claim"), "existingClaim"},
		{"typo", Values("server.persistence.enable", true), "enable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render succeeded or failed for another reason: %v (want %q)", err, c.want)
			}
		})
	}
}
