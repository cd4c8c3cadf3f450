package cluster

// Before a leader that is shutting down hands leadership over, a quorum of
// the voters it leaves behind must already hold its log. The successor
// needs a majority of the whole configuration (the stopping leader still
// counts in it) to commit anything: with three voters that is both of the
// others. hashicorp/raft's LeadershipTransfer waits for the successor alone
// to catch up, so a follower that restarted moments ago (a rolling restart:
// Kubernetes stops the next pod once the previous one answers its readiness
// probe) and is still thousands of entries behind stalls every write at the
// new leader until it has caught up: 340-580 ms per hand-off in the
// failover bench, one batch of 256 entries per round trip. Waiting here,
// while this node still takes writes, moves that catch-up before the
// hand-off instead of into the clients' outage.

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// peerStatus asks server s for its status (bounded by the timing knob, and
// at least 200 ms); false when it does not answer as itself.
func (n *Node) peerStatus(ctx context.Context, s raft.Server) (*pb.StatusResponse, bool) {
	addr := n.grpcAddrOf(string(s.ID))
	if addr == "" {
		return nil, false
	}
	cl, err := n.peers.client(ctx, addr)
	if err != nil {
		return nil, false
	}
	cctx, cancel := context.WithTimeout(ctx, max(n.cfg.ElectionTimeout, 200*time.Millisecond))
	defer cancel()
	st, err := cl.Status(cctx, &pb.StatusRequest{})
	if err != nil || st.NodeId != string(s.ID) {
		return nil, false
	}
	return st, true
}

// handOffWait bounds the wait for a caught-up quorum: past it the leader
// hands over anyway (a follower that cannot catch up must not keep a pod
// from stopping; Kubernetes would kill it at the grace period).
func (n *Node) handOffWait() time.Duration { return 10 * n.cfg.ElectionTimeout }

// awaitCaughtUpQuorum returns once enough voters other than this leader
// trail its log by at most MaxTrailingLag entries to form a majority of the
// configuration without it, or after handOffWait, or when this node stops
// leading or ctx ends. A node that is down makes it wait the whole bound;
// then the cluster has no quorum without this node anyway, so the wait costs
// the stopping pod time, not the clients availability.
func (n *Node) awaitCaughtUpQuorum(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, n.handOffWait())
	defer cancel()
	start := time.Now()
	for {
		if n.raft.State() != raft.Leader {
			return
		}
		cfg, _ := n.configuration()
		var others []raft.Server
		voters := 0
		for _, s := range cfg.Servers {
			if s.Suffrage != raft.Voter {
				continue
			}
			voters++
			if string(s.ID) != n.cfg.NodeID {
				others = append(others, s)
			}
		}
		need := voters/2 + 1
		if len(others) < need {
			return // no quorum without this node whatever happens: nothing to wait for
		}
		last := n.raft.LastIndex()
		caught := make(chan bool, len(others))
		for _, s := range others {
			go func() {
				st, ok := n.peerStatus(ctx, s)
				caught <- ok && st.LastLogIndex+n.cfg.MaxTrailingLag >= last
			}()
		}
		up := 0
		for range others {
			if <-caught {
				up++
			}
		}
		if up >= need {
			if waited := time.Since(start); waited > 50*time.Millisecond {
				n.log.Info("hand-off: followers caught up", "waited", waited.Round(time.Millisecond))
			}
			return
		}
		select {
		case <-ctx.Done():
			n.log.Warn("hand-off: no caught-up quorum without this node; handing over anyway",
				"caught_up", up, "need", need, "waited", time.Since(start).Round(time.Millisecond))
			return
		case <-time.After(20 * time.Millisecond): // poll interval
		}
	}
}

// Writes that reach a stopping leader are forwarded, not refused. From the
// moment Shutdown stops proposing (shuttingDown) until Raft names the
// successor, and while the successor takes over, the clients' writes still
// arrive here: the API server sends each method to the leader a forwarded
// answer named, and that is this node. Refusing them (ErrShuttingDown,
// without a hint while no successor is known) sent every client into its
// retry backoff (20 ms, then 40, ...), so the first write after a SIGTERM
// landed 25-57 ms after the signal although the successor led after 7-20 ms
// (failover bench, 20 hand-offs), and later trials, whose retries fell
// behind the election, grew to the longer end. Instead Apply holds such a
// write until Raft names the successor and forwards it there, like any
// follower; the answer's forward note tells the client where to go next.
// Shutdown stops admitting them once the successor is known and waits,
// bounded, for those in flight before it stops Raft and closes the peer
// connections they use.
type handOffCalls struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// enter admits one write of a stopping node; false once drain began.
func (h *handOffCalls) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Add(1)
	return true
}

// open reports whether writes are still admitted (an admitted write that
// is still waiting for the successor gives up once drain began).
func (h *handOffCalls) open() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.closed
}

// done ends an admitted write.
func (h *handOffCalls) done() { h.wg.Done() }

// drain stops admitting writes and waits for the admitted ones, at most
// bound or until ctx ends; it reports whether all of them ended.
func (h *handOffCalls) drain(ctx context.Context, bound time.Duration) bool {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	ended := make(chan struct{})
	go func() { h.wg.Wait(); close(ended) }()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-ended:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
