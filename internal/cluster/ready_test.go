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

// While one caller waits for the leader's answer (up to a second when the
// leader does not answer), other callers get the last value learned at once
// instead of queueing behind it: readiness probes come concurrently, each
// with its own timeout, and queued behind one slow question they all failed.
func TestLeaderCommitCacheAnswersWhileTheLeaderIsAsked(t *testing.T) {
	var c leaderCommitCache
	answer := func(lid string, idx uint64) func() (string, uint64, error) {
		return func() (string, uint64, error) { return lid, idx, nil }
	}
	if idx, known, err := c.get("a", answer("a", 10)); idx != 10 || !known || err != nil {
		t.Fatalf("first ask: %d %v %v", idx, known, err)
	}

	// A leader change makes the cached value stale; the next caller asks,
	// and its question hangs until released.
	release := make(chan struct{})
	asked := make(chan struct{})
	first := make(chan uint64, 1)
	go func() {
		idx, _, _ := c.get("b", func() (string, uint64, error) {
			close(asked)
			<-release
			return "b", 20, nil
		})
		first <- idx
	}()
	<-asked

	done := make(chan struct{})
	var idx uint64
	var known bool
	var err error
	go func() {
		defer close(done)
		idx, known, err = c.get("b", func() (string, uint64, error) {
			t.Error("a second question while one is out")
			return "b", 30, nil
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // liveness bound, not a speed assertion
		close(release)
		t.Fatal("a caller waited for another caller's question to the leader")
	}
	if idx != 10 || !known || err == nil {
		t.Fatalf("while asking: got %d known=%v err=%v, want the last value 10, known, and an error", idx, known, err)
	}

	close(release)
	if got := <-first; got != 20 {
		t.Fatalf("the asking caller got %d, want 20", got)
	}
	if idx, known, err := c.get("b", answer("b", 99)); idx != 20 || !known || err != nil {
		t.Fatalf("fresh value from the same leader: %d %v %v, want 20 from the cache", idx, known, err)
	}

	// A failed question keeps the last value, and a lower answer (a new
	// leader not yet caught up on its commit index) never lowers it.
	if idx, known, err := c.get("c", func() (string, uint64, error) { return "", 0, fmt.Errorf("down") }); idx != 20 || !known || err == nil {
		t.Fatalf("failed ask: %d %v %v", idx, known, err)
	}
	if idx, _, _ := c.get("c", answer("c", 5)); idx != 20 {
		t.Fatalf("lower answer lowered the index to %d", idx)
	}
}

// No value learned yet and a question out: the caller is told it is not
// known, so a fresh follower is not ready on a guess.
func TestLeaderCommitCacheUnknownWhileFirstQuestionIsOut(t *testing.T) {
	var c leaderCommitCache
	release := make(chan struct{})
	asked := make(chan struct{})
	go c.get("a", func() (string, uint64, error) {
		close(asked)
		<-release
		return "a", 7, nil
	})
	<-asked
	defer close(release)
	if _, known, err := c.get("a", func() (string, uint64, error) { return "a", 7, nil }); known || err == nil {
		t.Fatalf("known=%v err=%v while the first question is out, want unknown with an error", known, err)
	}
}
