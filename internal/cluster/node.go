package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Node is one coordinator's Raft member.
type Node struct {
	cfg       Config
	log       *slog.Logger
	fsm       *state.FSM
	raft      *raft.Raft
	wal       *raftwal.WAL // log and stable store (logstore.go)
	logs      raft.LogStore
	snaps     *raft.FileSnapshotStore
	stream    *streamLayer
	advertise string // Raft address as stored in the configuration
	// commandLevel is what this node announces and applies
	// (state.CommandLevel; a test lowers it to play an older version).
	commandLevel uint32
	targets      []joinTarget // parsed cfg.Join
	static       []voter      // static-list bootstrap voters (nil: not static mode)
	peers        *peerClients
	book         *addressBook // where to dial servers whose configured address is stale
	idPath       string
	ap           *autopilot

	notifyCh chan bool     // raft leadership notifications (blocking, ordered)
	leaders  leaderWatch   // leader changes for retry loops (leaderwatch.go)
	closed   chan struct{} // closed once Shutdown finished
	// raftSet is closed once n.raft is assigned. Raft's goroutines start
	// inside raft.NewRaft, before the assignment: whatever they wake (the
	// leadership watcher) waits for this before it reads n.raft.
	raftSet chan struct{}

	mu        sync.Mutex
	clusterID string
	leaderFns []func(ctx context.Context, term uint64)
	started   bool
	isLeader  bool // last leadership notification
	runCtx    context.Context
	runCancel context.CancelFunc
	session   *leaderSession

	conflicts       conflictTracker // refusals of another cluster's traffic (clusterid.go)
	membershipMu    sync.Mutex      // serialises configuration changes made by this leader
	leaderReadyTerm atomic.Uint64   // term whose leader barrier completed (0: not ready)
	shuttingDown    atomic.Bool
	handOff         handOffCalls      // writes forwarded while this node stops (handoff.go)
	bootstraps      atomic.Int32      // BootstrapCluster calls that succeeded in this process
	discoverRounds  atomic.Int32      // completed discovery rounds (tests observe progress)
	voteHeld        atomic.Bool       // started without Raft state, not caught up yet (votehold.go)
	gate            *voteGate         // the transport wrapper enforcing the hold
	votesWithheld   atomic.Int64      // vote requests refused while held
	leaderCommit    leaderCommitCache // the leader's commit index as last asked (ready.go)
	withheldLogged  atomic.Int64      // unix nanos of the last "withholding vote" log line
	peerGone        chan struct{}     // a Raft connection from a peer ended (leadergone.go)
	gone            leaderGoneStats   // what the looks at a leader's silence found (leadergone.go)
	bg              sync.WaitGroup
	shutdownOnce    sync.Once
	shutdownErr     error
}

// New opens the Raft stores and transport and starts Raft. It never
// bootstraps: Start decides that.
func New(cfg Config, fsm *state.FSM) (n *Node, err error) {
	if fsm == nil {
		return nil, errors.New("cluster: nil FSM")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	targets, err := parseJoins(cfg.Join)
	if err != nil {
		return nil, err
	}
	raftDir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(raftDir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	removeRestoreLeftovers(cfg.DataDir)
	idPath := filepath.Join(cfg.DataDir, "node.json")
	ident, err := loadIdentity(idPath, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	hlog := newHCLogger(cfg.Logger)

	n = &Node{
		cfg:          cfg,
		log:          cfg.Logger.With("component", "cluster", "node", cfg.NodeID),
		fsm:          fsm,
		targets:      targets,
		commandLevel: state.CommandLevel,
		idPath:       idPath,
		clusterID:    ident.ClusterID,
		notifyCh:     make(chan bool, 8),
		closed:       make(chan struct{}),
		raftSet:      make(chan struct{}),
		peerGone:     make(chan struct{}, 1),
	}
	dialOpts := append(cfg.DialOptions[:len(cfg.DialOptions):len(cfg.DialOptions)], AuthDialOptions(cfg.ClusterSecret)...)
	n.peers = newPeerClients(append(dialOpts, n.idDialOptions()...))
	n.ap = newAutopilot(n)
	n.book = newAddressBook(n, 4*n.addrProbeInterval())
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()

	n.stream, err = newStreamLayer(cfg.RaftBind, cfg.RaftAdvertise)
	if err != nil {
		return nil, err
	}
	closers = append(closers, n.stream.Close)
	n.stream.tls, n.stream.secret = cfg.RaftTLS, cfg.ClusterSecret
	n.stream.ended = n.notePeerConnEnded
	n.stream.guard = &idGuard{hello: n.localHello, check: n.checkPeer, legacy: n.noteLegacyPeer, stray: n.noteStrayConn}
	n.advertise = n.stream.advertise.String()
	if n.static, err = staticVoters(cfg.NodeID, n.advertise, cfg.BootstrapExpect, targets); err != nil {
		return nil, err
	}

	n.wal, err = openLogStore(raftDir, hlog)
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft log: %w", err)
	}
	closers = append(closers, n.wal.Close)
	if n.logs, err = raft.NewLogCache(512, n.wal); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if n.snaps, err = raft.NewFileSnapshotStoreWithLogger(raftDir, 2, hlog); err != nil {
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	// Decide the vote hold before Raft can receive a single RPC.
	lastIdx, err := n.wal.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("cluster: raft log: %w", err)
	}
	snapList, err := n.snaps.List()
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	if err := n.initVoteHold(lastIdx == 0 && len(snapList) == 0); err != nil {
		return nil, err
	}
	netTrans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		ServerAddressProvider: n.book,
		Stream:                n.stream,
		MaxPool:               3,
		// 1 turns hashicorp/raft's pipelined replication off: every
		// AppendEntries waits for its answer. With the default (2) the
		// pipeline's two hand-off channels are unbuffered, and when a
		// follower answers "not successful" or a newer term, the decoder
		// stops reading while the sender, woken by the 10 ms commit
		// timeout, parks one more request: replication to that follower
		// stops for good (it keeps getting heartbeats, so it never calls
		// an election; it just never sees another entry) and the leader's
		// Shutdown waits forever. Seen twice in one CI-size run of this
		// package (a follower stuck at applied index 4; Shutdown hung 18
		// min). With batching, pipelining gains nothing on a LAN
		// (DESIGN.md, "Replication is not pipelined").
		MaxRPCsInFlight: 1,
		Timeout:         10 * time.Second,
		Logger:          hlog,
	})
	trans := newVoteGate(netTrans, cfg.NodeID, n.advertise, n.voteHeld.Load, n.logEmpty, n.noteWithheld)
	n.gate = trans
	closers = append(closers, trans.Close)

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	raftTiming(rc, cfg.ElectionTimeout)
	// hashicorp/raft tells followers about a new commit index only with the
	// next AppendEntries: new entries, or after CommitTimeout (randomised up
	// to 2x) when the leader is idle. Followers apply, and so push tasks to
	// executors connected to them, that much later. Upload -> task at a
	// follower-attached executor, light load (BENCHMARKS.md): 50 ms gave
	// ~80 ms, 10 ms gave 22 ms, 2 ms gives 9 ms. The price is idle CPU: the
	// leader sends 250-500 empty AppendEntries per follower per second; an
	// idle 3-node cluster took 10% of one core at 10 ms and 21% at 2 ms
	// (leader 6 -> 12%, each follower 2 -> 5%), measured the same hour.
	rc.CommitTimeout = 2 * time.Millisecond
	// Group commit: with BatchApplyCh the apply channel buffers up to
	// MaxAppendEntries proposals, so one leader-loop turn appends (one disk
	// write) and replicates (one AppendEntries per follower) a whole batch of
	// concurrent writes, and the FSM applies it with one ApplyBatch (one
	// lock, one watcher wake-up). 256 entries per batch instead of the
	// default 64 keeps batches whole at 64+ concurrent clients. See
	// BENCHMARKS.md for the figures.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.NotifyCh = n.notifyCh
	// A removed server stays up: it may be re-added by Join (autopilot removed
	// it while it was partitioned), and Leave shuts down explicitly.
	rc.ShutdownOnRemove = false
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("cluster: raft config: %w", err)
	}
	// The consumer must run before Raft can win an election: Raft blocks on
	// NotifyCh (that is why we use it: no leadership transition is lost).
	go n.watchLeadership()
	closers = append(closers, func() error { close(n.closed); return nil })

	// The log store reports stored batches to the address-change fence
	// (peerfence.go).
	n.raft, err = raft.NewRaft(rc, &idFSM{FSM: fsm, n: n}, fencedLogs{LogStore: n.logs, f: trans.fence}, n.wal, n.snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	close(n.raftSet)
	n.book.raft.Store(n.raft)
	n.bg.Add(1)
	go n.promptElectionsLoop()
	n.log.Info("raft started", "raft_addr", n.advertise, "has_state", n.hasState(),
		"cluster_id", ident.ClusterID, "static_voters", len(n.static), "vote_held", n.voteHeld.Load())
	return n, nil
}

// raftTiming derives hashicorp/raft's failure-detection timeouts from the one
// knob (DESIGN.md, "Timing"). A follower that hears nothing (heartbeats come
// every knob/10) for the knob, checked at randomised 1-2x knob intervals,
// pre-votes; a candidate retries after a randomised 1-2x knob. The leader
// steps down when it has not heard from a quorum for the knob: the lease is
// as long as raft allows (<= the heartbeat timeout; 1 ms less, so that
// promptHeartbeatCheck's 1 µs dip still validates), so a leader whose pod is
// starved of CPU for a while (CFS throttling, a loaded node) keeps its place
// instead of forcing an election that would cost more than the stall.
// Pre-vote stays on (hashicorp/raft's default): a node cut off and coming
// back does not depose a healthy leader by bumping the term.
func raftTiming(rc *raft.Config, knob time.Duration) {
	rc.HeartbeatTimeout = knob
	rc.ElectionTimeout = knob
	rc.LeaderLeaseTimeout = knob - time.Millisecond
}

// Start runs the discovery/bootstrap/join loop and the housekeeping that
// keeps this node's address and NodeInfo current, until ctx ends or Shutdown.
// Leadership hooks registered with RunWhileLeader start from here on.
func (n *Node) Start(ctx context.Context) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started || n.shuttingDown.Load() {
		return
	}
	n.started = true
	n.runCtx, n.runCancel = context.WithCancel(ctx)
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		n.maintain(n.runCtx)
	}()
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		n.releaseVoteHoldLoop(n.runCtx)
	}()
	if n.isLeader {
		n.startSessionLocked()
	}
}

// Raft exposes the underlying Raft instance (metrics, operator tooling).
func (n *Node) Raft() *raft.Raft { return n.raft }

// ID is this node's Raft server id.
func (n *Node) ID() string { return n.cfg.NodeID }

// RaftAddr is the Raft address this node advertises.
func (n *Node) RaftAddr() string { return n.advertise }

// ClusterID returns the persisted cluster id ("" until known).
func (n *Node) ClusterID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.clusterID
}

// IsLeader reports whether this node is the Raft leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the current leader's id and gRPC address ("" when unknown).
func (n *Node) Leader() (id, grpcAddr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	return string(lid), n.grpcAddrOf(string(lid))
}

// Live reports whether the local process is healthy: Raft is running. It does
// not depend on a quorum (a quorum-dependent liveness probe kills pods before
// a leader can be elected).
func (n *Node) Live() bool {
	select {
	case <-n.closed:
		return false
	default:
	}
	return n.raft.State() != raft.Shutdown
}

// Status describes this node and, as far as it knows, the cluster.
// StatusResponse.leader_addr is the leader's gRPC address.
func (n *Node) Status() *pb.StatusResponse {
	_, lid := n.raft.LeaderWithID()
	st := &pb.StatusResponse{
		NodeId:        n.cfg.NodeID,
		ClusterId:     n.ClusterID(),
		State:         n.raft.State().String(),
		LeaderId:      string(lid),
		Term:          n.raft.CurrentTerm(),
		CommitIndex:   n.raft.CommitIndex(),
		AppliedIndex:  n.raft.AppliedIndex(),
		LastLogIndex:  n.raft.LastIndex(),
		Conflict:      n.recentConflict(),
		VoteHeld:      n.VoteHeld(),
		VotesWithheld: n.VotesWithheld(),
	}
	if lid != "" {
		st.LeaderAddr = n.grpcAddrOf(string(lid))
	}
	cfg, _ := n.configuration()
	isLeader := n.raft.State() == raft.Leader
	for _, s := range cfg.Servers {
		m := &pb.Member{
			Id:       string(s.ID),
			RaftAddr: string(s.Address),
			GrpcAddr: n.grpcAddrOf(string(s.ID)),
			Suffrage: suffrageName(s.Suffrage),
			// By id: right after a restart with new IPs the configuration
			// may still hold the leader's old address.
			Leader:        s.ID == lid,
			LastContactMs: -1,
		}
		switch {
		case string(s.ID) == n.cfg.NodeID:
			m.LastContactMs, m.Healthy = 0, n.Live()
		case isLeader:
			if h, ok := n.ap.view(s.ID); ok {
				m.Healthy = h.healthy
				if !h.lastContact.IsZero() {
					m.LastContactMs = time.Since(h.lastContact).Milliseconds()
				}
			}
		case s.ID == lid:
			if lc := n.raft.LastContact(); !lc.IsZero() {
				m.LastContactMs = time.Since(lc).Milliseconds()
				m.Healthy = time.Since(lc) <= 2*n.cfg.ElectionTimeout
			}
		}
		st.Members = append(st.Members, m)
	}
	return st
}

func suffrageName(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return "voter"
	case raft.Nonvoter:
		return "nonvoter"
	default:
		return "staging"
	}
}

// Shutdown stops this node without leaving the cluster. A leader first waits
// (bounded) until the voters it leaves behind can commit without it
// (handoff.go), then stops proposing and hands leadership to a caught-up
// follower, which costs no election timeout. Writes that reach it from
// then on are forwarded to the successor once Raft names it (handoff.go);
// once it is named, new ones are refused (ErrShuttingDown, naming it) and
// those in flight finish before Raft stops. It never removes itself from the configuration: a
// restart is not a scale-down.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() {
		if n.raft.State() == raft.Leader && n.voterCount() > 1 {
			n.awaitCaughtUpQuorum(ctx) // still taking writes (handoff.go)
		}
		n.shuttingDown.Store(true)
		if n.raft.State() == raft.Leader && n.voterCount() > 1 {
			n.log.Info("transferring leadership before shutdown")
			if err := waitFuture(ctx, n.raft.LeadershipTransfer()); err != nil {
				n.log.Warn("leadership transfer failed; shutting down anyway", "err", err)
			} else {
				n.awaitNewLeader(ctx) // so refusals from here on name it
			}
		}
		// Writes that arrived while stopping were forwarded to the
		// successor (handoff.go); let those in flight finish before Raft
		// and the peer connections go away.
		if !n.handOff.drain(ctx, 2*n.cfg.ElectionTimeout) {
			n.log.Warn("shutdown: writes forwarded during the hand-off did not finish in time")
		}
		n.mu.Lock()
		if n.runCancel != nil {
			n.runCancel()
		}
		sess := n.session
		if sess != nil {
			sess.cancel()
		}
		n.mu.Unlock()
		n.leaderReadyTerm.Store(0)
		if err := n.raft.Shutdown().Error(); err != nil {
			n.shutdownErr = fmt.Errorf("cluster: raft shutdown: %w", err)
		}
		close(n.closed)
		// Background loops and leadership hooks observe their cancelled
		// contexts; wait for them (bounded by ctx) before closing the stores.
		waitDone := make(chan struct{})
		go func() {
			n.bg.Wait()
			if sess != nil {
				<-sess.done
			}
			close(waitDone)
		}()
		select {
		case <-waitDone:
		case <-ctx.Done():
			n.log.Warn("shutdown: background work did not stop in time", "err", ctx.Err())
		}
		n.peers.close()
		if err := n.wal.Close(); err != nil && n.shutdownErr == nil {
			n.shutdownErr = fmt.Errorf("cluster: close raft log: %w", err)
		}
	})
	return n.shutdownErr
}

// Leave removes this node from the cluster (real scale-down), then shuts it
// down. A leader hands leadership over first, once the voters it leaves
// behind hold its log (handoff.go), so the removal is committed by the next
// leader without an election timeout or a catch-up stall.
func (n *Node) Leave(ctx context.Context) error {
	if n.shuttingDown.Load() {
		return ErrShuttingDown
	}
	n.mu.Lock()
	if n.runCancel != nil {
		n.runCancel() // housekeeping would otherwise re-join us
	}
	n.mu.Unlock()
	bo := newBackoff(n.cfg.ElectionTimeout/10, n.cfg.ElectionTimeout)
	for {
		err := n.leaveOnce(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, errLastVoter) || !bo.wait(ctx) {
			return fmt.Errorf("cluster: leave: %w", err)
		}
		n.log.Debug("leave: retrying", "err", err)
	}
	n.log.Info("left the cluster")
	return n.Shutdown(ctx)
}

var (
	errLastVoter   = errors.New("cluster: the last voter cannot leave")
	errTransferred = errors.New("cluster: leadership handed over; removal pending")
)

func (n *Node) leaveOnce(ctx context.Context) error {
	cfg, _ := n.configuration()
	if _, ok := findServer(cfg, n.cfg.NodeID); !ok {
		return nil // already removed
	}
	if n.raft.State() == raft.Leader {
		if n.voterCount() <= 1 {
			return errLastVoter
		}
		// The voters left commit the removal and everything after it, so
		// they must hold this log first, as at Shutdown (handoff.go).
		n.awaitCaughtUpQuorum(ctx)
		if err := waitFuture(ctx, n.raft.LeadershipTransfer()); err != nil {
			return err
		}
		return errTransferred // next round asks the new leader to remove us
	}
	cl, _, err := n.leaderClient(ctx)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(forwardedCtx(ctx), n.rpcTimeout())
	defer cancel()
	_, err = cl.RemovePeer(actx, &pb.RemovePeerRequest{NodeId: n.cfg.NodeID})
	return err
}

// hasState reports whether this node has any Raft state (a bootstrap entry, a
// replicated log or a snapshot). A node with state never bootstraps.
func (n *Node) hasState() bool { return n.raft.LastIndex() > 0 }

func (n *Node) configuration() (raft.Configuration, uint64) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, 0
	}
	return f.Configuration(), f.Index()
}

func findServer(cfg raft.Configuration, id string) (raft.Server, bool) {
	for _, s := range cfg.Servers {
		if string(s.ID) == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

func (n *Node) voterCount() int {
	cfg, _ := n.configuration()
	c := 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// setClusterID records and persists the cluster id.
func (n *Node) setClusterID(id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.clusterID == id {
		return nil
	}
	if err := writeIdentity(n.idPath, identity{NodeID: n.cfg.NodeID, ClusterID: id}); err != nil {
		return err
	}
	n.clusterID = id
	return nil
}

// adoptClusterID takes the cluster id reported by the cluster this node
// joined. A node that already has Raft state never changes its cluster id.
func (n *Node) adoptClusterID(id string) {
	cur := n.ClusterID()
	if id == "" || id == cur {
		return
	}
	if cur != "" && n.hasState() {
		n.log.Error("peer reports a different cluster id; keeping ours", "ours", cur, "theirs", id)
		return
	}
	if cur != "" {
		n.log.Warn("replacing cluster id of a node without raft state", "old", cur, "new", id)
	}
	if err := n.setClusterID(id); err != nil {
		n.log.Error("persist cluster id", "err", err)
	}
}

// grpcAddrOf maps a server id to its ClusterService address (see
// addressBook.grpcAddr).
func (n *Node) grpcAddrOf(id string) string { return n.book.grpcAddr(id) }

// rpcTimeout bounds one peer RPC.
func (n *Node) rpcTimeout() time.Duration { return max(10*n.cfg.ElectionTimeout, 2*time.Second) }

// waitFuture waits for a Raft future or ctx, whichever comes first.
func waitFuture(ctx context.Context, f raft.Future) error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
