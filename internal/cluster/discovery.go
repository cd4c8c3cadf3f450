package cluster

import (
	"context"
	"errors"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/indexify-go/indexify/internal/retry"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// maintain runs for the life of the node: while it has no Raft state it
// discovers peers and joins or bootstraps; afterwards it keeps its address,
// NodeInfo and cluster id current.
func (n *Node) maintain(ctx context.Context) {
	et := n.cfg.ElectionTimeout
	discoverBO := newBackoff(et/4, 5*time.Second)
	rejoinBO := newBackoff(5*et, 30*time.Second)
	var nextRejoin, nextProbe time.Time
	for ctx.Err() == nil {
		if !n.hasState() {
			if n.discoverOnce(ctx) {
				// Joined: give the leader time to send the log before asking again.
				retry.Sleep(ctx, 5*et)
				continue
			}
			discoverBO.wait(ctx)
			continue
		}
		probed := false
		usable := n.housekeep(ctx)
		if usable {
			rejoinBO.reset()
			nextRejoin = time.Time{}
		} else if len(n.targets) > 0 && time.Now().After(nextRejoin) {
			// No usable leader for a while: our address may have changed or
			// we may have been removed; ask the cluster to (re)admit us.
			n.rejoin(ctx)
			probed = true
			nextRejoin = time.Now().Add(rejoinBO.next())
		}
		// Keep the address book fresh: every few seconds, and every round
		// while no leader is usable -- after a full-cluster restart with new
		// IPs the book is the only way for candidates to reach each other.
		if len(n.targets) > 0 && !probed && (!usable || time.Now().After(nextProbe)) {
			n.probeAll(ctx)
			probed = true
		}
		if probed {
			nextProbe = time.Now().Add(n.addrProbeInterval())
		}
		retry.Sleep(ctx, et)
	}
}

// addrProbeInterval is how often a node with a usable leader re-probes its
// Join targets for the address book.
func (n *Node) addrProbeInterval() time.Duration {
	return max(5*n.cfg.ElectionTimeout, 2*time.Second)
}

type probeAnswer struct {
	addr   string // gRPC address probed
	wantID string // id the static entry promised ("" unknown)
	resp   *pb.ProbeResponse
}

type probeTarget struct{ addr, id string }

// resolveTargets expands Join entries to gRPC addresses. dns: names are
// resolved to all A records on every call; a name that does not resolve (a
// peer not scheduled yet, or a cached negative answer) is skipped, not fatal.
func (n *Node) resolveTargets(ctx context.Context) []probeTarget {
	seen := map[string]bool{}
	var out []probeTarget
	add := func(t probeTarget) {
		if !seen[t.addr] && t.addr != n.cfg.GRPCAdvertise {
			seen[t.addr] = true
			out = append(out, t)
		}
	}
	for _, t := range n.targets {
		if !t.dns {
			if t.id != n.cfg.NodeID {
				add(probeTarget{addr: t.addr(), id: t.id})
			}
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, n.probeTimeout())
		ips, err := net.DefaultResolver.LookupIP(rctx, "ip4", t.host)
		cancel()
		if err != nil {
			n.log.Debug("join target does not resolve (yet)", "name", t.host, "err", err)
			continue
		}
		for _, ip := range ips {
			add(probeTarget{addr: net.JoinHostPort(ip.String(), t.port)})
		}
	}
	return out
}

func (n *Node) probeTimeout() time.Duration {
	return min(max(2*n.cfg.ElectionTimeout, 200*time.Millisecond), 3*time.Second)
}

// probeAll asks every Join target, in parallel, what it knows. Answers from
// this node itself (its own address under another name) are dropped.
func (n *Node) probeAll(ctx context.Context) []probeAnswer {
	targets := n.resolveTargets(ctx)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var out []probeAnswer
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := n.peers.client(ctx, t.addr)
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, n.probeTimeout())
			defer cancel()
			resp, err := cl.Probe(pctx, &pb.ProbeRequest{NodeId: n.cfg.NodeID})
			if err != nil || resp.NodeId == "" || resp.NodeId == n.cfg.NodeID {
				return
			}
			n.book.learnProbe(resp, t.addr)
			mu.Lock()
			out = append(out, probeAnswer{addr: t.addr, wantID: t.id, resp: resp})
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].resp.NodeId < out[j].resp.NodeId })
	return out
}

// discoverOnce is one round of the fresh-node protocol. It reports whether
// this node joined (or bootstrapped) in this round.
//
// Safety: an existing cluster always wins (any peer with state => join, never
// bootstrap); bootstrap only ever writes a voter list that every other
// bootstrapping node computes identically (static list, or the same N
// discovered nodes), and Raft treats identical bootstrap entries as one
// cluster. See DESIGN.md.
func (n *Node) discoverOnce(ctx context.Context) bool {
	defer n.discoverRounds.Add(1)
	expect := n.cfg.BootstrapExpect
	if len(n.targets) == 0 {
		if expect <= 1 {
			return n.bootstrap([]voter{{id: n.cfg.NodeID, addr: n.advertise}})
		}
		n.log.Warn("BootstrapExpect > 1 but no Join targets: waiting to be added by an existing cluster", "expect", expect)
		return false
	}
	answers := n.probeAll(ctx)
	if ctx.Err() != nil {
		return false
	}

	var existing []probeAnswer
	clusters := map[string]bool{}
	for _, a := range answers {
		if a.resp.HasState || a.resp.ClusterId != "" {
			existing = append(existing, a)
			if a.resp.ClusterId != "" {
				clusters[a.resp.ClusterId] = true
			}
		}
	}
	if len(clusters) > 1 {
		n.log.Error("join targets belong to different clusters; refusing to join or bootstrap", "clusters", keys(clusters))
		return false
	}
	if len(existing) > 0 {
		return n.joinVia(ctx, existing)
	}
	if expect == 0 {
		n.log.Debug("no cluster found yet; join-only node keeps probing", "answers", len(answers))
		return false
	}

	if n.static != nil {
		// Static list: count listed nodes that answered without state, plus
		// ourselves. A majority of the list cannot belong to a cluster that
		// exists (any cluster of this list has a majority with state).
		listed := map[string]bool{}
		for _, v := range n.static {
			listed[v.id] = true
		}
		got := map[string]bool{n.cfg.NodeID: true}
		for _, a := range answers {
			if a.wantID == "" {
				continue
			}
			if a.resp.NodeId != a.wantID {
				n.log.Warn("join target answered with an unexpected node id", "addr", a.addr, "want", a.wantID, "got", a.resp.NodeId)
				continue
			}
			if listed[a.resp.NodeId] {
				got[a.resp.NodeId] = true
			}
		}
		if len(got) >= expect/2+1 {
			return n.bootstrap(n.static)
		}
		n.log.Info("waiting for a majority of the static voter list", "answered", len(got), "need", expect/2+1)
		return false
	}

	// Discovery mode: wait for exactly BootstrapExpect distinct nodes.
	found := map[string]string{n.cfg.NodeID: n.advertise}
	for _, a := range answers {
		if a.resp.RaftAddr == "" {
			continue
		}
		if prev, ok := found[a.resp.NodeId]; ok && prev != a.resp.RaftAddr {
			n.log.Warn("two peers claim the same node id", "id", a.resp.NodeId, "addrs", []string{prev, a.resp.RaftAddr})
			return false
		}
		found[a.resp.NodeId] = a.resp.RaftAddr
	}
	switch {
	case len(found) == expect:
		vs := make([]voter, 0, len(found))
		for id, addr := range found {
			vs = append(vs, voter{id: id, addr: addr})
		}
		sortVoters(vs)
		return n.bootstrap(vs)
	case len(found) > expect:
		n.log.Error("more nodes answered than BootstrapExpect; refusing to bootstrap", "found", len(found), "expect", expect)
	default:
		n.log.Info("waiting for BootstrapExpect nodes", "found", len(found), "expect", expect)
	}
	return false
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// bootstrap writes the initial configuration. It does not name the
// cluster: the first leader proposes a random cluster id through the log
// (clusterid.go), so every member agrees on it and a second cluster
// bootstrapped from the same voter list gets another id.
func (n *Node) bootstrap(vs []voter) bool {
	cfg := raft.Configuration{}
	for _, v := range vs {
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v.id), Address: raft.ServerAddress(v.addr)})
	}
	err := n.raft.BootstrapCluster(cfg).Error()
	switch {
	case err == nil:
		n.bootstraps.Add(1)
		// Its state is the bootstrap entry it just wrote: nothing committed
		// exists that it could lack.
		n.releaseVoteHold("bootstrapped the cluster")
		n.log.Info("bootstrapped cluster; its first leader chooses the cluster id", "voters", len(vs))
		return true
	case errors.Is(err, raft.ErrCantBootstrap):
		// A leader of the same list reached us first; its log is ours now.
		n.log.Info("bootstrap skipped: raft state arrived from a leader")
		return true
	default:
		n.log.Error("bootstrap failed", "err", err)
		return false
	}
}

func (n *Node) joinRequest() *pb.JoinRequest {
	req := &pb.JoinRequest{
		NodeId:   n.cfg.NodeID,
		RaftAddr: n.advertise,
		GrpcAddr: n.cfg.GRPCAdvertise,
		HttpAddr: n.cfg.HTTPAdvertise,
		// The leader publishes it in the joiner's NodeInfo (level.go).
		CommandLevel: n.commandLevel,
	}
	// cluster_id doubles as "I have Raft state": a node without state sends
	// "", which tells the leader its log is empty (see handleJoin).
	if n.hasState() {
		req.ClusterId = n.ClusterID()
	}
	return req
}

// joinVia asks peers that belong to a cluster to admit this node (each
// forwards to its leader). Peers that know a leader are tried first.
func (n *Node) joinVia(ctx context.Context, peers []probeAnswer) bool {
	sort.SliceStable(peers, func(i, j int) bool {
		return peers[i].resp.LeaderId != "" && peers[j].resp.LeaderId == ""
	})
	req := n.joinRequest()
	for _, p := range peers {
		cl, err := n.peers.client(ctx, p.addr)
		if err != nil {
			continue
		}
		jctx, cancel := context.WithTimeout(ctx, n.rpcTimeout())
		resp, err := cl.Join(jctx, req)
		cancel()
		if err != nil {
			n.log.Info("join attempt failed", "via", p.addr, "err", err)
			continue
		}
		n.adoptClusterID(resp.ClusterId)
		n.log.Info("joined cluster", "via", p.addr, "leader", resp.LeaderId, "cluster_id", resp.ClusterId)
		return true
	}
	return false
}

// rejoin is the path for a node with state that cannot see a leader: probe
// the Join targets and ask a member of our own cluster to (re)admit us.
func (n *Node) rejoin(ctx context.Context) {
	answers := n.probeAll(ctx)
	cid := n.ClusterID()
	var members []probeAnswer
	for _, a := range answers {
		if a.resp.HasState && (cid == "" || a.resp.ClusterId == "" || a.resp.ClusterId == cid) {
			members = append(members, a)
		}
	}
	if len(members) > 0 {
		n.joinVia(ctx, members)
	}
}

// housekeep runs while this node has state. It reports whether a leader was
// usable (known and recently heard from).
func (n *Node) housekeep(ctx context.Context) bool {
	_, lid := n.raft.LeaderWithID()
	isLeader := n.raft.State() == raft.Leader
	if lid == "" || (!isLeader && time.Since(n.raft.LastContact()) > 3*n.cfg.ElectionTimeout) {
		return false
	}
	if n.ClusterID() == "" {
		n.learnClusterID(ctx)
	}
	if isLeader {
		return true // the leader session keeps the leader's own NodeInfo current
	}
	cfg, _ := n.configuration()
	if s, ok := findServer(cfg, n.cfg.NodeID); !ok || string(s.Address) != n.advertise {
		// Our Raft address changed (new IP) or we were removed: ask the leader.
		if cl, _, err := n.leaderClient(ctx); err == nil {
			jctx, cancel := context.WithTimeout(ctx, n.rpcTimeout())
			resp, err := cl.Join(jctx, n.joinRequest())
			cancel()
			if err != nil {
				n.log.Warn("re-join via leader failed", "err", err)
			} else {
				n.adoptClusterID(resp.ClusterId)
			}
		}
		return true
	}
	if !n.selfInfoCurrent() {
		actx, cancel := context.WithTimeout(ctx, 5*n.cfg.ElectionTimeout)
		if _, err := n.Apply(actx, n.upsertSelfCmd()); err != nil && ctx.Err() == nil {
			n.log.Debug("upsert own NodeInfo failed; will retry", "err", err)
		}
		cancel()
	}
	return true
}

// learnClusterID asks the leader this node follows for the cluster id, for
// nodes that received their state by replication (a snapshot, so they never
// applied the id entry) before knowing it. Only the leader: it is the node
// whose log ours matches; other members listed in our configuration may
// belong to another cluster with the same member names.
func (n *Node) learnClusterID(ctx context.Context) {
	_, lid := n.raft.LeaderWithID()
	id := string(lid)
	if id == n.cfg.NodeID || id == "" {
		return
	}
	addr := n.grpcAddrOf(id)
	if addr == "" {
		return
	}
	cl, err := n.peers.client(ctx, addr)
	if err != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, n.probeTimeout())
	resp, err := cl.Probe(pctx, &pb.ProbeRequest{NodeId: n.cfg.NodeID})
	cancel()
	if err == nil && resp.NodeId == id && resp.ClusterId != "" {
		n.adoptClusterID(resp.ClusterId)
		n.book.learnProbe(resp, addr)
	}
}
