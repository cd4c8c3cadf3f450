package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func timeNowMs() int64 { return time.Now().UnixMilli() }

// changeTimeout bounds enqueueing a configuration change.
func (n *Node) changeTimeout() time.Duration { return 5 * n.cfg.ElectionTimeout }

// handleJoin admits a node (leader only).
//
//   - Unknown id: added as a non-voter; the autopilot promotes it once it is
//     caught up and stable, so a new node never counts toward quorum before
//     it holds the log.
//   - Known id, new address (restart with a new IP): the address is updated,
//     suffrage kept.
//   - Known voter id that says it has no state (cluster_id ""): its disk was
//     wiped, or it is a static-list voter starting late. It stays a voter.
//     It casts no vote until it has caught up: it holds its vote itself
//     (votehold.go). It is not demoted: a demotion shrinks the voter set,
//     so in a 3-voter cluster the two left could elect no one if the
//     leader died before the autopilot promoted it back (a fresh static
//     cluster whose leader died a second after forming stayed leaderless
//     until that node returned).
func (n *Node) handleJoin(ctx context.Context, req *pb.JoinRequest) error {
	if cid := n.ClusterID(); req.ClusterId != "" && cid != "" && req.ClusterId != cid {
		return state.Errorf(pb.ErrorCode_ERROR_CODE_CONFLICT,
			"node %s belongs to cluster %s, this is cluster %s", req.NodeId, req.ClusterId, cid)
	}
	if req.NodeId == n.cfg.NodeID {
		if req.RaftAddr != n.advertise {
			return state.Errorf(pb.ErrorCode_ERROR_CODE_CONFLICT, "node id %s is the leader's own", req.NodeId)
		}
		return nil
	}
	n.membershipMu.Lock()
	defer n.membershipMu.Unlock()

	id, addr := raft.ServerID(req.NodeId), raft.ServerAddress(req.RaftAddr)
	cfg, _ := n.configuration()
	var existing *raft.Server
	for i := range cfg.Servers {
		s := cfg.Servers[i]
		if s.ID == id {
			existing = &cfg.Servers[i]
			continue
		}
		if s.Address == addr {
			// Raft rejects two servers with one address. The joiner owns the
			// address now, so the old entry is gone -- unless it still answers.
			if n.ap.isHealthy(s.ID) {
				return state.Errorf(pb.ErrorCode_ERROR_CODE_CONFLICT,
					"raft address %s belongs to healthy member %s", addr, s.ID)
			}
			n.log.Warn("join: removing stale server with the joiner's address", "stale", s.ID, "addr", addr)
			if err := n.raft.RemoveServer(s.ID, 0, n.changeTimeout()).Error(); err != nil {
				return err
			}
		}
	}

	switch {
	case existing == nil:
		n.log.Info("join: adding non-voter", "id", id, "addr", addr)
		if err := waitFuture(ctx, n.raft.AddNonvoter(id, addr, 0, n.changeTimeout())); err != nil {
			return err
		}
	case existing.Suffrage == raft.Voter:
		if existing.Address != addr {
			n.log.Info("join: updating voter address", "id", id, "old", existing.Address, "new", addr)
			if err := n.changeAddress(ctx, id, addr, func() raft.Future {
				return n.raft.AddVoter(id, addr, 0, n.changeTimeout())
			}); err != nil {
				return err
			}
		}
		if req.ClusterId == "" {
			n.log.Info("join: voter has an empty log; it withholds its vote until caught up", "id", id)
		}
	default:
		if existing.Address != addr {
			n.log.Info("join: updating non-voter address", "id", id, "new", addr)
			if err := n.changeAddress(ctx, id, addr, func() raft.Future {
				return n.raft.AddNonvoter(id, addr, 0, n.changeTimeout())
			}); err != nil {
				return err
			}
		}
	}
	// Publish the joiner's addresses right away (it upserts itself later too).
	info := &pb.NodeInfo{Id: req.NodeId, RaftAddr: req.RaftAddr, GrpcAddr: req.GrpcAddr, HttpAddr: req.HttpAddr,
		CommandLevel: req.CommandLevel}
	if cur, ok := n.fsm.Store().Node(req.NodeId); !ok || cur.RaftAddr != info.RaftAddr ||
		cur.GrpcAddr != info.GrpcAddr || cur.HttpAddr != info.HttpAddr || cur.CommandLevel != info.CommandLevel {
		cmd := &pb.Command{Timestamp: timeNowMs(), Op: &pb.Command_UpsertNode{UpsertNode: &pb.UpsertNodeCmd{Node: info}}}
		if _, err := n.Apply(ctx, cmd); err != nil {
			n.log.Warn("join: upsert NodeInfo failed", "id", id, "err", err)
		}
	}
	return nil
}

// changeAddress submits a configuration change that gives an existing
// follower a new address, behind the address-change fence (peerfence.go),
// and waits for it.
func (n *Node) changeAddress(ctx context.Context, id raft.ServerID, addr raft.ServerAddress, submit func() raft.Future) error {
	fut, err := n.gate.fence.change(id, addr, max(2*n.cfg.ElectionTimeout, 2*time.Second), submit, func() {
		n.raft.Barrier(n.changeTimeout()) // only to make the leader store one more batch
	})
	if err != nil {
		n.log.Warn("join: address change not made this time", "id", id, "addr", addr, "err", err)
		return state.Errorf(pb.ErrorCode_ERROR_CODE_UNAVAILABLE, "%v", err)
	}
	return waitFuture(ctx, fut)
}

// removeServer removes a server from the configuration (leader only). The
// last voter cannot be removed.
func (n *Node) removeServer(ctx context.Context, id string) error {
	n.membershipMu.Lock()
	defer n.membershipMu.Unlock()
	cfg, _ := n.configuration()
	s, ok := findServer(cfg, id)
	if !ok {
		return nil
	}
	if s.Suffrage == raft.Voter && n.voterCount() <= 1 {
		return state.Errorf(pb.ErrorCode_ERROR_CODE_CONFLICT, "%s is the last voter", id)
	}
	n.log.Info("removing server", "id", id)
	if err := waitFuture(ctx, n.raft.RemoveServer(s.ID, 0, n.changeTimeout())); err != nil {
		return err
	}
	if id != n.cfg.NodeID {
		cmd := &pb.Command{Timestamp: timeNowMs(), Op: &pb.Command_RemoveNode{RemoveNode: &pb.RemoveNodeCmd{Id: id}}}
		if _, err := n.Apply(ctx, cmd); err != nil {
			n.log.Warn("remove NodeInfo failed (autopilot will retry)", "id", id, "err", err)
		}
	}
	return nil
}

// transferLeadership hands leadership to id ("" = the most suitable voter)
// and returns the new leader's id once known.
func (n *Node) transferLeadership(ctx context.Context, id string) (string, error) {
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		if id == n.cfg.NodeID {
			return id, nil
		}
		cfg, _ := n.configuration()
		s, ok := findServer(cfg, id)
		if !ok || s.Suffrage != raft.Voter {
			return "", state.Errorf(pb.ErrorCode_ERROR_CODE_NOT_FOUND, "no voter %q in the configuration", id)
		}
		f = n.raft.LeadershipTransferToServer(s.ID, s.Address)
	}
	if err := waitFuture(ctx, f); err != nil {
		return "", fmt.Errorf("cluster: leadership transfer: %w", err)
	}
	// The target won its election; wait until we have heard from it.
	for {
		if _, lid := n.raft.LeaderWithID(); lid != "" && string(lid) != n.cfg.NodeID {
			return string(lid), nil
		}
		if !retry.Sleep(ctx, n.cfg.ElectionTimeout/20) {
			return "", ctx.Err()
		}
	}
}

// updateOwnAddress corrects this leader's own entry in the configuration
// when it came back with a new Raft address. Followers fix theirs through
// Join, but a leader cannot Join itself, and after a full-cluster restart
// with new IPs the first leader's entry is stale too. Peers dial it through
// the address book meanwhile.
func (n *Node) updateOwnAddress(ctx context.Context, _ uint64) {
	bo := newBackoff(n.cfg.ElectionTimeout/10, n.cfg.ElectionTimeout)
	for ctx.Err() == nil {
		cfg, _ := n.configuration()
		s, ok := findServer(cfg, n.cfg.NodeID)
		if !ok || string(s.Address) == n.advertise || s.Suffrage != raft.Voter {
			return
		}
		n.membershipMu.Lock()
		n.log.Info("leader: updating own raft address", "old", s.Address, "new", n.advertise)
		err := waitFuture(ctx, n.raft.AddVoter(s.ID, raft.ServerAddress(n.advertise), 0, n.changeTimeout()))
		n.membershipMu.Unlock()
		if err == nil {
			return
		}
		n.log.Warn("leader: updating own raft address failed", "err", err)
		if !bo.wait(ctx) {
			return
		}
	}
}
