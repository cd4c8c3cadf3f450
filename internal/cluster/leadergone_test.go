package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// crash stops tn the way kill -9 looks to its peers: Raft stops with no
// leadership hand-off and every connection it dialled ends (the kernel
// closes a dead process's sockets; in-process, NetworkTransport keeps its
// pooled connections open after Close, so they are closed here).
func (tn *testNode) crash(t *testing.T) {
	t.Helper()
	if err := tn.node.raft.Shutdown().Error(); err != nil {
		t.Fatalf("crash %s: %v", tn.spec.id, err)
	}
	tn.node.gate.Transport.(*raft.NetworkTransport).CloseStreams()
	tn.stop()
}

// The leader dies with its sockets closed: each follower schedules a look at
// the leader's silence, and the election starts from a prompted heartbeat
// check rather than from Raft's next randomised timer tick. The knob is 1 s
// so that the timer's 1-3 s window and the prompt (exactly 1 s here: no
// jitter) are far apart; the test asserts which path ran, not how long it
// took (it logs that).
func TestFollowersPromptElectionWhenLeaderConnectionsEnd(t *testing.T) {
	specs := newSpecs(t, 3)
	join := staticJoin(specs)
	var nodes []*testNode
	for _, s := range specs {
		nodes = append(nodes, startNode(t, s, func(c *Config) {
			c.Join, c.BootstrapExpect = join, 3
			c.ElectionTimeout = time.Second
		}, func(n *Node) { n.gone.noJitter.Store(true) }))
	}
	leader := waitLeader(t, nodes...)
	mustCreateNamespace(t, leader.node, "before")
	var rest []*testNode
	for _, tn := range nodes {
		if tn != leader {
			rest = append(rest, tn)
		}
	}
	looks0 := map[string]int64{}
	for _, tn := range rest {
		looks0[tn.spec.id] = tn.node.gone.looks.Load()
	}

	t0 := time.Now()
	leader.crash(t)
	next := waitLeader(t, rest...)
	t.Logf("crash -> new leader %s in %v", next.spec.id, time.Since(t0).Round(time.Millisecond))

	var prompted int64
	for _, tn := range rest {
		if got := tn.node.gone.looks.Load(); got <= looks0[tn.spec.id] {
			t.Errorf("%s: no look at the leader's silence scheduled after its connections ended (looks %d)", tn.spec.id, got)
		}
		prompted += tn.node.gone.prompted.Load()
	}
	if prompted == 0 {
		t.Fatal("no follower prompted a heartbeat check: the election waited for Raft's own timer")
	}
	mustCreateNamespace(t, next.node, "after")
}

// A connection that ends while the leader is alive (a pooled connection
// dropped, a vote request done, a hand-off) must not disturb it: the look
// finds fresh contact and does nothing.
func TestLeaderGoneLookLeavesALiveLeaderAlone(t *testing.T) {
	specs := newSpecs(t, 3)
	join := staticJoin(specs)
	var nodes []*testNode
	for _, s := range specs {
		nodes = append(nodes, startNode(t, s, func(c *Config) {
			c.Join, c.BootstrapExpect = join, 3
		}, nil))
	}
	leader := waitLeader(t, nodes...)
	term := leader.node.raft.CurrentTerm()
	for _, tn := range nodes {
		if tn == leader {
			continue
		}
		talking0 := tn.node.gone.talking.Load()
		tn.node.notePeerConnEnded()
		waitFor(t, tn.spec.id+"'s look at the leader", func() (bool, string) {
			if tn.node.gone.talking.Load() > talking0 {
				return true, ""
			}
			return false, fmt.Sprintf("looks %d talking %d prompted %d", tn.node.gone.looks.Load(), tn.node.gone.talking.Load(), tn.node.gone.prompted.Load())
		})
		if p := tn.node.gone.prompted.Load(); p != 0 {
			t.Fatalf("%s prompted %d heartbeat checks with a live leader", tn.spec.id, p)
		}
	}
	if now := waitLeader(t, nodes...); now != leader || now.node.raft.CurrentTerm() != term {
		t.Fatalf("leader %s term %d -> %s term %d", leader.spec.id, term, now.spec.id, now.node.raft.CurrentTerm())
	}
}
