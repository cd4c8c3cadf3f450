package state

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/retry"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// raftNode is a single-voter Raft using the real library with in-memory log
// and stable stores (kept across restarts) and file snapshots in a temp dir.
type raftNode struct {
	logs   *raft.InmemStore
	snaps  raft.SnapshotStore
	r      *raft.Raft
	fsm    *FSM
	trans  *raft.InmemTransport
	config *raft.Config
}

func startRaft(t *testing.T, n *raftNode) {
	t.Helper()
	n.fsm = NewFSM(NewStore(), nil)
	_, n.trans = raft.NewInmemTransport("n1")
	r, err := raft.NewRaft(n.config, n.fsm, n.logs, n.logs, n.snaps, n.trans)
	if err != nil {
		t.Fatal(err)
	}
	n.r = r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !retry.PollUntil(10*time.Second, 5*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestRaftApplyRestartIdenticalState(t *testing.T) {
	snaps, err := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg := raft.DefaultConfig()
	cfg.LocalID = "n1"
	cfg.HeartbeatTimeout = 50 * time.Millisecond
	cfg.ElectionTimeout = 50 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.LogOutput = io.Discard
	cfg.SnapshotThreshold = 1 << 30 // only explicit snapshots
	n := &raftNode{logs: raft.NewInmemStore(), snaps: snaps, config: cfg}
	startRaft(t, n)
	if err := n.r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: n.trans.LocalAddr()}}}).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "leadership", func() bool { return n.r.State() == raft.Leader })

	apply := func(cmds []*pb.Command) {
		for _, c := range cmds {
			b, err := EncodeCommand(c)
			if err != nil {
				t.Fatal(err)
			}
			f := n.r.Apply(b, 5*time.Second)
			if err := f.Error(); err != nil {
				t.Fatal(err)
			}
			res, ok := f.Response().(*pb.CommandResult)
			if !ok || res.Index != f.Index() && c.RequestId == "" {
				t.Fatalf("response %v for index %d", f.Response(), f.Index())
			}
		}
	}
	cmds := scenario()
	half := len(cmds) / 2
	apply(cmds[:half])
	if err := n.r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	apply(cmds[half:])
	want := n.fsm.Store().Dump()
	wantIndex := n.fsm.Store().AppliedIndex()

	if metas, err := n.snaps.List(); err != nil || len(metas) != 1 {
		t.Fatalf("snapshots = %v, %v", metas, err)
	}

	if err := n.r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	startRaft(t, n) // fresh FSM and Store: state must come back from snapshot + log
	waitFor(t, "replay", func() bool { return n.fsm.Store().AppliedIndex() >= wantIndex })
	if got := n.fsm.Store().Dump(); got != want {
		t.Fatalf("state after restart differs:\n%s\n----\n%s", want, got)
	}
	if err := verifyIndexes(n.fsm.Store()); err != nil {
		t.Fatal(err)
	}
	if err := n.r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
}
