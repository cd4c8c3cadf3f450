package cluster

// Vote hold: a node that starts without Raft state takes no part in
// elections until it holds every entry that was committed before it started.
//
// A node whose data directory was lost may still be a voter in the
// configuration. hashicorp/raft grants a (pre-)vote to any candidate whose
// log is at least as up to date as the voter's own; an empty log loses that
// comparison to everybody, and a node without a configuration does not even
// check that the candidate is a member. Its lost copy may have been part of
// the majority that committed entries the candidate lacks: its vote would
// elect a leader that truncates acknowledged writes. The leader keeps such
// a node a voter on Join (membership.go); this closes the window on the
// node's own side, whatever the leader does:
//
//   - New writes DataDir/raft/vote-hold before Raft starts when the log and
//     snapshot stores are empty; it survives restarts until released, so a
//     node that crashes half-way through catching up stays held.
//   - While held, the Raft transport answers RequestVote and RequestPreVote
//     with "not granted" before Raft sees them (no vote is persisted), refuses
//     TimeoutNow (a leadership transfer would bump its term), and sends no
//     vote requests of its own (it cannot be elected with its own vote plus
//     one stale peer's). It still accepts AppendEntries and InstallSnapshot.
//   - Released when the node bootstrapped the cluster itself (its state is
//     the bootstrap entry), when it leads (a single-voter configuration), or
//     once it has applied a read index that a leader confirmed after the node
//     started: every entry committed before then is at or below that index.
//   - One exception, while its log is empty: a candidate that holds only a
//     bootstrap configuration gets the vote (voteGate.bootstrapOnly).
//   - Recover (the operator's choice of data) removes the marker.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/durable"
	"github.com/indexify-go/indexify/internal/retry"
)

const voteHoldFile = "vote-hold"

// errVoteWithheld is what a held node's transport returns instead of asking
// for or granting votes. Its text must not contain raft's "unexpected
// command", which a candidate would count as a granted pre-vote.
var errVoteWithheld = errors.New("cluster: this node started without raft state and withholds its vote until it has caught up")

func voteHoldPath(dataDir string) string { return filepath.Join(dataDir, "raft", voteHoldFile) }

// initVoteHold decides, before Raft starts, whether this node holds its
// vote: the marker exists, or the Raft stores are empty (then it writes it).
func (n *Node) initVoteHold(empty bool) error {
	p := voteHoldPath(n.cfg.DataDir)
	if _, err := os.Stat(p); err == nil {
		n.voteHeld.Store(true)
		return nil
	}
	if !empty {
		return nil
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("cluster: vote hold marker: %w", err)
	}
	_, err = f.WriteString("started without raft state; takes no part in elections until caught up\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: vote hold marker: %w", err)
	}
	durable.SyncDir(filepath.Dir(p))
	n.voteHeld.Store(true)
	return nil
}

// VoteHeld reports whether this node withholds its vote (started without
// Raft state and has not caught up yet).
func (n *Node) VoteHeld() bool { return n.voteHeld.Load() }

// VotesWithheld counts the vote, pre-vote and leadership-transfer requests
// this node refused while held, since this process started.
func (n *Node) VotesWithheld() int64 { return n.votesWithheld.Load() }

// VotesGranted counts the votes and pre-votes this node's Raft granted
// since this process started.
func (n *Node) VotesGranted() (votes, preVotes int64) {
	return n.gate.votesGranted.Load(), n.gate.preVotesGranted.Load()
}

// logEmpty reports whether Raft runs and has no log, snapshot or
// configuration yet (false before Raft is created).
func (n *Node) logEmpty() bool {
	r := n.book.raft.Load()
	return r != nil && r.LastIndex() == 0
}

// releaseVoteHold ends the hold: the marker goes first, so a crash in
// between leaves the node held (safe) rather than voting with a short log.
func (n *Node) releaseVoteHold(why string) {
	if !n.voteHeld.Load() {
		return
	}
	if err := os.Remove(voteHoldPath(n.cfg.DataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.log.Error("vote hold: removing the marker failed; still withholding the vote", "err", err)
		return
	}
	durable.SyncDir(filepath.Join(n.cfg.DataDir, "raft"))
	n.voteHeld.Store(false)
	n.log.Info("vote hold released: this node takes part in elections again", "reason", why,
		"applied_index", n.raft.AppliedIndex(), "votes_withheld", n.votesWithheld.Load())
}

// releaseVoteHoldLoop tries to end the hold every quarter election timeout
// until it ends. It runs apart from the maintain loop, whose housekeeping
// can take seconds: every moment a node stays held after it caught up is a
// moment in which losing the leader leaves no majority to elect a new one.
func (n *Node) releaseVoteHoldLoop(ctx context.Context) {
	for ctx.Err() == nil && n.voteHeld.Load() {
		n.tryReleaseVoteHold(ctx)
		retry.Sleep(ctx, n.cfg.ElectionTimeout/4)
	}
}

// tryReleaseVoteHold is one attempt (node with state): lead, hold every
// entry up to the commit index a leader announced, or apply a read index
// the leader confirmed now.
func (n *Node) tryReleaseVoteHold(ctx context.Context) {
	if !n.voteHeld.Load() || !n.hasState() {
		return
	}
	if n.raft.State() == raft.Leader {
		n.releaseVoteHold("this node leads")
		return
	}
	if c := n.gate.seenCommit.Load(); c > 0 && n.raft.LastIndex() >= c {
		n.releaseVoteHold(fmt.Sprintf("holds the log up to the leader's commit index %d", c))
		return
	}
	if _, lid := n.raft.LeaderWithID(); lid == "" {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, n.rpcTimeout())
	idx, err := n.remoteReadIndex(rctx)
	cancel()
	if err != nil {
		n.log.Debug("vote hold: no read index from the leader yet", "err", err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 5*n.cfg.ElectionTimeout)
	err = n.WaitApplied(wctx, idx)
	cancel()
	if err != nil {
		n.log.Debug("vote hold: not caught up with the read index yet", "read_index", idx, "err", err)
		return
	}
	n.releaseVoteHold(fmt.Sprintf("applied the leader's read index %d", idx))
}

// noteWithheld counts a refused vote request, logged at most once per
// conflict window.
func (n *Node) noteWithheld(kind string, from []byte) {
	n.votesWithheld.Add(1)
	now := time.Now().UnixNano()
	last := n.withheldLogged.Load()
	if now-last < int64(n.conflictWindow()) || !n.withheldLogged.CompareAndSwap(last, now) {
		return
	}
	n.log.Info("withholding vote: this node started without raft state and has not caught up yet",
		"request", kind, "candidate", string(from))
}

// voteGate wraps the Raft transport of a node and enforces the vote hold.
type voteGate struct {
	raft.Transport
	pre     raft.WithPreVote
	held    func() bool
	empty   func() bool // this node's log is empty (no configuration either)
	note    func(kind string, from []byte)
	header  raft.RPCHeader
	in      chan raft.RPC
	done    chan struct{}
	closeMu sync.Once
	// seenCommit is the highest commit index a leader announced to this
	// node (AppendEntries' LeaderCommitIndex, an installed snapshot's
	// index): once the log reaches it, the node holds every entry that was
	// committed when that leader spoke, which is all a vote needs.
	seenCommit atomic.Uint64
	// votesGranted and preVotesGranted count the requests Raft behind the
	// gate answered "granted" (every inbound RPC passes the gate), so what
	// this node voted is observable without reading Raft's stores.
	votesGranted    atomic.Int64
	preVotesGranted atomic.Int64
	// fence orders followers' address changes against their replication
	// (peerfence.go).
	fence *peerFence
}

type preVoteTransport interface {
	raft.Transport
	raft.WithPreVote
	raft.WithClose
}

func newVoteGate(inner preVoteTransport, id, addr string, held, empty func() bool, note func(string, []byte)) *voteGate {
	g := &voteGate{
		Transport: inner,
		pre:       inner,
		held:      held,
		empty:     empty,
		note:      note,
		header:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)},
		in:        make(chan raft.RPC),
		done:      make(chan struct{}),
	}
	g.fence = newPeerFence(g.done)
	go g.forward(inner.Consumer())
	return g
}

var _ preVoteTransport = (*voteGate)(nil)

func (g *voteGate) forward(src <-chan raft.RPC) {
	for {
		select {
		case rpc := <-src:
			g.noteCommit(rpc)
			if g.refuse(rpc) {
				continue
			}
			select {
			case g.in <- g.observeGrant(rpc):
			case <-g.done:
				return
			}
		case <-g.done:
			return
		}
	}
}

// observeGrant hands a vote request to Raft with a response channel of the
// gate's own, to count the grants before passing the answer on.
func (g *voteGate) observeGrant(rpc raft.RPC) raft.RPC {
	var grants *atomic.Int64
	switch rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		grants = &g.votesGranted
	case *raft.RequestPreVoteRequest:
		grants = &g.preVotesGranted
	default:
		return rpc
	}
	orig := rpc.RespChan
	proxy := make(chan raft.RPCResponse, 1)
	rpc.RespChan = proxy
	go func() {
		select {
		case r := <-proxy:
			switch resp := r.Response.(type) {
			case *raft.RequestVoteResponse:
				if resp.Granted {
					grants.Add(1)
				}
			case *raft.RequestPreVoteResponse:
				if resp.Granted {
					grants.Add(1)
				}
			}
			select {
			case orig <- r:
			case <-g.done:
			}
		case <-g.done:
		}
	}()
	return rpc
}

// noteCommit records the commit index a leader's message announces.
func (g *voteGate) noteCommit(rpc raft.RPC) {
	var c uint64
	switch req := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		c = req.LeaderCommitIndex
	case *raft.InstallSnapshotRequest:
		c = req.LastLogIndex
	default:
		return
	}
	for {
		old := g.seenCommit.Load()
		if c <= old || g.seenCommit.CompareAndSwap(old, c) {
			return
		}
	}
}

// refuse answers vote traffic of a held node itself. The answer's term is
// the request's: a candidate neither steps down for it nor counts it.
func (g *voteGate) refuse(rpc raft.RPC) bool {
	if !g.held() {
		return false
	}
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		if g.bootstrapOnly(req.LastLogIndex) {
			return false
		}
		g.note("vote", req.ID)
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: g.header, Term: req.Term}, nil)
	case *raft.RequestPreVoteRequest:
		if g.bootstrapOnly(req.LastLogIndex) {
			return false
		}
		g.note("pre-vote", req.ID)
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: g.header, Term: req.Term}, nil)
	case *raft.TimeoutNowRequest:
		g.note("leadership transfer", req.ID)
		rpc.Respond(nil, errVoteWithheld)
	default:
		return false
	}
	return true
}

// bootstrapOnly: the one vote a held node still gives. While its own log is
// empty, a candidate whose log holds at most index 1 has nothing but a
// bootstrap configuration (a leader's first entry is at index 2 or later),
// so it lacks no committed entry unless a majority of the copies is already
// gone (a data-loss quorum loss, which the bootstrap rules and the cluster id
// handle: DESIGN.md). Without this, a cluster whose nodes bootstrap one
// after the other would never elect its first leader: the later ones see a
// peer with state, join instead of bootstrapping, and would withhold the
// vote the first one needs.
func (g *voteGate) bootstrapOnly(candidateLastIndex uint64) bool {
	return candidateLastIndex <= 1 && g.empty()
}

func (g *voteGate) Consumer() <-chan raft.RPC { return g.in }

func (g *voteGate) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if g.held() {
		return errVoteWithheld
	}
	return g.Transport.RequestVote(id, target, args, resp)
}

func (g *voteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if g.held() {
		return errVoteWithheld
	}
	return g.pre.RequestPreVote(id, target, args, resp)
}

// AppendEntries passes replication calls through the address-change fence
// (heartbeats go straight through).
func (g *voteGate) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if isHeartbeat(args) {
		return g.Transport.AppendEntries(id, target, args, resp)
	}
	if err := g.fence.enter(id); err != nil {
		return err
	}
	err := g.Transport.AppendEntries(id, target, args, resp)
	g.fence.exit(id, err == nil)
	return err
}

// InstallSnapshot passes through the address-change fence too.
func (g *voteGate) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if err := g.fence.enter(id); err != nil {
		return err
	}
	err := g.Transport.InstallSnapshot(id, target, args, resp, data)
	g.fence.exit(id, err == nil)
	return err
}

func (g *voteGate) Close() error {
	g.closeMu.Do(func() { close(g.done) })
	return g.Transport.(raft.WithClose).Close()
}
