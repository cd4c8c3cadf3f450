package docker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// The seed discussion's question: "won't it fail in any scenario where 0
// isn't running?" No: pods 1 and 2 form the cluster (static voter list,
// majority), serve the API, and pod 0 joins when it finally starts.
func TestFirstStartWithoutPodZero(t *testing.T) {
	k := New(t, testValues(3))
	p1, p2 := k.StartCoordinator(1), k.StartCoordinator(2)
	api := k.StartDeploymentPod(apiDeploy, "5f7d9c-h0ld0")
	k.StartDeploymentPod(execDeploy, "6b8c4d-h0ld0")
	k.WaitReady(90*time.Second, p1, p2, api)

	c := clientFor(api)
	createNamespaceAndGraph(t, c, "nozero")
	const text = "written before pod zero existed"
	id := upload(t, c, "nozero", text)
	if got := strings.Join(chunksOf(t, c, "nozero", id), ""); got != text {
		t.Fatalf("chunks %q", got)
	}
	var clusterID string
	harness.Eventually(t, 30*time.Second, "pods 1 and 2 agree on a cluster id", func() error {
		a, err := status(p1.Addr(grpcPort))
		if err != nil {
			return err
		}
		b, err := status(p2.Addr(grpcPort))
		if err != nil {
			return err
		}
		if a.GetClusterId() == "" || a.GetClusterId() != b.GetClusterId() {
			return fmt.Errorf("cluster ids %q and %q", a.GetClusterId(), b.GetClusterId())
		}
		clusterID = a.GetClusterId()
		return nil
	})

	p0 := k.StartCoordinator(0)
	k.WaitReady(90*time.Second, p0)
	if id, _ := waitCluster(t, k, 60*time.Second, coordinatorNames(k, 3)); id != clusterID {
		t.Fatalf("pod 0 is in cluster %s, want %s", id, clusterID)
	}
	if strings.Contains(k.Logs(p0.Name), "bootstrapped cluster") {
		t.Fatalf("pod 0 bootstrapped instead of joining:\n%s", tail(k.Logs(p0.Name), 20))
	}
}
