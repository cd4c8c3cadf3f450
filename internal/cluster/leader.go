package cluster

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/indexify-go/indexify/internal/retry"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// leaderSession is one stretch of leadership: its context is cancelled when
// leadership is lost or the node shuts down; done closes when every hook of
// the session has returned.
type leaderSession struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// RunWhileLeader registers fn to run in its own goroutine each time this node
// gains leadership, with a context cancelled when leadership ends. fn starts
// only after the leader has applied every entry of earlier terms (a Raft
// barrier), so it reads a current Store. Register before Start.
func (n *Node) RunWhileLeader(fn func(ctx context.Context, term uint64)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.leaderFns = append(n.leaderFns, fn)
}

// watchLeadership consumes Raft's leadership notifications in order.
func (n *Node) watchLeadership() {
	select {
	case <-n.raftSet:
	case <-n.closed:
		return
	}
	for {
		select {
		case v := <-n.notifyCh:
			n.onLeadership(v)
		case <-n.closed:
			return
		}
	}
}

func (n *Node) onLeadership(isLeader bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isLeader = isLeader
	if !isLeader {
		n.leaderReadyTerm.Store(0)
		if n.session != nil {
			n.session.cancel()
		}
		n.log.Info("lost leadership")
		return
	}
	n.log.Info("gained leadership", "term", n.raft.CurrentTerm())
	if n.started && !n.shuttingDown.Load() {
		n.startSessionLocked()
	}
}

// startSessionLocked starts a leader session. The previous session's hooks
// must have returned before the new ones start, so two generations of
// leader-only code never overlap on this node.
func (n *Node) startSessionLocked() {
	prev := n.session
	if prev != nil {
		prev.cancel()
	}
	ctx, cancel := context.WithCancel(n.runCtx)
	s := &leaderSession{cancel: cancel, done: make(chan struct{})}
	n.session = s
	fns := append([]func(context.Context, uint64){n.ap.run, n.upsertSelfAsLeader, n.updateOwnAddress}, n.leaderFns...)
	go func() {
		defer close(s.done)
		defer cancel()
		if prev != nil {
			<-prev.done
		}
		term, ok := n.leaderBarrier(ctx)
		if !ok {
			return
		}
		// A new cluster is named before anything else happens in it.
		n.ensureClusterID(ctx, term)
		if ctx.Err() != nil {
			return
		}
		n.leaderReadyTerm.Store(term)
		var wg sync.WaitGroup
		for _, fn := range fns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(ctx, term)
			}()
		}
		wg.Wait()
	}()
}

// leaderBarrier waits until every entry from earlier terms is applied to the
// FSM, retrying until it succeeds or leadership ends. It returns the term.
func (n *Node) leaderBarrier(ctx context.Context) (uint64, bool) {
	bo := newBackoff(n.cfg.ElectionTimeout/10, n.cfg.ElectionTimeout)
	for {
		term := n.raft.CurrentTerm()
		err := waitFuture(ctx, n.raft.Barrier(5*n.cfg.ElectionTimeout))
		if err == nil && n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term {
			return term, true
		}
		if ctx.Err() != nil || n.raft.State() != raft.Leader {
			return 0, false
		}
		n.log.Warn("leader barrier failed; retrying", "err", err)
		if !bo.wait(ctx) {
			return 0, false
		}
	}
}

// upsertSelfAsLeader stores the leader's own NodeInfo first thing, because
// followers find the leader's gRPC address (for forwarding) in NodeInfo.
func (n *Node) upsertSelfAsLeader(ctx context.Context, _ uint64) {
	bo := newBackoff(n.cfg.ElectionTimeout/10, n.cfg.ElectionTimeout)
	for ctx.Err() == nil {
		if n.selfInfoCurrent() {
			return
		}
		actx, cancel := context.WithTimeout(ctx, n.rpcTimeout())
		_, err := n.Apply(actx, n.upsertSelfCmd())
		cancel()
		if err == nil {
			return
		}
		n.log.Warn("leader: upsert own NodeInfo failed", "err", err)
		if !bo.wait(ctx) {
			return
		}
	}
}

func (n *Node) upsertSelfCmd() *pb.Command {
	return &pb.Command{Op: &pb.Command_UpsertNode{UpsertNode: &pb.UpsertNodeCmd{Node: n.selfInfo()}}}
}

func (n *Node) selfInfo() *pb.NodeInfo {
	return &pb.NodeInfo{
		Id:       n.cfg.NodeID,
		RaftAddr: n.advertise,
		GrpcAddr: n.cfg.GRPCAdvertise,
		HttpAddr: n.cfg.HTTPAdvertise,
		// Announces what this node applies (level.go).
		CommandLevel: n.commandLevel,
	}
}

func (n *Node) selfInfoCurrent() bool {
	cur, ok := n.fsm.Store().Node(n.cfg.NodeID)
	want := n.selfInfo()
	return ok && cur.RaftAddr == want.RaftAddr && cur.GrpcAddr == want.GrpcAddr && cur.HttpAddr == want.HttpAddr &&
		cur.CommandLevel == want.CommandLevel
}

// backoff is a capped exponential backoff with jitter (so that nodes started
// together do not probe in lock-step).
type backoff struct{ cur, lo, hi time.Duration }

func newBackoff(lo, hi time.Duration) *backoff {
	lo = max(lo, 5*time.Millisecond)
	return &backoff{cur: lo, lo: lo, hi: max(hi, lo)}
}

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.hi)
	// +-20% jitter
	return d - d/5 + time.Duration(rand.Int64N(int64(d/5)*2+1))
}

func (b *backoff) reset() { b.cur = b.lo }

// wait sleeps for the next backoff step; false when ctx ended first.
func (b *backoff) wait(ctx context.Context) bool { return retry.Sleep(ctx, b.next()) }
