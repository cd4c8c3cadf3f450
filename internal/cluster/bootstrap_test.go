package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"
)

func TestSingleNodeBootstrapAndRestart(t *testing.T) {
	s := newSpecs(t, 1)[0]
	tn := startNode(t, s, nil, nil)
	waitLeader(t, tn)
	res := mustCreateNamespace(t, tn.node, "alpha")
	if _, ok := tn.fsm.Store().Namespace("alpha"); !ok {
		t.Fatal("leader's store lacks the write after Apply returned")
	}
	cid := tn.node.ClusterID()
	if cid == "" || tn.node.bootstraps.Load() != 1 {
		t.Fatalf("cluster id %q, bootstraps %d", cid, tn.node.bootstraps.Load())
	}
	if ok, why := tn.node.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	tn.stop()
	if tn.node.Live() {
		t.Fatal("live after shutdown")
	}

	// Restart on the same data dir with a fresh, empty FSM.
	tn2 := startNode(t, s, nil, nil)
	waitLeader(t, tn2)
	waitNamespace(t, tn2, "alpha")
	if tn2.node.bootstraps.Load() != 0 {
		t.Fatal("restarted node bootstrapped again")
	}
	if got := tn2.node.ClusterID(); got != cid {
		t.Fatalf("cluster id changed: %q -> %q", cid, got)
	}
	// The replayed request id returns the first result, not a second apply.
	res2 := mustCreateNamespace(t, tn2.node, "alpha")
	if res2.Index != res.Index {
		t.Fatalf("repeated request applied again at %d (first %d)", res2.Index, res.Index)
	}
	if v, _ := members(tn2.node); fmt.Sprint(v) != "[n1]" {
		t.Fatalf("voters %v", v)
	}
}

func staticMode(specs []*spec) func(*Config) {
	return func(c *Config) {
		c.BootstrapExpect = len(specs)
		c.Join = staticJoin(specs)
	}
}

// Static list: two of three nodes form the cluster; the third starts later,
// joins (never bootstraps) and catches up; it ends up a voter again.
func TestStaticTwoOfThreeThenThird(t *testing.T) {
	specs := newSpecs(t, 3)
	mode := staticMode(specs)
	n1 := startNode(t, specs[0], mode, nil)
	n2 := startNode(t, specs[1], mode, nil)
	leader := waitLeader(t, n1, n2)
	mustCreateNamespace(t, leader.node, "before")

	n3 := startNode(t, specs[2], mode, nil)
	waitLeader(t, n1, n2, n3)
	waitNamespace(t, n3, "before")
	waitVoters(t, []string{"n1", "n2", "n3"}, n1, n2, n3)
	mustCreateNamespace(t, n3.node, "after")
	waitNamespace(t, n3, "after")
	cid := n1.node.ClusterID()
	waitFor(t, "one cluster id", func() (bool, string) {
		ids := []string{n1.node.ClusterID(), n2.node.ClusterID(), n3.node.ClusterID()}
		return cid != "" && ids[1] == cid && ids[2] == cid, fmt.Sprint(ids)
	})
	waitFor(t, "n3 ready", func() (bool, string) { return n3.node.Ready() })
	if n3.node.bootstraps.Load() != 0 {
		t.Fatal("late static node bootstrapped instead of joining")
	}
}

// All three static nodes started together, in random order and with random
// small delays, always form exactly one cluster.
func TestStaticAllStartTogetherOneCluster(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			specs := newSpecs(t, 3)
			mode := staticMode(specs)
			order := rand.Perm(3)
			nodes := make([]*testNode, 3)
			var wg sync.WaitGroup
			for k, i := range order {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// A random stagger shuffles who probes first; it is not
					// synchronisation.
					time.Sleep(time.Duration(k) * time.Duration(rand.IntN(150)) * time.Millisecond)
					nodes[i] = startNode(t, specs[i], mode, nil)
				}()
			}
			wg.Wait()
			leader := waitLeader(t, nodes...)
			waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
			mustCreateNamespace(t, leader.node, "x")
			cid := leader.node.ClusterID()
			if len(cid) != 16 {
				t.Fatalf("leader's cluster id %q", cid)
			}
			for _, tn := range nodes {
				waitNamespace(t, tn, "x")
				waitFor(t, "cluster id on "+tn.spec.id, func() (bool, string) {
					return tn.node.ClusterID() == cid, tn.node.ClusterID()
				})
			}
		})
	}
}

// Discovery mode (IP entries without ids): waits for all BootstrapExpect
// nodes, then all bootstrap the same list.
func TestDiscoveryModeFormsOneCluster(t *testing.T) {
	specs := newSpecs(t, 3)
	var join []string
	for _, s := range specs {
		join = append(join, s.grpcAddr) // no ids: discovery mode
	}
	mode := func(c *Config) { c.BootstrapExpect = 3; c.Join = join }
	n1 := startNode(t, specs[0], mode, nil)
	n2 := startNode(t, specs[1], mode, nil)
	if n1.node.static != nil {
		t.Fatal("expected discovery mode")
	}
	// Two of three is not enough in discovery mode: after several complete
	// discovery rounds neither node has bootstrapped.
	waitFor(t, "discovery rounds", func() (bool, string) {
		return n1.node.discoverRounds.Load() >= 3 && n2.node.discoverRounds.Load() >= 3, ""
	})
	if n1.node.hasState() || n2.node.hasState() {
		t.Fatal("bootstrapped with 2 of 3 nodes in discovery mode")
	}
	n3 := startNode(t, specs[2], mode, nil)
	leader := waitLeader(t, n1, n2, n3)
	waitVoters(t, []string{"n1", "n2", "n3"}, n1, n2, n3)
	mustCreateNamespace(t, leader.node, "d")
	cid := leader.node.ClusterID()
	for _, tn := range []*testNode{n1, n2, n3} {
		waitNamespace(t, tn, "d")
		// A node that received its log before bootstrapping learns the id.
		waitFor(t, "cluster id on "+tn.spec.id, func() (bool, string) {
			return tn.node.ClusterID() == cid, tn.node.ClusterID()
		})
	}
}

// A node whose disk was wiped joins (never bootstraps), is temporarily a
// non-voter while its log is empty, receives a snapshot, and is a voter again.
func TestWipedDiskNodeRejoins(t *testing.T) {
	specs := newSpecs(t, 3)
	static := staticMode(specs)
	mode := func(c *Config) {
		static(c)
		c.SnapshotThreshold = 4
		c.TrailingLogs = 2
	}
	nodes := []*testNode{
		startNode(t, specs[0], mode, nil),
		startNode(t, specs[1], mode, nil),
		startNode(t, specs[2], mode, nil),
	}
	leader := waitLeader(t, nodes...)
	waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
	cid := leader.node.ClusterID()
	for i := range 10 {
		mustCreateNamespace(t, leader.node, fmt.Sprint("ns", i))
	}
	// Force a compacted log so the rejoining node needs a snapshot.
	if err := leader.node.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}

	victim := nodes[0]
	if victim == leader {
		victim = nodes[1]
	}
	victim.stop()
	if err := os.RemoveAll(victim.spec.dir); err != nil {
		t.Fatal(err)
	}
	var rest []*testNode
	for _, tn := range nodes {
		if tn != victim {
			rest = append(rest, tn)
		}
	}
	leader = waitLeader(t, rest...)
	mustCreateNamespace(t, leader.node, "while-down")

	// The log no longer starts at 1, so the fresh node can only catch up
	// through an InstallSnapshot.
	if first, err := leader.node.logs.FirstIndex(); err != nil || first <= 1 {
		t.Fatalf("leader log not compacted: first index %d, %v", first, err)
	}
	fresh := startNode(t, victim.spec, mode, nil)
	all := append(rest, fresh)
	waitNamespace(t, fresh, "while-down")
	waitNamespace(t, fresh, "ns0")
	waitVoters(t, []string{"n1", "n2", "n3"}, all...)
	if fresh.node.bootstraps.Load() != 0 {
		t.Fatal("wiped node bootstrapped")
	}
	waitFor(t, "cluster id on the wiped node", func() (bool, string) {
		return fresh.node.ClusterID() == cid, fresh.node.ClusterID()
	})
	for _, tn := range all {
		if got := tn.node.ClusterID(); got != cid {
			t.Fatalf("%s cluster id %q, want %q", tn.spec.id, got, cid)
		}
	}
	mustCreateNamespace(t, fresh.node, "after")
	waitNamespace(t, fresh, "after")
}

// A node restarting with the same id and state but a new IP gets its Raft
// address updated by the leader (no DNS name in use here).
func TestRestartWithNewIPUpdatesAddress(t *testing.T) {
	specs := newSpecs(t, 3)
	mode := staticMode(specs)
	nodes := []*testNode{
		startNode(t, specs[0], mode, nil),
		startNode(t, specs[1], mode, nil),
		startNode(t, specs[2], mode, nil),
	}
	waitLeader(t, nodes...)
	waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
	victim := nodes[2]
	victim.stop()
	leader := waitLeader(t, nodes[0], nodes[1])
	mustCreateNamespace(t, leader.node, "x")

	// Same id and data dir; new loopback IP for both Raft and gRPC.
	moved := *victim.spec
	moved.ip = "127.0.0.4"
	moved.raftAddr = fmt.Sprintf("127.0.0.4:%d", freeRaftPort(t, []string{"127.0.0.4"}))
	moved.grpcAddr = ""
	moved.grpcLis = nil
	back := startNode(t, &moved, mode, nil)
	all := []*testNode{nodes[0], nodes[1], back}
	waitFor(t, "leader to store n3's new address", func() (bool, string) {
		cfg, _ := leader.node.configuration()
		s, _ := findServer(cfg, "n3")
		return string(s.Address) == moved.raftAddr, string(s.Address)
	})
	waitNamespace(t, back, "x")
	waitLeader(t, all...)
	waitFor(t, "n3's new gRPC address in NodeInfo", func() (bool, string) {
		info, ok := leader.fsm.Store().Node("n3")
		return ok && info.GrpcAddr == moved.grpcAddr, fmt.Sprint(info)
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := createNamespace(ctx, back.node, "y"); err != nil {
		t.Fatal(err)
	}
	waitNamespace(t, back, "y")
}

// Quorum loss: two of three nodes are gone for good. The offline Recover
// rewrites the survivor's peer set; it then elects itself and keeps its data.
func TestRecoverAfterQuorumLoss(t *testing.T) {
	specs := newSpecs(t, 3)
	mode := staticMode(specs)
	nodes := []*testNode{
		startNode(t, specs[0], mode, nil),
		startNode(t, specs[1], mode, nil),
		startNode(t, specs[2], mode, nil),
	}
	leader := waitLeader(t, nodes...)
	mustCreateNamespace(t, leader.node, "kept")
	for _, tn := range nodes {
		waitNamespace(t, tn, "kept")
	}
	for _, tn := range nodes {
		tn.stop()
	}
	if err := Recover(specs[0].dir, "n1", []Peer{{ID: "x", Address: "127.0.0.9:1"}}); err == nil {
		t.Fatal("Recover accepted a peer set without this node")
	}
	if err := Recover(specs[0].dir, "n1", []Peer{{ID: "n1", Address: specs[0].raftAddr}}); err != nil {
		t.Fatal(err)
	}
	survivor := startNode(t, specs[0], mode, nil)
	waitLeader(t, survivor)
	waitNamespace(t, survivor, "kept")
	if v, nv := members(survivor.node); fmt.Sprint(v) != "[n1]" || len(nv) != 0 {
		t.Fatalf("recovered configuration %v %v", v, nv)
	}
	if survivor.node.bootstraps.Load() != 0 {
		t.Fatal("recovered node bootstrapped")
	}
	mustCreateNamespace(t, survivor.node, "after-recovery")
}
