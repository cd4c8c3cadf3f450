package cluster

import (
	"context"
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
}

// leaderCommitIndex returns the leader's commit index, asking the leader
// when the cached value is older than leaderCommitTTL or from another
// leader. When the leader cannot be asked, it returns the last value it
// learned (a lower bound: commit indexes only grow); known is false only
// when no value was ever learned in this process.
func (n *Node) leaderCommitIndex() (index uint64, known bool, err error) {
	c := &n.leaderCommit
	c.mu.Lock()
	defer c.mu.Unlock()
	_, lid := n.raft.LeaderWithID()
	if c.ok && c.leader == string(lid) && time.Since(c.at) < leaderCommitTTL {
		return c.index, true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(n.rpcTimeout(), time.Second))
	defer cancel()
	cl, lid2, err := n.leaderClient(ctx)
	if err == nil {
		var resp *pb.StatusResponse
		resp, err = cl.Status(forwardedCtx(ctx), &pb.StatusRequest{})
		if err == nil {
			c.leader, c.index, c.at, c.ok = lid2, max(c.index, resp.CommitIndex), time.Now(), true
			return c.index, true, nil
		}
	}
	return c.index, c.ok, err
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
