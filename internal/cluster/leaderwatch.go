package cluster

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/errcode"
)

// leaderWatch turns Raft's leader observations into two things the retry
// loops of this package need (see DESIGN.md, "Retries"):
//   - changed: a channel closed at the next leader change, so a call waiting
//     for a leader retries the moment one is known instead of at the end
//     of its backoff step;
//   - last: the last leader this node knew, which outlives Raft's own view
//     (Raft forgets the leader when it shuts down), so a node that is
//     leaving can still name the leader it handed over to.
type leaderWatch struct {
	once    sync.Once
	mu      sync.Mutex
	changed chan struct{}
	last    string // id of the last non-empty leader observed
}

// leaderEvents starts the watch on first use and returns it.
func (n *Node) leaderEvents() *leaderWatch {
	w := &n.leaders
	w.once.Do(func() {
		w.changed = make(chan struct{})
		if _, id := n.raft.LeaderWithID(); id != "" {
			w.last = string(id)
		}
		ch := make(chan raft.Observation, 16)
		// Non-blocking: a dropped observation only means a retry waits out
		// its backoff step, as it would without the watch.
		obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
			_, ok := o.Data.(raft.LeaderObservation)
			return ok
		})
		n.raft.RegisterObserver(obs)
		go func() {
			defer n.raft.DeregisterObserver(obs)
			for {
				select {
				case <-n.closed:
					return
				case o := <-ch:
					lo, _ := o.Data.(raft.LeaderObservation)
					w.mu.Lock()
					if lo.LeaderID != "" {
						w.last = string(lo.LeaderID)
					}
					close(w.changed)
					w.changed = make(chan struct{})
					w.mu.Unlock()
				}
			}
		}()
	})
	return w
}

// next returns a channel closed at the next leader change after the call.
func (w *leaderWatch) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

func (w *leaderWatch) lastLeader() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// leaderHint is the leader another node should be sent to: Raft's current
// leader, else the last one observed; never this node ("" when none).
func (n *Node) leaderHint() (id, grpcAddr string) {
	_, lid := n.raft.LeaderWithID()
	id = string(lid)
	if id == "" {
		id = n.leaderEvents().lastLeader()
	}
	if id == "" || id == n.cfg.NodeID {
		return "", ""
	}
	return id, n.grpcAddrOf(id)
}

// hintedError is a refusal before anything was proposed (shutting down, not
// the leader) that names the leader: errors.Is sees the cause, gRPC sees
// errcode.NotLeader with the hint, wherever the error is returned from a
// handler, so the caller can retry at the leader at once.
type hintedError struct {
	err      error
	id, addr string
}

func (e *hintedError) Error() string { return e.err.Error() }
func (e *hintedError) Unwrap() error { return e.err }
func (e *hintedError) GRPCStatus() *status.Status {
	return status.Convert(errcode.NotLeader(e.err.Error(), e.id, e.addr))
}

// refusal wraps err (ErrShuttingDown, ErrNotLeader) with the leader hint.
func (n *Node) refusal(err error) error {
	id, addr := n.leaderHint()
	return &hintedError{err: err, id: id, addr: addr}
}

// awaitNewLeader waits, at most one election timeout, until Raft names a
// leader other than this node after a hand-off, and records it, so that
// the refusals this node gives while it stops can name the new leader
// (Raft itself forgets the leader at shutdown).
func (n *Node) awaitNewLeader(ctx context.Context) {
	w := n.leaderEvents()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ElectionTimeout)
	defer cancel()
	for {
		changed := w.next()
		if _, id := n.raft.LeaderWithID(); id != "" && string(id) != n.cfg.NodeID {
			w.mu.Lock()
			w.last = string(id)
			w.mu.Unlock()
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}
