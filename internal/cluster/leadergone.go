package cluster

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// A leader's process that dies (kill -9, OOM kill, a crashed container)
// leaves evidence the followers can see at once: the kernel closes its
// sockets, so the connections it dialled to each follower end. hashicorp/raft
// does not look: a follower notices the silence only when its heartbeat timer
// next fires, every randomised 1-2x knob, so a dead leader is noticed 1-3x
// the knob after it died, and with pre-vote the election waits for the later
// of the two followers (DESIGN.md, "Timing").
//
// Here a follower that sees a connection from its peers end schedules one
// extra look at the last contact, at last contact + knob + a random
// 0-knob/2 (the jitter keeps the two followers from splitting the vote).
// If the leader has been silent for a knob by then, the follower makes Raft
// check its heartbeat at once (promptHeartbeatCheck); Raft then applies its
// own rule, unchanged: no contact for a knob -> candidate. If the leader is
// alive (a connection closed for any other reason: a pooled connection
// dropped, a candidate's vote request done, a hand-off), contact is fresh and
// nothing happens. So the prompt never starts an election Raft's own timer
// would not have started; it only removes the wait for the timer's next
// tick. A leader that is cut off without its sockets closing (a node lost, a
// partition) sends no such evidence and is found by the timer as before.

// leaderGoneStats counts what promptElectionsLoop did (tests read them).
type leaderGoneStats struct {
	looks    atomic.Int64 // looks scheduled: a connection ended while following a leader
	talking  atomic.Int64 // looks that found the leader (or a new one) talking
	prompted atomic.Int64 // heartbeat checks prompted after a knob of silence
	noJitter atomic.Bool  // tests: look exactly a knob after the last contact
}

// peerGoneConn reports the end of an accepted Raft connection once.
type peerGoneConn struct {
	net.Conn
	once  sync.Once
	ended func()
}

func (c *peerGoneConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			c.once.Do(c.ended)
		}
	}
	return n, err
}

// notePeerConnEnded is the stream layer's callback; it never blocks.
func (n *Node) notePeerConnEnded() {
	select {
	case n.peerGone <- struct{}{}:
	default: // a look is already due; it covers this one too
	}
}

// promptElectionsLoop runs until Shutdown (see the comment at the top).
func (n *Node) promptElectionsLoop() {
	defer n.bg.Done()
	knob := n.cfg.ElectionTimeout
	for {
		select {
		case <-n.closed:
			return
		case <-n.peerGone:
		}
		if n.raft.State() != raft.Follower {
			continue
		}
		if _, id := n.raft.LeaderWithID(); id == "" {
			continue // no leader to lose: Raft's own timers are running the election
		}
		last := n.raft.LastContact()
		if last.IsZero() {
			continue
		}
		n.gone.looks.Add(1)
		jitter := time.Duration(rand.Int64N(int64(knob/2) + 1))
		if n.gone.noJitter.Load() {
			jitter = 0
		}
		t := time.NewTimer(time.Until(last.Add(knob + jitter)))
		select {
		case <-n.closed:
			t.Stop()
			return
		case <-t.C:
		}
		if n.raft.State() != raft.Follower || time.Since(n.raft.LastContact()) < knob {
			n.gone.talking.Add(1) // the leader (or a new one) is talking: nothing to do
			continue
		}
		if err := n.promptHeartbeatCheck(); err != nil {
			n.log.Warn("could not prompt a heartbeat check", "err", err)
			continue
		}
		n.gone.prompted.Add(1)
		n.log.Info("leader silent for the election timeout after its connections ended; heartbeat checked now",
			"silent_for", time.Since(last).Round(time.Millisecond))
	}
}

// promptHeartbeatCheck makes a follower's Raft check its last contact now.
// hashicorp/raft re-arms a follower's heartbeat timer at once when the
// heartbeat timeout is lowered by ReloadConfig; lowering it by 1 µs and
// putting it back is that signal with no lasting change (raftTiming keeps the
// lease below the knob so the lowered value still validates).
func (n *Node) promptHeartbeatCheck() error {
	rc := n.raft.ReloadableConfig()
	hb := rc.HeartbeatTimeout
	rc.HeartbeatTimeout = hb - time.Microsecond
	if err := n.raft.ReloadConfig(rc); err != nil {
		return err
	}
	rc.HeartbeatTimeout = hb
	return n.raft.ReloadConfig(rc)
}
