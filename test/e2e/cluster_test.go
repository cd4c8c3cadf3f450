package e2e

import (
	"fmt"
	"math/rand"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// Each test takes its own 127.0.<subnet>.x range so clusters never collide.

func createNamespace(api *harness.HTTP, name string) error {
	code, body, err := api.JSON(http.MethodPost, "/namespaces", wire.NamespaceRequest{Name: name}, nil)
	if err != nil {
		return err
	}
	if code/100 != 2 {
		return fmt.Errorf("create namespace %s: %d %s", name, code, body)
	}
	return nil
}

func namespaceSet(t *testing.T, api *harness.HTTP) map[string]bool {
	t.Helper()
	return namespaceSetAt(t, api, "linearizable")
}

// namespaceSetAt lists namespaces at a read consistency level.
func namespaceSetAt(t *testing.T, api *harness.HTTP, level string) map[string]bool {
	t.Helper()
	var out wire.Namespaces
	code, body, err := api.JSON(http.MethodGet, "/namespaces?consistency="+level, nil, &out)
	mustStatus(t, http.StatusOK, code, body, err, "list namespaces")
	set := map[string]bool{}
	for _, n := range out.Namespaces {
		set[n.Name] = true
	}
	return set
}

// Node 0 never starts: nodes 1 and 2 form the cluster and take writes; node 0
// joins when it finally starts.
func TestClusterFormsWithoutNodeZero(t *testing.T) {
	c := harness.NewCluster(t, 3, 11)
	c.Start(1)
	c.Start(2)
	c.WaitLeader(30 * time.Second)
	_, api := c.StartServer()
	harness.Eventually(t, 30*time.Second, "write accepted by a 2-of-3 cluster", func() error {
		return createNamespace(api, "formed-without-zero")
	})
	c.Start(0)
	c.WaitReady(0, 30*time.Second)
	// Node 0 is in the bootstrap voter list, but it joins with an empty log,
	// so it is kept a non-voter until it caught up (an empty voter could
	// elect a leader missing committed entries), then promoted.
	c.WaitVoters(0, c.IDs(0, 1, 2), 30*time.Second)
	harness.Eventually(t, 10*time.Second, "node 0 in the same cluster", func() error {
		st0, err := c.Status(0)
		if err != nil {
			return err
		}
		st1, err := c.Status(1)
		if err != nil {
			return err
		}
		if st0.GetClusterId() == "" || st0.GetClusterId() != st1.GetClusterId() {
			return fmt.Errorf("cluster ids differ: %q vs %q", st0.GetClusterId(), st1.GetClusterId())
		}
		return nil
	})
}

// All nodes started together, in a random order, form exactly one cluster.
func TestClusterSimultaneousStartFormsOneCluster(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	for round := 0; round < 3; round++ {
		c := harness.NewCluster(t, 3, 20+round)
		for _, i := range rng.Perm(3) {
			c.Start(i)
		}
		c.WaitLeader(30 * time.Second)
		ids := map[string]bool{}
		for i := range c.Nodes {
			c.WaitReady(i, 30*time.Second)
			c.WaitVoters(i, c.IDs(0, 1, 2), 30*time.Second)
			var id string
			harness.Eventually(t, 10*time.Second, "cluster id known", func() error {
				st, err := c.Status(i)
				if err != nil {
					return err
				}
				if id = st.GetClusterId(); id == "" {
					return fmt.Errorf("%s has no cluster id yet", c.Nodes[i].ID)
				}
				return nil
			})
			ids[id] = true
		}
		if len(ids) != 1 {
			t.Fatalf("round %d: %d cluster ids: %v", round, len(ids), ids)
		}
		for i := range c.Nodes {
			c.Nodes[i].Kill()
		}
	}
}

// A node whose disk was wiped joins the existing cluster and never bootstraps
// a new one.
func TestClusterWipedNodeRejoins(t *testing.T) {
	c := harness.NewCluster(t, 3, 12)
	for i := range c.Nodes {
		c.Start(i)
	}
	c.WaitLeader(30 * time.Second)
	_, api := c.StartServer()
	harness.Eventually(t, 30*time.Second, "first write", func() error { return createNamespace(api, "before-wipe") })
	c.WaitReady(0, 30*time.Second) // ready implies the cluster id is known
	before, err := c.Status(0)
	if err != nil || before.GetClusterId() == "" {
		t.Fatalf("status of a ready node: %v %v", before, err)
	}

	victim := 2
	if l := c.WaitLeader(10 * time.Second); l == victim {
		victim = 1
	}
	c.Nodes[victim].Kill()
	c.Wipe(victim)
	c.Start(victim)
	c.WaitReady(victim, 60*time.Second)
	st, err := c.Status(victim)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetClusterId() != before.GetClusterId() {
		t.Fatalf("wiped node is in cluster %q, want %q", st.GetClusterId(), before.GetClusterId())
	}
	c.WaitVoters(victim, c.IDs(0, 1, 2), 30*time.Second)
	// The data written before the wipe came back through the snapshot/log.
	if !namespaceSetAt(t, api, "linearizable")["before-wipe"] {
		t.Fatal("write from before the wipe is missing")
	}
}

// writeLoad creates namespaces through the API server until stop is closed,
// recording which writes were acknowledged and how many failed.
type writeLoad struct {
	mu     sync.Mutex
	acked  []string
	failed int
	done   chan struct{}
	stop   chan struct{}
}

func startWriteLoad(api *harness.HTTP, prefix string) *writeLoad {
	w := &writeLoad{done: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; i < 100000; i++ { // bounded; stop normally ends it first
			select {
			case <-w.stop:
				return
			default:
			}
			name := fmt.Sprintf("%s-%d", prefix, i)
			err := createNamespace(api, name)
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, name)
			} else {
				w.failed++
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writeLoad) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writeLoad) finish() ([]string, int) {
	close(w.stop)
	<-w.done
	return w.acked, w.failed
}

func leaderFailover(t *testing.T, nodes, subnet int, sig syscall.Signal) (failed int) {
	c := harness.NewCluster(t, nodes, subnet)
	for i := range c.Nodes {
		c.Start(i)
	}
	leader := c.WaitLeader(30 * time.Second)
	for i := range c.Nodes {
		c.WaitReady(i, 30*time.Second)
	}
	_, api := c.StartServer()
	load := startWriteLoad(api, "w")
	harness.Eventually(t, 30*time.Second, "writes flowing", func() error {
		if load.count() < 20 {
			return fmt.Errorf("%d acked", load.count())
		}
		return nil
	})
	if sig == syscall.SIGKILL {
		c.Nodes[leader].Kill()
	} else {
		c.Nodes[leader].Signal(sig)
		if !c.Nodes[leader].Wait(30 * time.Second) {
			t.Fatalf("leader did not exit after %v", sig)
		}
	}
	mark := load.count()
	harness.Eventually(t, 30*time.Second, "writes resume after the leader left", func() error {
		if load.count() < mark+20 {
			return fmt.Errorf("%d acked since", load.count()-mark)
		}
		return nil
	})
	acked, failed := load.finish()
	got := namespaceSet(t, api)
	for _, name := range acked {
		if !got[name] {
			t.Errorf("acknowledged write %s lost", name)
		}
	}
	t.Logf("%d writes acknowledged, %d failed", len(acked), failed)
	return failed
}

func TestClusterKillLeaderLosesNoAcknowledgedWrite3(t *testing.T) {
	leaderFailover(t, 3, 13, syscall.SIGKILL)
}

func TestClusterKillLeaderLosesNoAcknowledgedWrite5(t *testing.T) {
	leaderFailover(t, 5, 14, syscall.SIGKILL)
}

// SIGTERM on the leader hands leadership off: clients see no error at all.
func TestClusterSigtermLeaderClientsSeeNoError(t *testing.T) {
	if failed := leaderFailover(t, 3, 15, syscall.SIGTERM); failed != 0 {
		t.Fatalf("%d client writes failed during a SIGTERM hand-off", failed)
	}
}
