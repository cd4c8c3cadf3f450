package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// readyLag is how many entries a node may have committed but not applied and
// be reported ready.
const readyLag = 64

// leaderReadyLag is how many entries a follower's applied index may trail
// the leader's commit index and the follower be reported ready. It is wider
// than readyLag because the two numbers are read a round trip (and up to
// leaderCommitTTL) apart while writes go on; it is far below what a
// restarted follower misses (thousands of entries in the failover bench).
const leaderReadyLag = 1024

// leaderCommitTTL is how long a follower reuses the leader's commit index
// before asking again (probes come every few hundred milliseconds). A reused
// value is smaller than the leader's current one, so it can only make the
// follower look closer to caught up, by what was committed since: the TTL
// bounds that.
const leaderCommitTTL = time.Second

// leaderCommitCache holds the leader's commit index as this follower last
// asked for it. A follower's own commit index is no measure of its lag:
// hashicorp/raft caps it at the follower's last log index, and a follower
// restarted with an old log reports commit = applied = 0 until the leader's
// replication reaches it, so it looked caught up (and Kubernetes moved a
// rolling restart on) while it held none of the recent state.
type leaderCommitCache struct {
	mu     sync.Mutex
	leader string
	index  uint64
	at     time.Time
	ok     bool // index was learned at least once in this process
	asking bool // a caller is asking the leader right now
}

// errAskingLeader is what a caller gets, with the last value learned, while
// another caller's question to the leader is still out.
var errAskingLeader = errors.New("the leader is being asked for its commit index")

// get returns the cached index when it is fresh and from leader; otherwise
// one caller asks (ask returns the answering leader's id and its commit
// index), and the callers that come while it waits get the last value
// learned instead of waiting too. The question may take up to a second (a
// leader that does not answer), and readiness probes come concurrently and
// have their own timeouts: queued behind one slow question, they all failed
// together.
func (c *leaderCommitCache) get(leader string, ask func() (string, uint64, error)) (index uint64, known bool, err error) {
	c.mu.Lock()
	if c.ok && c.leader == leader && time.Since(c.at) < leaderCommitTTL {
		defer c.mu.Unlock()
		return c.index, true, nil
	}
	if c.asking {
		defer c.mu.Unlock()
		return c.index, c.ok, errAskingLeader
	}
	c.asking = true
	c.mu.Unlock()

	lid, idx, err := ask()

	c.mu.Lock()
	defer c.mu.Unlock()
	c.asking = false
	if err != nil {
		return c.index, c.ok, err
	}
	c.leader, c.index, c.at, c.ok = lid, max(c.index, idx), time.Now(), true
	return c.index, true, nil
}

// leaderCommitIndex returns the leader's commit index, asking the leader
// when the cached value is older than leaderCommitTTL or from another
// leader. When the leader cannot be asked, or another caller is asking it,
// it returns the last value it learned (a lower bound: commit indexes only
// grow); known is false only when no value was ever learned in this
// process.
func (n *Node) leaderCommitIndex() (index uint64, known bool, err error) {
	_, lid := n.raft.LeaderWithID()
	return n.leaderCommit.get(string(lid), func() (string, uint64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), min(n.rpcTimeout(), time.Second))
		defer cancel()
		cl, lid2, err := n.leaderClient(ctx)
		if err != nil {
			return "", 0, err
		}
		resp, err := cl.Status(forwardedCtx(ctx), &pb.StatusRequest{})
		if err != nil {
			return "", 0, err
		}
		return lid2, resp.CommitIndex, nil
	})
}

// Ready reports whether this node should receive client traffic: it is a
// member of the configuration, a leader is known (and heard from recently),
// and it has applied (nearly) everything the leader has committed.
func (n *Node) Ready() (bool, string) {
	ok, why := n.ready()
	if !ok {
		// The likely cause when a node of another cluster keeps knocking:
		// this node refuses it and has no usable leader of its own.
		if c := n.recentConflict(); c != "" {
			why += "; " + c
		}
	}
	return ok, why
}

func (n *Node) ready() (bool, string) {
	if n.shuttingDown.Load() || !n.Live() {
		return false, "shutting down"
	}
	cfg, _ := n.configuration()
	if _, ok := findServer(cfg, n.cfg.NodeID); !ok {
		return false, "not in the raft configuration"
	}
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return false, "no leader known"
	}
	leader := n.raft.State() == raft.Leader
	if !leader && time.Since(n.raft.LastContact()) > 2*n.cfg.ElectionTimeout {
		return false, "no recent contact with the leader"
	}
	if leader && n.leaderReadyTerm.Load() != n.raft.CurrentTerm() {
		return false, "leader is still applying the log of previous terms"
	}
	commit, applied := n.raft.CommitIndex(), n.raft.AppliedIndex()
	if commit > applied+readyLag {
		return false, fmt.Sprintf("catching up: applied %d of %d", applied, commit)
	}
	if !leader {
		lc, known, err := n.leaderCommitIndex()
		if !known {
			return false, fmt.Sprintf("leader's commit index not learned yet: %v", err)
		}
		if lc > applied+leaderReadyLag {
			return false, fmt.Sprintf("catching up: applied %d of the leader's %d", applied, lc)
		}
	}
	// A node that got its state by replication learns the cluster id from a
	// peer a moment later; until then it cannot vouch for which cluster it
	// serves (operators and tests compare ids), so it is not ready.
	if n.ClusterID() == "" {
		return false, "cluster id not learned yet"
	}
	return true, "ok"
}
