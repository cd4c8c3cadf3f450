package cluster

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

type chanFuture chan error

func (f chanFuture) Error() error { return <-f }

// The fence must order the leader loop's rewrite of a follower's address
// against the follower's replication goroutine, which reads it without a
// lock after every answered call (hashicorp/raft#681). This plays both
// goroutines as raft runs them; under -race, a change that is not fenced
// (or a fence that lifts too early) is reported as a data race and fails.
func TestPeerFenceOrdersAddressChangeAgainstReplication(t *testing.T) {
	done := make(chan struct{})
	f := newPeerFence(done)
	peer := raft.Server{ID: "n2", Address: "a0"} // followerReplication.peer
	leader := make(chan func())                  // the leader loop
	go func() {
		for fn := range leader {
			fn()
		}
	}()

	stop := make(chan struct{})
	replDone := make(chan struct{})
	var reads atomic.Int64
	go func() { // the follower's replication goroutine
		defer close(replDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := f.enter("n2"); err != nil {
				return
			}
			f.exit("n2", true)
			if peer.ID != "n2" { // the unlocked read after an answer
				panic("torn peer")
			}
			reads.Add(1)
		}
	}()

	// The change's own future stays unanswered (its commit may need the
	// follower whose replication is parked): only the stored batch after
	// the configuration may lift the fence.
	never := make(chanFuture)
	for i := 1; i <= 30; i++ {
		addr := raft.ServerAddress(fmt.Sprint("a", i))
		cfg := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "l"}, {ID: "n2", Address: addr}}}
		before := reads.Load()
		fut, err := f.change("n2", addr, 10*time.Second, func() raft.Future {
			leader <- func() {
				f.stored([]*raft.Log{{Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(cfg)}})
				peer = raft.Server{ID: "n2", Address: addr} // startStopReplication's rewrite
			}
			return never
		}, func() {
			// raft's apply channel is buffered: enqueueing the barrier
			// does not wait for the leader loop.
			go func() { leader <- func() { f.stored([]*raft.Log{{Type: raft.LogBarrier}}) } }()
		})
		if err != nil || fut == nil {
			t.Fatalf("change %d: %v", i, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for reads.Load() == before { // replication resumes after the change
			if time.Now().After(deadline) {
				t.Fatalf("change %d: replication did not resume", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(stop)
	<-replDone
}

// A replication call that never returns keeps the fence from being set:
// the change fails (the joiner retries) instead of racing.
func TestPeerFenceTimesOutOnAStuckCall(t *testing.T) {
	f := newPeerFence(make(chan struct{}))
	if err := f.enter("n2"); err != nil {
		t.Fatal(err)
	}
	submitted := false
	_, err := f.change("n2", "b", 50*time.Millisecond, func() raft.Future {
		submitted = true
		return make(chanFuture)
	}, func() {})
	if !errors.Is(err, errFenceTimeout) || submitted {
		t.Fatalf("err %v, submitted %v; want errFenceTimeout and no change", err, submitted)
	}
	// The fence is down again: calls pass.
	f.exit("n2", false)
	if err := f.enter("n2"); err != nil {
		t.Fatal(err)
	}
	f.exit("n2", true)
}
