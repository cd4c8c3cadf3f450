package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
