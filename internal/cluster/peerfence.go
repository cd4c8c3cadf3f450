package cluster

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerFence orders a follower's address change against that follower's
// replication goroutine on the leader.
//
// Why: hashicorp/raft (v1.8.0, the newest) keeps each follower's Server in
// followerReplication.peer. A configuration entry that gives an existing
// server a new address overwrites it in the leader loop
// (startStopReplication, under peerLock), while the follower's replication
// goroutine reads it WITHOUT the lock right after an AppendEntries or
// InstallSnapshot answer (updateLastAppended, handleStaleTerm; upstream
// hashicorp/raft#681, open). The race detector reports it whenever a node
// that is being replicated to rejoins with a new IP, which is exactly what
// every pod restart on Kubernetes does. The read is of the server id, which
// an address change keeps, so production is not harmed; but a data race is
// a data race, and it failed CI.
//
// The fence gives the two accesses an order without touching raft:
//  1. Before the change, it waits until the follower's replication goroutine
//     is parked inside our transport (at its next AppendEntries, which comes
//     within a commit timeout), or is idle after a failed call (nothing of
//     the last call is left to read). Everything it read before happens
//     before the park, so before the change.
//  2. The change is submitted. The leader loop stores the configuration
//     entry and then, in the same turn, rewrites the peer.
//  3. A barrier is submitted, so the leader loop stores one more batch. The
//     log store tells the fence about every batch: a batch stored after the
//     one holding the new configuration starts after the rewrite.
//  4. Only then is the parked call let through, so every later read
//     happens after the write.
//
// Heartbeats are never parked (their goroutine reads the peer under the
// lock), and a fence that cannot be set within its timeout fails the change
// (the joiner retries) instead of risking the race. Replication to the
// follower pauses for the few milliseconds between 1 and 4.
type peerFence struct {
	mu    sync.Mutex
	peers map[raft.ServerID]*fencedPeer
	done  <-chan struct{} // the transport closed: parked calls give up
}

type fencedPeer struct {
	inflight int  // replication calls to it in the transport now
	lastOK   bool // the last one returned an answer (raft may read peer after it)
	parked   int  // calls waiting for the fence to lift

	fenced   bool
	release  chan struct{} // closed when the fence lifts
	wantAddr raft.ServerAddress
	cfgSeen  bool // the log store took a configuration with the new address
	after    bool // ... and a later batch: the rewrite has happened
	wake     chan struct{}
}

var errFenceTimeout = errors.New("cluster: the follower's replication did not pause for its address change; retry")

func newPeerFence(done <-chan struct{}) *peerFence {
	return &peerFence{peers: map[raft.ServerID]*fencedPeer{}, done: done}
}

// peer returns the record of id (f.mu held).
func (f *peerFence) peer(id raft.ServerID) *fencedPeer {
	p := f.peers[id]
	if p == nil {
		p = &fencedPeer{wake: make(chan struct{})}
		f.peers[id] = p
	}
	return p
}

// signal wakes whoever waits on p (f.mu held).
func (p *fencedPeer) signal() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// enter is called before a replication call to id; it parks while a fence
// is up.
func (f *peerFence) enter(id raft.ServerID) error {
	f.mu.Lock()
	p := f.peer(id)
	for p.fenced {
		rel := p.release
		p.parked++
		p.signal()
		f.mu.Unlock()
		select {
		case <-rel:
		case <-f.done:
			f.mu.Lock()
			p.parked--
			f.mu.Unlock()
			return raft.ErrTransportShutdown
		}
		f.mu.Lock()
		p.parked--
	}
	p.inflight++
	f.mu.Unlock()
	return nil
}

// exit is called after a replication call to id returned.
func (f *peerFence) exit(id raft.ServerID, answered bool) {
	f.mu.Lock()
	p := f.peer(id)
	p.inflight--
	p.lastOK = answered
	p.signal()
	f.mu.Unlock()
}

// stored is called by the log store after every batch it stored.
func (f *peerFence) stored(logs []*raft.Log) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cfg *raft.Configuration
	for _, l := range logs {
		if l.Type == raft.LogConfiguration {
			c, err := decodeConfiguration(l.Data)
			if err == nil {
				cfg = &c
			}
		}
	}
	for id, p := range f.peers {
		if !p.fenced || p.after {
			continue
		}
		if p.cfgSeen {
			p.after = true
			p.signal()
			continue
		}
		if cfg != nil {
			if s, ok := findServer(*cfg, string(id)); ok && s.Address == p.wantAddr {
				p.cfgSeen = true
			}
		}
	}
}

// decodeConfiguration decodes a configuration entry without raft's panic
// on bad data.
func decodeConfiguration(b []byte) (c raft.Configuration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decode configuration: %v", r)
		}
	}()
	return raft.DecodeConfiguration(b), nil
}

// change runs submit (a configuration change that gives follower id the
// address addr) behind the fence; barrier makes the leader store one more
// batch. It returns submit's future, to be waited for as usual.
func (f *peerFence) change(id raft.ServerID, addr raft.ServerAddress, wait time.Duration,
	submit func() raft.Future, barrier func()) (raft.Future, error) {
	f.mu.Lock()
	p := f.peer(id)
	if p.fenced {
		f.mu.Unlock()
		return nil, fmt.Errorf("cluster: an address change of %s is already in progress", id)
	}
	p.fenced, p.release, p.wantAddr, p.cfgSeen, p.after = true, make(chan struct{}), addr, false, false
	lift := func() { // f.mu held
		p.fenced = false
		close(p.release)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for p.parked == 0 && (p.inflight > 0 || p.lastOK) {
		w := p.wake
		f.mu.Unlock()
		select {
		case <-w:
		case <-deadline.C:
			f.mu.Lock()
			if p.parked == 0 && (p.inflight > 0 || p.lastOK) {
				lift()
				f.mu.Unlock()
				return nil, errFenceTimeout
			}
			continue
		case <-f.done:
			f.mu.Lock()
			lift()
			f.mu.Unlock()
			return nil, raft.ErrTransportShutdown
		}
		f.mu.Lock()
	}
	f.mu.Unlock()

	fut := submit()
	barrier()
	deadline.Reset(wait)
	// raft's futures cache their answer unsafely: one goroutine reads it,
	// and the caller gets it from there.
	sf := &settledFuture{done: make(chan struct{})}
	go func() { sf.err = fut.Error(); close(sf.done) }()
	settled := sf.done
	f.mu.Lock()
	defer f.mu.Unlock()
	for !p.after {
		w := p.wake
		f.mu.Unlock()
		select {
		case <-w:
		case <-settled: // answered from the leader loop: after any rewrite
			f.mu.Lock()
			lift()
			return sf, nil
		case <-deadline.C:
			// Leadership lost, or the leader stalled: Raft stops this
			// replication goroutine with leadership anyway.
			f.mu.Lock()
			lift()
			return sf, nil
		case <-f.done:
			f.mu.Lock()
			lift()
			return sf, nil
		}
		f.mu.Lock()
	}
	lift()
	return sf, nil
}

// settledFuture hands on the answer one goroutine read from a raft future.
type settledFuture struct {
	done chan struct{}
	err  error
}

func (f *settledFuture) Error() error {
	<-f.done
	return f.err
}

// isHeartbeat tells raft's heartbeat requests (term and leader only) from
// replication's, which carry the leader's commit index or a log position.
func isHeartbeat(a *raft.AppendEntriesRequest) bool {
	return len(a.Entries) == 0 && a.PrevLogEntry == 0 && a.PrevLogTerm == 0 && a.LeaderCommitIndex == 0
}

// fencedLogs tells the fence about every batch the log store took.
type fencedLogs struct {
	raft.LogStore
	f *peerFence
}

func (l fencedLogs) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

// IsMonotonic passes the wrapped store's raft.MonotonicLogStore answer on
// (raft-wal takes no gaps: after a snapshot restore Raft must clear the log
// instead of leaving a hole). Without it the wrapper would hide the method.
func (l fencedLogs) IsMonotonic() bool {
	m, ok := l.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (l fencedLogs) StoreLogs(logs []*raft.Log) error {
	err := l.LogStore.StoreLogs(logs)
	l.f.stored(logs)
	return err
}
