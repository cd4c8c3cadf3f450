package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// addressBook tells the Raft transport where to dial a server (it is the
// transport's raft.ServerAddressProvider), and tells forwarding where a
// server's ClusterService is.
//
// Why: the Raft configuration stores each server's address, and only a
// leader can change it. When EVERY node restarts with a new IP (no DNS
// names), every configuration holds only stale addresses, no node can reach
// another, no leader is ever elected, and so no Join can fix the addresses:
// the cluster is wedged. The book breaks that cycle with what a node can
// learn without a leader: the Join targets answer Probe with their node id
// and current Raft address. Once a leader exists, the ordinary Join path
// rewrites the configuration and the book is no longer needed.
//
// Lookup order for a server id (the address most recently learned):
//  1. a Probe answer, unless the configuration's address for that server
//     changed after the answer arrived (the leader accepted a Join carrying
//     the server's own, newer address) or the answer is older than fresh
//     (probes repeat every few seconds, and every round while no leader is
//     known, so an answer that stopped coming is not trusted forever);
//  2. the address in the configuration.
//
// NodeInfo rows are not consulted for Raft addresses of configured servers:
// the leader writes a server's NodeInfo right after its configuration entry
// (handleJoin), so the row is never the newer of the two, and after a restart
// it is older -- the FSM holds the last snapshot until the log is replayed,
// while the configuration is read from the whole log at start. They are the
// fallback for servers not in the configuration, and the main source of
// gRPC addresses (grpcAddr).
type addressBook struct {
	n     *Node
	fresh time.Duration
	raft  atomic.Pointer[raft.Raft] // set once Raft is created (the transport exists before it)

	mu     sync.Mutex
	probed map[string]probedAddr
}

type probedAddr struct {
	raftAddr, grpcAddr string
	cfgAddr            string // the configuration's address for the server when the answer arrived
	at                 time.Time
}

func newAddressBook(n *Node, fresh time.Duration) *addressBook {
	return &addressBook{n: n, fresh: fresh, probed: map[string]probedAddr{}}
}

// learnProbe records a Probe answer received from grpcAddr. Answers from
// another cluster are ignored: a node id is only unique within a cluster.
func (b *addressBook) learnProbe(resp *pb.ProbeResponse, grpcAddr string) {
	if resp.NodeId == "" || resp.NodeId == b.n.cfg.NodeID || resp.RaftAddr == "" {
		return
	}
	if cid := b.n.ClusterID(); cid != "" && resp.ClusterId != "" && resp.ClusterId != cid {
		return
	}
	cfgAddr, _ := b.configAddr(resp.NodeId)
	b.mu.Lock()
	defer b.mu.Unlock()
	prev, ok := b.probed[resp.NodeId]
	if (!ok || prev.raftAddr != resp.RaftAddr) && cfgAddr != resp.RaftAddr {
		b.n.log.Info("address book: server answers at an address the configuration does not have",
			"id", resp.NodeId, "configured", cfgAddr, "answered", resp.RaftAddr)
	}
	b.probed[resp.NodeId] = probedAddr{raftAddr: resp.RaftAddr, grpcAddr: grpcAddr, cfgAddr: cfgAddr, at: time.Now()}
}

// probedCurrent returns id's latest Probe answer if it is still the newest
// information about id (see the type comment).
func (b *addressBook) probedCurrent(id string) (probedAddr, bool) {
	b.mu.Lock()
	p, ok := b.probed[id]
	b.mu.Unlock()
	if !ok || time.Since(p.at) > b.fresh {
		return probedAddr{}, false
	}
	if cfgAddr, _ := b.configAddr(id); cfgAddr != p.cfgAddr {
		return probedAddr{}, false
	}
	return p, true
}

// configAddr returns id's address in the latest configuration.
func (b *addressBook) configAddr(id string) (string, bool) {
	r := b.raft.Load()
	if r == nil {
		return "", false
	}
	f := r.GetConfiguration() // non-blocking in hashicorp/raft >= 1.1
	if f.Error() != nil {
		return "", false
	}
	s, ok := findServer(f.Configuration(), id)
	return string(s.Address), ok
}

// ServerAddr implements raft.ServerAddressProvider. An error makes the
// transport fall back to the configuration's address (and log a warning),
// so it is returned only for servers this node knows nothing about.
func (b *addressBook) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	sid := string(id)
	if sid == b.n.cfg.NodeID {
		return raft.ServerAddress(b.n.advertise), nil
	}
	if p, ok := b.probedCurrent(sid); ok {
		return raft.ServerAddress(p.raftAddr), nil
	}
	if a, ok := b.configAddr(sid); ok {
		return raft.ServerAddress(a), nil
	}
	if info, ok := b.n.fsm.Store().Node(sid); ok && info.RaftAddr != "" {
		return raft.ServerAddress(info.RaftAddr), nil
	}
	return "", fmt.Errorf("cluster: no address known for server %s", sid)
}

// grpcAddr maps a server id to its ClusterService address: a current Probe
// answer (the address that answered), else the replicated NodeInfo (each
// node keeps its own row current), else a static Join entry with that id
// ("" if none).
func (b *addressBook) grpcAddr(id string) string {
	n := b.n
	if id == n.cfg.NodeID {
		return n.cfg.GRPCAdvertise
	}
	if p, ok := b.probedCurrent(id); ok && p.grpcAddr != "" {
		return p.grpcAddr
	}
	if info, ok := n.fsm.Store().Node(id); ok && info.GrpcAddr != "" {
		return info.GrpcAddr
	}
	for _, t := range n.targets {
		if !t.dns && t.id == id {
			return t.addr()
		}
	}
	return ""
}
