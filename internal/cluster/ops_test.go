package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func startStatic3(t testing.TB, before func(*Node)) []*testNode {
	t.Helper()
	specs := newSpecs(t, 3)
	mode := staticMode(specs)
	nodes := []*testNode{
		startNode(t, specs[0], mode, before),
		startNode(t, specs[1], mode, before),
		startNode(t, specs[2], mode, before),
	}
	waitLeader(t, nodes...)
	waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
	return nodes
}

func followersOf(leader *testNode, nodes []*testNode) []*testNode {
	var out []*testNode
	for _, tn := range nodes {
		if tn != leader {
			out = append(out, tn)
		}
	}
	return out
}

func TestFollowerApplyForwardsAndReads(t *testing.T) {
	nodes := startStatic3(t, nil)
	leader := waitLeader(t, nodes...)
	f := followersOf(leader, nodes)[0]
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	cmd := &pb.Command{RequestId: "fwd-1", Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: "fwd"}}}
	res, err := f.node.Apply(ctx, cmd)
	if err != nil {
		t.Fatalf("follower apply: %v", err)
	}
	if res.ErrorCode != pb.ErrorCode_ERROR_CODE_OK || res.Index == 0 {
		t.Fatalf("result %v", res)
	}
	if cmd.Timestamp == 0 {
		t.Fatal("Apply did not set the timestamp")
	}
	if cmd.Rules != state.CurrentRules {
		t.Fatalf("Apply stamped rules %d, want state.CurrentRules %d", cmd.Rules, state.CurrentRules)
	}
	// The leader's FSM judged a forwarded command by the current rules: a
	// self-feeding policy name is refused (the original rules would have
	// gone on to look for the extractor and answer NOT_FOUND).
	loop := &pb.Command{Op: &pb.Command_CreateGraph{CreateGraph: &pb.CreateExtractionGraphCmd{Graph: &pb.ExtractionGraph{
		Namespace: "fwd", Name: "loopg", Policies: []*pb.ExtractionPolicy{{Name: "ingestion", Extractor: "x"}}}}}}
	if r, err := f.node.Apply(ctx, loop); err != nil || r.ErrorCode != pb.ErrorCode_ERROR_CODE_INVALID {
		t.Fatalf("reserved policy name through a follower: %v %v", r, err)
	}
	if _, ok := leader.fsm.Store().Namespace("fwd"); !ok {
		t.Fatal("leader lacks the forwarded write")
	}
	// Linearizable read on the follower sees the write without polling.
	if err := f.node.ReadBarrier(ctx, pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.fsm.Store().Namespace("fwd"); !ok {
		t.Fatal("follower store lacks the write after a linearizable barrier")
	}
	// FSM-level errors come back as results, not transport errors.
	bad, err := f.node.Apply(ctx, &pb.Command{Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: ""}}})
	if err != nil || bad.ErrorCode != pb.ErrorCode_ERROR_CODE_INVALID {
		t.Fatalf("invalid command: %v %v", bad, err)
	}
	// A forwarded write then WaitApplied gives read-your-writes locally.
	res, err = createNamespace(ctx, f.node, "ryw")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.node.WaitApplied(ctx, res.Index); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.fsm.Store().Namespace("ryw"); !ok {
		t.Fatal("follower lacks its write after WaitApplied")
	}
	for _, tn := range nodes {
		for _, lv := range []pb.ReadConsistency{pb.ReadConsistency_READ_CONSISTENCY_STALE, pb.ReadConsistency_READ_CONSISTENCY_DEFAULT, pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE} {
			if err := tn.node.ReadBarrier(ctx, lv); err != nil {
				t.Fatalf("%s %v: %v", tn.spec.id, lv, err)
			}
		}
	}
	if err := f.node.ReadBarrier(ctx, pb.ReadConsistency(42)); err == nil {
		t.Fatal("unknown read level accepted")
	}

	// A follower's ClusterService.Apply refuses with a leader hint: the
	// not-leader signal, not a conflict.
	_, err = clusterClient(t, f.spec.grpcAddr).Apply(ctx, &pb.ApplyRequest{Command: cmd})
	if id, addr, ok := errcode.LeaderHint(err); !ok || status.Code(err) != codes.Unavailable ||
		id != leader.spec.id || addr != leader.spec.grpcAddr {
		t.Fatalf("follower Apply RPC: %v (hint %q %q %v)", err, id, addr, ok)
	}
	st := f.node.Status()
	if st.LeaderId != leader.spec.id || st.LeaderAddr != leader.spec.grpcAddr || len(st.Members) != 3 || st.ClusterId == "" {
		t.Fatalf("status %v", st)
	}
	// Leader's status includes the autopilot's health view.
	waitFor(t, "all members healthy in leader status", func() (bool, string) {
		st := leader.node.Status()
		for _, m := range st.Members {
			if !m.Healthy || m.LastContactMs < 0 || m.Suffrage != "voter" {
				return false, fmt.Sprint(m)
			}
		}
		return true, ""
	})
}

// Without a quorum: DEFAULT refuses, STALE serves, LINEARIZABLE and Apply
// give up when their context ends.
func TestNoQuorumBehaviour(t *testing.T) {
	specs := newSpecs(t, 3)
	n1 := startNode(t, specs[0], staticMode(specs), nil)
	waitFor(t, "a few discovery rounds", func() (bool, string) {
		return n1.node.discoverRounds.Load() >= 2, ""
	})
	if n1.node.hasState() {
		t.Fatal("one of three static nodes bootstrapped alone")
	}
	// A generous deadline: without a leader the calls must end on their
	// own with ErrNoLeader (callers then try another coordinator) instead
	// of holding the caller until its deadline.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := n1.node.ReadBarrier(ctx, pb.ReadConsistency_READ_CONSISTENCY_STALE); err != nil {
		t.Fatal(err)
	}
	if err := n1.node.ReadBarrier(ctx, pb.ReadConsistency_READ_CONSISTENCY_DEFAULT); !errors.Is(err, ErrStaleRead) {
		t.Fatalf("default read: %v", err)
	}
	if err := n1.node.ReadBarrier(ctx, pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE); !errors.Is(err, ErrNoLeader) || ctx.Err() != nil {
		t.Fatalf("linearizable read: %v (ctx %v)", err, ctx.Err())
	}
	_, err := createNamespace(ctx, n1.node, "nope")
	if !errors.Is(err, ErrNoLeader) || ctx.Err() != nil {
		t.Fatalf("apply: %v (ctx %v)", err, ctx.Err())
	}
	if ok, why := n1.node.Ready(); ok {
		t.Fatal("ready without a cluster")
	} else if why == "" {
		t.Fatal("no reason")
	}
	if !n1.node.Live() {
		t.Fatal("liveness must not depend on quorum")
	}
}

// Shutting down the leader hands leadership over (no removal from the
// configuration), the new leader serves writes, and the old leader's
// leadership hook is cancelled.
func TestLeaderShutdownTransfersLeadership(t *testing.T) {
	var mu sync.Mutex
	running := map[string]int{}
	cancelled := map[string]int{}
	hook := func(n *Node) {
		n.RunWhileLeader(func(ctx context.Context, term uint64) {
			if term == 0 {
				t.Errorf("hook got term 0")
			}
			mu.Lock()
			running[n.ID()]++
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			cancelled[n.ID()]++
			mu.Unlock()
		})
	}
	nodes := startStatic3(t, hook)
	leader := waitLeader(t, nodes...)
	waitFor(t, "hook running on the leader", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return running[leader.spec.id] == 1, fmt.Sprint(running)
	})
	mustCreateNamespace(t, leader.node, "one")
	old := leader
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := old.node.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if cancelled[old.spec.id] != 1 {
		t.Errorf("old leader's hook not cancelled by shutdown: %v", cancelled)
	}
	mu.Unlock()
	if _, err := old.node.Apply(ctx, &pb.Command{Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: "z"}}}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("apply after shutdown: %v", err)
	}
	if err := old.node.Leave(ctx); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("leave after shutdown: %v", err)
	}
	rest := followersOf(old, nodes)
	newLeader := waitLeader(t, rest...)
	waitFor(t, "hook running on the new leader", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return running[newLeader.spec.id] == 1, fmt.Sprint(running)
	})
	mustCreateNamespace(t, followersOf(newLeader, rest)[0].node, "two")
	// Shutdown is not leave: still three voters.
	if v, _ := members(newLeader.node); fmt.Sprint(v) != "[n1 n2 n3]" {
		t.Fatalf("voters after leader shutdown: %v", v)
	}
}

// A hook's context ends when leadership moves (TransferLeader RPC, sent to a
// follower, forwarded to the leader).
func TestRunWhileLeaderCancelledOnLeadershipLoss(t *testing.T) {
	type run struct {
		node string
		term uint64
		done chan struct{}
	}
	runs := make(chan run, 16)
	hook := func(n *Node) {
		n.RunWhileLeader(func(ctx context.Context, term uint64) {
			r := run{node: n.ID(), term: term, done: make(chan struct{})}
			runs <- r
			<-ctx.Done()
			close(r.done)
		})
	}
	nodes := startStatic3(t, hook)
	leader := waitLeader(t, nodes...)
	first := <-runs
	if first.node != leader.spec.id {
		t.Fatalf("hook ran on %s, leader is %s", first.node, leader.spec.id)
	}
	target := followersOf(leader, nodes)[1]
	via := followersOf(leader, nodes)[0]
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// A node that started without state withholds its vote (and so a
	// leadership transfer to it) until it has caught up: retry until then.
	var resp *pb.TransferLeaderResponse
	var err error
	_ = retry.PollFor(waitTimeout, 50*time.Millisecond, func() error {
		resp, err = clusterClient(t, via.spec.grpcAddr).TransferLeader(ctx, &pb.TransferLeaderRequest{NodeId: target.spec.id})
		if err != nil && strings.Contains(err.Error(), "withholds its vote") {
			return err // the target is still catching up
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.NewLeaderId != target.spec.id {
		t.Fatalf("new leader %s, want %s", resp.NewLeaderId, target.spec.id)
	}
	select {
	case <-first.done:
	case <-ctx.Done():
		t.Fatal("old leader's hook context not cancelled")
	}
	select {
	case second := <-runs:
		if second.node != target.spec.id || second.term <= first.term {
			t.Fatalf("second run %s term %d (first term %d)", second.node, second.term, first.term)
		}
	case <-ctx.Done():
		t.Fatal("hook did not start on the new leader")
	}
	if leader.node.IsLeader() {
		t.Fatal("old node still leader")
	}
}

// A node with a fresh id joins an existing cluster as a non-voter, is
// promoted by the autopilot, and later leaves (scale-down).
func TestJoinPromoteAndLeave(t *testing.T) {
	nodes := startStatic3(t, nil)
	specs4 := newSpecs(t, 4)
	s4 := specs4[3]
	s4.id = "n4"
	// Found through a dns: entry ("localhost" resolves to n1's 127.0.0.1),
	// plus a name that does not resolve, which must not be fatal.
	_, port, _ := net.SplitHostPort(nodes[0].spec.grpcAddr)
	join := []string{"dns:localhost:" + port, "dns:no-such-host.invalid:1"}
	n4 := startNode(t, s4, func(c *Config) { c.Join = join }, nil) // BootstrapExpect 0: join only
	all := append(append([]*testNode{}, nodes...), n4)
	waitFor(t, "n4 in the configuration", func() (bool, string) {
		v, nv := members(nodes[0].node)
		return len(v)+len(nv) == 4, fmt.Sprint(v, nv)
	})
	waitVoters(t, []string{"n1", "n2", "n3", "n4"}, all...)
	mustCreateNamespace(t, n4.node, "from-n4")
	waitNamespace(t, n4, "from-n4")
	if n4.node.bootstraps.Load() != 0 || n4.node.ClusterID() != nodes[0].node.ClusterID() {
		t.Fatalf("n4 bootstraps %d cluster %q", n4.node.bootstraps.Load(), n4.node.ClusterID())
	}

	// The leader itself leaves: it hands leadership over first.
	leader := waitLeader(t, all...)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := leader.node.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	var rest []*testNode
	var ids []string
	for _, tn := range all {
		if tn != leader {
			rest = append(rest, tn)
			ids = append(ids, tn.spec.id)
		}
	}
	waitVoters(t, ids, rest...)
	nl := waitLeader(t, rest...)
	waitFor(t, "NodeInfo of the leaver removed", func() (bool, string) {
		_, ok := nl.fsm.Store().Node(leader.spec.id)
		return !ok, ""
	})
	mustCreateNamespace(t, rest[0].node, "after-leave")
}

func TestJoinRejectsForeignClusterAndBadInput(t *testing.T) {
	nodes := startStatic3(t, nil)
	leader := waitLeader(t, nodes...)
	f := followersOf(leader, nodes)[0]
	cl := clusterClient(t, f.spec.grpcAddr) // forwarded to the leader
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := cl.Join(ctx, &pb.JoinRequest{NodeId: "x", RaftAddr: "127.0.0.9:1", ClusterId: "someone-else"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("foreign cluster join: %v", err)
	}
	if _, err := cl.Join(ctx, &pb.JoinRequest{NodeId: "x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("join without address: %v", err)
	}
	if _, err := cl.Join(ctx, &pb.JoinRequest{NodeId: "x", RaftAddr: "no-port"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("join with a bad address: %v", err)
	}
	if _, err := cl.RemovePeer(ctx, &pb.RemovePeerRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("remove without id: %v", err)
	}
	if _, err := cl.Apply(ctx, &pb.ApplyRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("apply without command: %v", err)
	}
	if _, err := cl.TransferLeader(ctx, &pb.TransferLeaderRequest{NodeId: "nobody"}); status.Code(err) != codes.NotFound {
		t.Fatalf("transfer to unknown node: %v", err)
	}
	if v, nv := members(leader.node); len(v) != 3 || len(nv) != 0 {
		t.Fatalf("configuration changed: %v %v", v, nv)
	}
	p, err := cl.Probe(ctx, &pb.ProbeRequest{NodeId: "x"})
	if err != nil || p.NodeId != f.spec.id || !p.HasState || p.ClusterId != leader.node.ClusterID() ||
		p.LeaderId != leader.spec.id || p.RaftAddr != f.spec.raftAddr {
		t.Fatalf("probe %v %v", p, err)
	}
}

// The Snapshot RPC streams the FSM's snapshot; restoring it into a fresh FSM
// reproduces the state.
func TestSnapshotRPC(t *testing.T) {
	tn := startNode(t, newSpecs(t, 1)[0], nil, nil)
	waitLeader(t, tn)
	for i := range 5 {
		mustCreateNamespace(t, tn.node, fmt.Sprint("s", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cl := clusterClient(t, tn.spec.grpcAddr)
	for round := range 2 { // second round: nothing new -> latest snapshot on disk
		data, err := readSnapshot(ctx, cl)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		fsm := state.NewFSM(state.NewStore(), nil)
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, ok := fsm.Store().Namespace(fmt.Sprint("s", i)); !ok {
				t.Fatalf("round %d: restored snapshot lacks s%d", round, i)
			}
		}
	}
}

// Writes sent to a follower while the leader shuts down all succeed, exactly
// once: retries after an unknown outcome are deduplicated by request id (a
// re-applied CreateNamespace would answer ALREADY_EXISTS).
func TestWritesSurviveLeaderShutdown(t *testing.T) {
	nodes := startStatic3(t, nil)
	leader := waitLeader(t, nodes...)
	f := followersOf(leader, nodes)[0]
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	const total = 40
	errs := make(chan error, total)
	var wg sync.WaitGroup
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range total {
			if i == total/4 {
				close(started)
			}
			res, err := createNamespace(ctx, f.node, fmt.Sprint("w", i))
			if err == nil && res.ErrorCode != pb.ErrorCode_ERROR_CODE_OK {
				err = fmt.Errorf("w%d: %v", i, res)
			}
			errs <- err
		}
	}()
	<-started
	if err := leader.node.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range total {
		waitNamespace(t, f, fmt.Sprint("w", i))
	}
}

// The autopilot removes a dead server after the threshold, but never takes
// the voters below MinQuorum.
func TestAutopilotRemovesDeadServersAboveMinQuorum(t *testing.T) {
	specs := newSpecs(t, 4)
	s4 := specs[3]
	static := staticMode(specs[:3])
	ap := func(c *Config) {
		c.MinQuorum = 3
		c.DeadServerThreshold = 2 * time.Second
	}
	mode := func(c *Config) { static(c); ap(c) }
	nodes := []*testNode{
		startNode(t, specs[0], mode, nil),
		startNode(t, specs[1], mode, nil),
		startNode(t, specs[2], mode, nil),
	}
	leader := waitLeader(t, nodes...)
	n4 := startNode(t, s4, func(c *Config) {
		ap(c)
		c.Join = []string{leader.spec.grpcAddr}
	}, nil)
	waitVoters(t, []string{"n1", "n2", "n3", "n4"}, append(nodes, n4)...)

	n4.stop()
	leader = waitLeader(t, nodes...)
	waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
	waitFor(t, "n4's NodeInfo pruned", func() (bool, string) {
		_, ok := leader.fsm.Store().Node("n4")
		return !ok, ""
	})

	victim := followersOf(leader, nodes)[0]
	victim.stop()
	// Wait until the victim has been dead past the threshold and the
	// autopilot has decided a few more times; it must keep the voter.
	a := leader.node.ap
	var after int64
	waitFor(t, "victim dead past the threshold", func() (bool, string) {
		h, ok := a.view(raft.ServerID(victim.spec.id))
		if ok && !h.healthy && time.Since(h.since) > 2*time.Second {
			after = a.ticks.Load()
			return true, ""
		}
		return false, fmt.Sprint(h)
	})
	waitFor(t, "more autopilot ticks", func() (bool, string) { return a.ticks.Load() >= after+3, "" })
	if v, _ := members(leader.node); len(v) != 3 {
		t.Fatalf("autopilot went below MinQuorum: voters %v", v)
	}
}
