package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/errcode"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// A leader that shuts down right after a follower restarted far behind
// waits for that follower before handing over: with three voters the new
// leader needs both remaining nodes to commit, so handing over first would
// leave every write at the new leader waiting for the catch-up.
func TestShutdownWaitsForCaughtUpQuorum(t *testing.T) {
	testHandOffWaitsForCaughtUpQuorum(t, func(ctx context.Context, n *Node) error { return n.Shutdown(ctx) })
}

// Leave (a scale-down) hands over the same way: the removal, and every write
// after it, is committed by the voters left, the restarted one among them.
func TestLeaveWaitsForCaughtUpQuorum(t *testing.T) {
	testHandOffWaitsForCaughtUpQuorum(t, func(ctx context.Context, n *Node) error { return n.Leave(ctx) })
}

func testHandOffWaitsForCaughtUpQuorum(t *testing.T, stop func(context.Context, *Node) error) {
	nodes := startStatic3(t, nil)
	mode := staticMode([]*spec{nodes[0].spec, nodes[1].spec, nodes[2].spec})
	leader := waitLeader(t, nodes...)
	lagger := followersOf(leader, nodes)[0]
	lagger.stop()

	// Enough entries that catching up takes several AppendEntries rounds.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				name := fmt.Sprintf("lag-%d-%d", w, i)
				if _, err := createNamespace(ctx, leader.node, name); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("write while the follower is down: %v", err)
	}

	lagger = startNode(t, lagger.spec, mode, nil)
	last := leader.node.raft.LastIndex()
	if got := lagger.node.raft.LastIndex(); got+leader.node.cfg.MaxTrailingLag >= last {
		t.Fatalf("restarted follower already caught up (%d of %d): the test needs it behind", got, last)
	}
	// What the restarted follower holds when the leader stops leading (the
	// hand-off), seen by polling; read once leadership is gone, so a value
	// behind the log can only mean it was behind at the hand-off or after.
	atHandOff := make(chan uint64, 1)
	go func() {
		for i := 0; i < 200_000 && leader.node.raft.State() == raft.Leader; i++ {
			time.Sleep(50 * time.Microsecond) // pacing of the poll
		}
		atHandOff <- lagger.node.raft.LastIndex()
	}()
	if err := stop(ctx, leader.node); err != nil {
		t.Fatal(err)
	}
	if got := <-atHandOff; got+leader.node.cfg.MaxTrailingLag < last {
		t.Fatalf("leader handed over while the restarted follower held %d of %d entries", got, last)
	}
	if got := lagger.node.raft.LastIndex(); got+leader.node.cfg.MaxTrailingLag < last {
		t.Fatalf("leader handed over while the restarted follower held %d of %d entries", got, last)
	}
	rest := followersOf(leader, []*testNode{nodes[0], nodes[1], nodes[2]})
	for i, tn := range rest {
		if tn.spec == lagger.spec {
			rest[i] = lagger
		}
	}
	newLeader := waitLeader(t, rest...)
	mustCreateNamespace(t, newLeader.node, "after-hand-off")
}

// A write that reaches a leader after it stopped proposing (Shutdown set
// shuttingDown and hands over) is held until Raft names the successor and
// then forwarded there, instead of being refused into the client's retry
// backoff. The moment inside Shutdown is held open here: the flag is set,
// leadership stays until the test transfers it.
func TestStoppingLeaderForwardsWritesToItsSuccessor(t *testing.T) {
	nodes := startStatic3(t, nil)
	leader := waitLeader(t, nodes...)
	leader.node.shuttingDown.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	type answer struct {
		res *pb.CommandResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := createNamespace(ctx, leader.node, "during-handoff")
		done <- answer{res, err}
	}()
	if err := leader.node.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	a := <-done
	if a.err != nil || a.res.GetErrorCode() != pb.ErrorCode_ERROR_CODE_OK {
		t.Fatalf("write sent to the stopping leader: %v %v", a.res, a.err)
	}
	successor := waitLeader(t, followersOf(leader, nodes)...)
	waitNamespace(t, successor, "during-handoff")

	// Once Shutdown has run (the successor known, the forwarded writes
	// drained), the node refuses and names the successor.
	if err := leader.node.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := createNamespace(ctx, leader.node, "after-shutdown")
	if !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("write after shutdown: %v, want ErrShuttingDown", err)
	}
	if id, _, ok := errcode.LeaderHint(err); !ok || id != successor.spec.id {
		t.Fatalf("refusal after shutdown names %q (hint %v), want %q", id, ok, successor.spec.id)
	}
}
