package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// A follower restarted after missing thousands of entries must not report
// Ready until it has applied (nearly) what the leader has committed, not
// merely what it has received: Kubernetes stops the next pod of a rolling
// restart as soon as this one is Ready, and a far-behind follower then holds
// up every commit of the cluster.
func TestRestartedFollowerNotReadyWhileBehindLeader(t *testing.T) {
	nodes := startStatic3(t, nil)
	mode := staticMode([]*spec{nodes[0].spec, nodes[1].spec, nodes[2].spec})
	leader := waitLeader(t, nodes...)
	lagger := followersOf(leader, nodes)[0]
	lagger.stop()

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 250 {
				if _, err := createNamespace(ctx, leader.node, fmt.Sprintf("r-%d-%d", w, i)); err != nil {
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
	// No writes from here on, so the leader's commit index is fixed and any
	// Ready answer can be judged against it exactly.
	target := leader.node.raft.CommitIndex()

	lagger = startNode(t, lagger.spec, mode, nil)
	if got := lagger.node.raft.AppliedIndex(); got+leaderReadyLag >= target {
		t.Fatalf("restarted follower already caught up (%d of %d): the test needs it behind", got, target)
	}
	deadline := time.Now().Add(waitTimeout)
	sawReady := false
	for polls := 0; time.Now().Before(deadline) && polls < 1_000_000; polls++ {
		ok, why := lagger.node.Ready()
		applied := lagger.node.raft.AppliedIndex() // read after Ready: never smaller than at the answer
		if ok && applied+leaderReadyLag < target {
			t.Fatalf("follower Ready while it had applied %d of the leader's %d committed entries", applied, target)
		}
		if ok && applied >= target {
			sawReady = true
			break
		}
		_ = why
		time.Sleep(time.Millisecond) // pacing of the poll, not synchronisation
	}
	if !sawReady {
		ok, why := lagger.node.Ready()
		t.Fatalf("follower never became Ready and caught up (ready=%v: %s; applied %d of %d)",
			ok, why, lagger.node.raft.AppliedIndex(), target)
	}
}
