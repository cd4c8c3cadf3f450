package docker

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/deploy/chart"
	"github.com/indexify-go/indexify/test/harness"
)

const (
	apiDeploy  = chart.ReleaseName + "-api"
	execDeploy = chart.ReleaseName + "-executor-default"
)

// values of every Docker scenario: the defaults, with a shorter autopilot
// stabilisation so a scaled-up member becomes a voter quickly.
func testValues(replicas int) map[string]any {
	return chart.Values("coordinator.replicas", replicas, "coordinator.autopilot.stabilization", "2s")
}

// install plays `helm install`: every pod created at once (Parallel). It
// returns a client of the API pod, the coordinator pods and the API pod.
func install(t *testing.T, k *Kube, replicas int) (*harness.HTTP, []*Pod, *Pod) {
	t.Helper()
	var coords []*Pod
	for i := range replicas {
		coords = append(coords, k.StartCoordinator(i))
	}
	api := k.StartDeploymentPod(apiDeploy, "5f7d9c-x2m4q")
	k.StartDeploymentPod(execDeploy, "6b8c4d-p9r2t")
	k.WaitReady(90*time.Second, append(coords, api)...)
	return harness.NewHTTP("http://" + api.Addr(apiPort)), coords, api
}

// The lifecycle of one release: first start, the API end to end, a rolling
// restart under load, the leader's pod recreated, every pod recreated at
// once, scaling 3 -> 5 -> 3, and the API server's pod replaced. One cluster
// goes through all of it, in order, as a real release would; every
// acknowledged upload's bytes are checked after each step that replaces
// pods.
func TestReleaseLifecycle(t *testing.T) {
	k := New(t, testValues(3))
	api, _, apiPod := install(t, k, 3)
	voters3 := coordinatorNames(k, 3)
	clusterID, _ := waitCluster(t, k, 60*time.Second, voters3)

	// Identity and addresses are exactly what the chart rendered.
	sts := k.Rendered().StatefulSets[k.StatefulSetName()]
	args := podArgs(sts.Spec.Template, k.CoordinatorPod(1))
	if !slices.Contains(args, "--advertise="+k.CoordinatorPod(1)+"."+sts.Spec.ServiceName+":8970") {
		t.Fatalf("pod 1 args %q lack its DNS advertise address", args)
	}

	const text = "abcdefghijklmnopqrstuvwxyz0123456789"
	ns := "lifecycle"
	var acked []uploaded
	t.Run("fresh install serves the API end to end", func(t *testing.T) {
		createNamespaceAndGraph(t, api, ns)
		id := upload(t, api, ns, text)
		acked = append(acked, uploaded{id, text})
		if got := strings.Join(chunksOf(t, api, ns, id), ""); got != text {
			t.Fatalf("chunks reassemble to %q", got)
		}
	})

	uploads := 1
	t.Run("rolling restart fails no client request", func(t *testing.T) {
		stop := make(chan struct{})
		done := make(chan []error)
		var ok atomic.Int64
		var rolled []uploaded // written by the goroutine until done
		go func() {
			var errs []error
			// Bounded in time and count; paced so the load does not starve
			// the 2-core machine the pods run on.
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			deadline := time.Now().Add(4 * time.Minute)
			for i := 0; i < 20000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					done <- errs
					return
				case <-tick.C:
				}
				text := fmt.Sprintf("rolling %d", i)
				if id, err := uploadOnce(api, ns, text); err != nil {
					errs = append(errs, err)
				} else {
					rolled = append(rolled, uploaded{id, text})
					ok.Add(1)
				}
			}
			done <- errs
		}()
		// The StatefulSet controller's order: highest ordinal first, the
		// next only once the restarted pod is ready again.
		for i := 2; i >= 0; i-- {
			name := k.CoordinatorPod(i)
			before := ok.Load()
			if code := k.Delete(name); code != 0 {
				t.Errorf("%s exited %d on SIGTERM", name, code)
			}
			if strings.Contains(k.logs[name], "leaving the cluster") {
				t.Errorf("%s left the cluster on a restart", name)
			}
			k.WaitReady(90*time.Second, k.StartCoordinator(i))
			waitCluster(t, k, 60*time.Second, voters3)
			if ok.Load() == before {
				t.Errorf("no request succeeded while %s restarted", name)
			}
		}
		close(stop)
		errs := <-done
		uploads += int(ok.Load())
		acked = append(acked, rolled...)
		bytesKept(t, api, ns, acked)
		if len(errs) > 0 {
			t.Fatalf("%d of %d requests failed during the rolling restart; first: %v", len(errs), ok.Load()+int64(len(errs)), errs[0])
		}
		if ok.Load() == 0 {
			t.Fatal("no request was made during the restart")
		}
		t.Logf("%d uploads, none failed", ok.Load())
	})

	t.Run("leader pod recreated with a new IP", func(t *testing.T) {
		_, leader := waitCluster(t, k, 30*time.Second, voters3)
		old := k.Pod(leader).IP
		ordinal := slices.Index(voters3, leader)
		k.Delete(leader)
		// Writes resume on the remaining majority.
		harness.Eventually(t, 30*time.Second, "write without the old leader", func() error {
			id, err := uploadOnce(api, ns, "after leader loss")
			if err == nil {
				acked = append(acked, uploaded{id, "after leader loss"})
			}
			return err
		})
		uploads++
		p := k.StartCoordinator(ordinal)
		if p.IP == old {
			t.Fatalf("recreated pod kept IP %s", old)
		}
		k.WaitReady(90*time.Second, p)
		if id, _ := waitCluster(t, k, 60*time.Second, voters3); id != clusterID {
			t.Fatalf("cluster id %s, want %s", id, clusterID)
		}
		if n := ingested(t, api, ns); n != uploads {
			t.Fatalf("%d uploads stored, want %d", n, uploads)
		}
		bytesKept(t, api, ns, acked)
	})

	t.Run("every pod recreated at once with new IPs", func(t *testing.T) {
		old := map[string]string{}
		for _, n := range voters3 {
			old[n] = k.Pod(n).IP
		}
		stopped := make(chan int, 3)
		for _, n := range voters3 {
			go func() { stopped <- k.Delete(n) }()
		}
		for range voters3 {
			<-stopped
		}
		var pods []*Pod
		for i, n := range voters3 {
			p := k.StartCoordinator(i)
			if p.IP == old[n] {
				t.Fatalf("%s kept IP %s", n, p.IP)
			}
			pods = append(pods, p)
		}
		k.WaitReady(120*time.Second, pods...)
		if id, _ := waitCluster(t, k, 60*time.Second, voters3); id != clusterID {
			t.Fatalf("cluster id %s after a full restart, want %s", id, clusterID)
		}
		harness.Eventually(t, 60*time.Second, "every upload still there", func() error {
			if n := ingested(t, api, ns); n != uploads {
				return fmt.Errorf("%d uploads stored, want %d", n, uploads)
			}
			return nil
		})
		id := upload(t, api, ns, text)
		uploads++
		acked = append(acked, uploaded{id, text})
		if got := strings.Join(chunksOf(t, api, ns, id), ""); got != text {
			t.Fatalf("chunks after full restart: %q", got)
		}
		bytesKept(t, api, ns, acked)
	})

	t.Run("scale 3 to 5 to 3", func(t *testing.T) {
		k.Upgrade(testValues(5))
		p3, p4 := k.StartCoordinator(3), k.StartCoordinator(4)
		k.WaitReady(90*time.Second, p3, p4)
		waitCluster(t, k, 90*time.Second, coordinatorNames(k, 5))

		// helm upgrade back to 3: the kubelet refreshes the mounted
		// ConfigMap (Upgrade rewrites the files), then the StatefulSet
		// controller deletes ordinals 4 and 3 (in parallel).
		k.Upgrade(testValues(3))
		codes := make(chan int, 2)
		for _, n := range []string{k.CoordinatorPod(4), k.CoordinatorPod(3)} {
			go func() { codes <- k.Delete(n) }()
		}
		for range 2 {
			if c := <-codes; c != 0 {
				t.Errorf("a scaled-away pod exited %d", c)
			}
		}
		for _, n := range []string{k.CoordinatorPod(3), k.CoordinatorPod(4)} {
			if !strings.Contains(k.logs[n], "leaving the cluster") {
				t.Errorf("%s did not leave on scale-down:\n%s", n, tail(k.logs[n], 20))
			}
		}
		if id, _ := waitCluster(t, k, 60*time.Second, voters3); id != clusterID {
			t.Fatalf("cluster id changed to %s", id)
		}
		id, err := uploadOnce(api, ns, "after scale-down")
		if err != nil {
			t.Fatal(err)
		}
		uploads++
		acked = append(acked, uploaded{id, "after scale-down"})
		if n := ingested(t, api, ns); n != uploads {
			t.Fatalf("%d uploads stored, want %d", n, uploads)
		}
	})

	// The API server keeps the uploads' bytes on the claim the chart makes
	// (by default): replaced as the Deployment's Recreate strategy does it
	// (the old pod gone before the new one starts), the new pod serves every
	// byte, and the executor extracts a new upload through it.
	t.Run("API pod replaced: every upload's bytes kept on its claim", func(t *testing.T) {
		d := k.Rendered().Deployments[apiDeploy]
		if d.Spec.Strategy.Type != "Recreate" {
			t.Fatalf("API Deployment strategy %s, want Recreate", d.Spec.Strategy.Type)
		}
		if code := k.Delete(apiPod.Name); code != 0 {
			t.Errorf("%s exited %d on SIGTERM", apiPod.Name, code)
		}
		p := k.StartDeploymentPod(apiDeploy, "5f7d9c-r3cr8")
		k.WaitReady(90*time.Second, p)
		api := clientFor(p)
		if n := ingested(t, api, ns); n != uploads {
			t.Fatalf("%d uploads listed, want %d", n, uploads)
		}
		bytesKept(t, api, ns, acked)
		const later = "extracted through the replaced API server"
		id := upload(t, api, ns, later)
		if got := strings.Join(chunksOf(t, api, ns, id), ""); got != later {
			t.Fatalf("chunks after the API pod was replaced: %q", got)
		}
		t.Logf("%d uploads, %d of them downloaded byte for byte after the API pod was replaced", len(acked), len(harness.Spread(len(acked), 50)))
	})
}
