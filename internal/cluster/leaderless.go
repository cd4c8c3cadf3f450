package cluster

import (
	"context"
	"errors"
	"time"
)

// A node cut off from the majority (a minority partition, an isolated old
// leader) has no leader until the partition heals. Clients spread their
// calls over all coordinators, so if such a node held every call until the
// caller's deadline, one unreachable node would stall a share of all
// requests — with closed-loop clients, all of them — although the majority
// keeps committing. The chaos campaign (test/chaos) found exactly that: a
// forwarded write waited out the 10 s forwarding timeout on a leader it could
// no longer reach, then retried "no leader" until the API server's deadline,
// and the client got a 504 for a write the majority would have taken.
//
// Two rules fix it, both only where nothing was proposed or the outcome may
// be retried safely:
//   - a forwarded call is cancelled as soon as this node stops seeing the
//     leader it forwarded to (it lost contact, or a new leader exists);
//   - Apply and linearizable reads give up with ErrNoLeader after
//     leaderlessLimit without any leader, so the caller (the coordinator
//     answers UNAVAILABLE) can try another node.

// leaderlessLimit is how long one call waits for a leader to appear. The
// wait starts when the old leader is already gone (a follower forgets it when
// its heartbeat timeout fires and the election starts), so three election
// timeouts cover an election including one split vote.
func (n *Node) leaderlessLimit() time.Duration { return 3 * n.cfg.ElectionTimeout }

// leaderlessWait tracks how long one call has been failing for want of a
// leader.
type leaderlessWait struct{ since time.Time }

// giveUp records err and reports whether the call has seen no leader for
// longer than limit without interruption.
func (w *leaderlessWait) giveUp(err error, limit time.Duration) bool {
	if !errors.Is(err, ErrNoLeader) {
		w.since = time.Time{}
		return false
	}
	if w.since.IsZero() {
		w.since = time.Now()
		return false
	}
	return time.Since(w.since) >= limit
}

// cancelOnLeaderChange calls cancel when this node no longer names lid as
// leader: at the leader change Raft reports (leaderwatch.go), or at the
// latest at the next check every ElectionTimeout/4 (observations can be
// dropped). Raft clears the leader when a follower's heartbeat timeout
// fires, so a call to a leader behind a partition, or to one that died,
// ends then instead of at the forwarding RPC's deadline. The returned func
// stops the watcher.
func (n *Node) cancelOnLeaderChange(lid string, cancel context.CancelFunc) (stop func()) {
	done := make(chan struct{})
	leaders := n.leaderEvents()
	go func() {
		t := time.NewTicker(max(n.cfg.ElectionTimeout/4, time.Millisecond))
		defer t.Stop()
		for {
			changed := leaders.next()
			if _, id := n.raft.LeaderWithID(); string(id) != lid {
				cancel()
				return
			}
			select {
			case <-done:
				return
			case <-n.closed:
				return
			case <-changed:
			case <-t.C:
			}
		}
	}()
	return func() { close(done) }
}
