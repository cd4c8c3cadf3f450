package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/grpcconn"
	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// ErrOutcomeUnknown: the leader lost leadership (or became unreachable) after
// a write was sent, so it may or may not have been applied. Apply retries such
// writes itself only when that is safe (a request id, or an idempotent
// command); otherwise the caller gets this error.
var ErrOutcomeUnknown = errors.New("cluster: write outcome unknown (leadership lost while applying)")

// Metadata keys on ClusterService calls between nodes.
const (
	// forwardedKey marks a request already forwarded once: a node that
	// receives it and is not the leader answers instead of forwarding again,
	// so two nodes with stale leader views cannot bounce a request forever.
	forwardedKey = "x-indexify-forwarded"
	// readIndexKey on Status asks the leader for a verified read index
	// (leadership confirmed by a heartbeat round) in commit_index.
	readIndexKey = "x-indexify-read-index"
)

// forwardNoteKey carries a *ForwardNote (WithForwardNote) into Apply.
type forwardNoteKey struct{}

// ForwardNote records the leader a call's writes were forwarded to, so the
// coordinator can name it in its answer (errcode.LeaderTrailer) and the
// client can send that method's next calls there without the extra hop.
type ForwardNote struct {
	mu   sync.Mutex
	addr string
}

// WithForwardNote returns ctx carrying a fresh note for Apply to fill.
func WithForwardNote(ctx context.Context) (context.Context, *ForwardNote) {
	f := &ForwardNote{}
	return context.WithValue(ctx, forwardNoteKey{}, f), f
}

// Leader is the gRPC address of the leader that applied the call's last
// forwarded write, or "" when nothing was forwarded.
func (f *ForwardNote) Leader() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addr
}

func noteForward(ctx context.Context, addr string) {
	if f, ok := ctx.Value(forwardNoteKey{}).(*ForwardNote); ok {
		f.mu.Lock()
		f.addr = addr
		f.mu.Unlock()
	}
}

func forwardedCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
}

func hasMeta(ctx context.Context, key string) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(key)) > 0
}

// peerClients caches one gRPC connection per peer address. Connections are
// lazy; a DNS name is re-resolved by gRPC when its connection breaks.
type peerClients struct {
	mu     sync.Mutex
	opts   []grpc.DialOption
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newPeerClients(opts []grpc.DialOption) *peerClients {
	// Insecure unless opts bring transport credentials (the last one wins).
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpcconn.Connect()}, opts...)
	return &peerClients{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// client returns a client for the peer at addr, its connection cached.
// ctx bounds the wait for a peer in reconnect backoff (grpcconn.Wake): pass
// the call's own context, so that a call to a leader that died is not held
// past the moment this node learns of it (forwardApply).
func (p *peerClients) client(ctx context.Context, addr string) (pb.ClusterServiceClient, error) {
	cc, err := p.conn(addr)
	if err != nil {
		return nil, err
	}
	// The peer may be back before gRPC's reconnect backoff ends (it
	// restarted, or it is the new leader that was down a moment ago).
	grpcconn.Wake(ctx, cc)
	return pb.NewClusterServiceClient(cc), nil
}

func (p *peerClients) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrShuttingDown
	}
	cc, ok := p.conns[addr]
	if !ok {
		var err error
		if cc, err = grpc.NewClient(addr, p.opts...); err != nil {
			return nil, fmt.Errorf("cluster: dial %s: %w", addr, err)
		}
		p.conns[addr] = cc
	}
	return cc, nil
}

func (p *peerClients) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cc := range p.conns {
		cc.Close()
	}
	p.conns = nil
}

// leaderAddr returns the gRPC address and id of the current leader (never
// this node).
func (n *Node) leaderAddr() (addr, id string, err error) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", "", ErrNoLeader
	}
	if string(lid) == n.cfg.NodeID {
		return "", "", fmt.Errorf("%w: leadership is changing", ErrNoLeader)
	}
	if addr = n.grpcAddrOf(string(lid)); addr == "" {
		return "", "", fmt.Errorf("%w: gRPC address of leader %s not known yet", ErrNoLeader, lid)
	}
	return addr, string(lid), nil
}

// leaderClient returns a client for the current leader (never this node).
func (n *Node) leaderClient(ctx context.Context) (pb.ClusterServiceClient, string, error) {
	addr, lid, err := n.leaderAddr()
	if err != nil {
		return nil, "", err
	}
	cl, err := n.peers.client(ctx, addr)
	return cl, lid, err
}

// idempotent commands may be re-applied safely, so Apply retries them even
// when an earlier attempt's outcome is unknown.
func idempotent(cmd *pb.Command) bool {
	switch cmd.GetOp().(type) {
	case *pb.Command_UpsertNode, *pb.Command_RemoveNode:
		return true
	}
	return false
}

// errHandingOver: this node is stopping and hands leadership over; a write
// that reached it waits for the successor, then goes there (handoff.go).
var errHandingOver = fmt.Errorf("%w: handing leadership over", ErrNotLeader)

// Apply commits cmd through Raft and returns the FSM's result. It sets
// cmd.Timestamp (unix ms) when zero and cmd.Rules to state.CurrentRules
// (the validation the FSM applies) when zero, lowered to what every member
// applies; a command form some member does not know yet is refused with
// ERROR_CODE_UNAVAILABLE, unproposed (level.go). On a follower it forwards to the leader
// over ClusterService.Apply. It retries while there is no leader, leadership
// moves, or the leader is unreachable, until ctx ends; a retry after an
// unknown outcome happens only for commands with a request id (the FSM
// returns the first result for a repeated id) or idempotent commands.
// Apply returns once the leader applied the command; this node's own Store
// may trail (use WaitApplied(result.Index) or a LINEARIZABLE ReadBarrier for
// read-your-writes on a follower).
func (n *Node) Apply(ctx context.Context, cmd *pb.Command) (*pb.CommandResult, error) {
	if cmd == nil || cmd.Op == nil {
		return nil, state.Errorf(pb.ErrorCode_ERROR_CODE_INVALID, "cluster: command has no operation")
	}
	if cmd.Timestamp == 0 {
		cmd.Timestamp = time.Now().UnixMilli()
	}
	state.StampRules(cmd)
	if refused := n.admit(cmd); refused != nil {
		return refused, nil
	}
	retrySafe := cmd.RequestId != "" || idempotent(cmd)
	var data []byte
	bo := newBackoff(n.cfg.ElectionTimeout/20, n.cfg.ElectionTimeout/2)
	var lw leaderlessWait
	leaders := n.leaderEvents()
	via := "" // a leader address hinted by the last refusal
	handingOff := false
	for {
		if n.shuttingDown.Load() {
			// Stopping: forward to the successor instead of refusing
			// (handoff.go), until Raft stops.
			if !handingOff {
				if !n.handOff.enter() {
					return nil, n.refusal(ErrShuttingDown)
				}
				handingOff = true
				defer n.handOff.done()
			}
			select {
			case <-n.closed:
				return nil, n.refusal(ErrShuttingDown)
			default:
			}
		}
		changed := leaders.next()
		var res *pb.CommandResult
		var err error
		var retry bool
		switch {
		case n.raft.State() == raft.Leader && !n.shuttingDown.Load():
			if data == nil {
				if data, err = state.EncodeCommand(cmd); err != nil {
					return nil, err
				}
			}
			res, err, retry = n.applyLocal(ctx, data, retrySafe)
		case n.raft.State() == raft.Leader:
			// Handing leadership over: wait for the successor (the
			// leader change ends the wait below), unless Shutdown stopped
			// waiting for this call.
			if !n.handOff.open() {
				return nil, n.refusal(ErrShuttingDown)
			}
			err, retry = errHandingOver, true
		default:
			res, err, retry = n.forwardApply(ctx, cmd, retrySafe, via)
		}
		if err == nil {
			return res, nil
		}
		if !retry || lw.giveUp(err, n.leaderlessLimit()) {
			return nil, err
		}
		// The node that refused named another leader: go there at once
		// (once per hint, so two stale views cannot loop without pause).
		if _, addr, ok := errcode.LeaderHint(err); ok && addr != "" && addr != via {
			via = addr
			continue
		}
		via = ""
		if !n.waitRetry(ctx, bo, changed) {
			return nil, fmt.Errorf("cluster: apply: %w (last error: %w)", ctx.Err(), err)
		}
	}
}

// waitRetry waits out one backoff step of a retry loop, or less: a leader
// change since the failed attempt began (changed closed) ends the wait, so
// a call that failed for want of a leader is re-sent as soon as this node
// learns the new one. False when ctx ended.
func (n *Node) waitRetry(ctx context.Context, bo *backoff, changed <-chan struct{}) bool {
	return retry.SleepOrWake(ctx, bo.next(), changed)
}

// applyLocal proposes an encoded command on this (leader) node. retry reports
// whether trying again (at whichever node is leader then) is safe.
func (n *Node) applyLocal(ctx context.Context, data []byte, retrySafe bool) (res *pb.CommandResult, err error, retry bool) {
	f := n.raft.Apply(data, n.cfg.ElectionTimeout)
	if err := waitFuture(ctx, f); err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("cluster: apply: %w", err), false
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress),
			errors.Is(err, raft.ErrEnqueueTimeout):
			// Never appended to the log: always safe to retry.
			return nil, fmt.Errorf("%w: %v", ErrNotLeader, err), true
		case errors.Is(err, raft.ErrLeadershipLost):
			return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err), retrySafe
		case errors.Is(err, raft.ErrRaftShutdown):
			return nil, ErrShuttingDown, false
		default:
			return nil, fmt.Errorf("cluster: apply: %w", err), false
		}
	}
	switch r := f.Response().(type) {
	case *pb.CommandResult:
		return r, nil, false
	case error:
		return nil, r, false
	default:
		return nil, fmt.Errorf("cluster: FSM returned %T, want *CommandResult", r), false
	}
}

// forwardApply sends cmd to the leader once: to via when a refusal named
// that address, else to the leader this node knows.
func (n *Node) forwardApply(ctx context.Context, cmd *pb.Command, retrySafe bool, via string) (*pb.CommandResult, error, bool) {
	addr, lid := via, via
	if via == "" {
		var err error
		if addr, lid, err = n.leaderAddr(); err != nil {
			return nil, err, true
		}
	}
	actx, cancel := context.WithTimeout(forwardedCtx(ctx), n.rpcTimeout())
	defer cancel()
	if via == "" {
		// A hinted leader this node does not know yet is not watched: the
		// hint came from a node that saw it, and the RPC deadline bounds it.
		// The watch covers the wait for a connection too: a leader that
		// died leaves its connection in reconnect backoff, and grpcconn.Wake
		// would hold the call there until its bound.
		defer n.cancelOnLeaderChange(lid, cancel)()
	}
	cl, err := n.peers.client(actx, addr)
	if err != nil {
		return nil, err, !errors.Is(err, ErrShuttingDown)
	}
	resp, err := cl.Apply(actx, &pb.ApplyRequest{Command: cmd})
	if err == nil {
		if resp.GetResult() == nil {
			return nil, fmt.Errorf("cluster: leader %s returned no result", lid), false
		}
		noteForward(ctx, addr)
		return resp.Result, nil, false
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("cluster: apply via leader %s: %w", lid, ctx.Err()), false
	}
	if id, addr, ok := errcode.LeaderHint(err); ok {
		// The leader refused before proposing (not leader / shutting down);
		// its hint, if any, travels on for Apply to follow.
		return nil, &hintedError{err: fmt.Errorf("%w: %s", ErrNotLeader, status.Convert(err).Message()), id: id, addr: addr}, true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Canceled:
		// Unreachable leader or lost leadership mid-write: outcome unknown.
		return nil, fmt.Errorf("%w: leader %s: %v", ErrOutcomeUnknown, lid, err), retrySafe
	case codes.InvalidArgument:
		return nil, state.Errorf(pb.ErrorCode_ERROR_CODE_INVALID, "%s", status.Convert(err).Message()), false
	default:
		return nil, fmt.Errorf("cluster: apply via leader %s: %w", lid, err), false
	}
}

// ReadBarrier makes a local Store read meet the requested consistency:
//   - STALE: always allowed.
//   - DEFAULT: allowed on the leader, or on a follower that heard from a leader
//     within 2*ElectionTimeout; else ErrStaleRead.
//   - LINEARIZABLE: ReadIndex. The leader (after its term's barrier) takes its
//     commit index, confirms leadership with a heartbeat round (VerifyLeader),
//     and this node waits until its FSM applied that index. A follower asks
//     the leader for that index (Status with a read-index marker), so the
//     read is still served locally and needs no log write.
func (n *Node) ReadBarrier(ctx context.Context, level pb.ReadConsistency) error {
	switch level {
	case pb.ReadConsistency_READ_CONSISTENCY_STALE:
		return nil
	case pb.ReadConsistency_READ_CONSISTENCY_DEFAULT:
		if n.raft.State() == raft.Leader {
			return nil
		}
		if _, lid := n.raft.LeaderWithID(); lid == "" {
			return fmt.Errorf("%w: %w", ErrStaleRead, ErrNoLeader)
		}
		if time.Since(n.raft.LastContact()) > 2*n.cfg.ElectionTimeout {
			return ErrStaleRead
		}
		return nil
	case pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE:
		return n.linearizable(ctx)
	default:
		return state.Errorf(pb.ErrorCode_ERROR_CODE_INVALID, "unknown read consistency %d", level)
	}
}

func (n *Node) linearizable(ctx context.Context) error {
	bo := newBackoff(n.cfg.ElectionTimeout/20, n.cfg.ElectionTimeout/2)
	var lw leaderlessWait
	leaders := n.leaderEvents()
	for {
		if n.shuttingDown.Load() {
			return n.refusal(ErrShuttingDown)
		}
		changed := leaders.next()
		var idx uint64
		var err error
		if n.raft.State() == raft.Leader {
			idx, err = n.leaderReadIndex(ctx)
		} else {
			idx, err = n.remoteReadIndex(ctx)
		}
		if err == nil {
			// A connected replica reaches the read index within a heartbeat
			// or two. One that got the index and was then cut off from the
			// leader never will: give up like a leaderless call, so the
			// client retries on another coordinator instead of waiting out
			// its deadline (chaos regression, 2|1 partition).
			wctx, cancel := context.WithTimeout(ctx, n.leaderlessLimit())
			err = n.WaitApplied(wctx, idx)
			cancel()
			if err == nil || ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("%w: replica did not catch up to read index %d: %v", ErrNoLeader, idx, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("cluster: linearizable read: %w (last error: %w)", ctx.Err(), err)
		}
		if lw.giveUp(err, n.leaderlessLimit()) {
			return err
		}
		if !n.waitRetry(ctx, bo, changed) {
			return fmt.Errorf("cluster: linearizable read: %w (last error: %w)", ctx.Err(), err)
		}
	}
}

// leaderReadIndex returns a commit index that covers every write
// acknowledged before the call, after confirming this node is still leader.
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	term := n.raft.CurrentTerm()
	// Until the barrier of this term committed, the commit index may not yet
	// cover entries committed by earlier leaders.
	if n.leaderReadyTerm.Load() != term {
		return 0, fmt.Errorf("%w: leader of term %d not ready", ErrNoLeader, term)
	}
	idx := n.raft.CommitIndex()
	if err := waitFuture(ctx, n.raft.VerifyLeader()); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNotLeader, err)
	}
	if n.raft.CurrentTerm() != term {
		return 0, fmt.Errorf("%w: term changed", ErrNotLeader)
	}
	return idx, nil
}

func (n *Node) remoteReadIndex(ctx context.Context) (uint64, error) {
	addr, lid, err := n.leaderAddr()
	if err != nil {
		return 0, err
	}
	actx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(forwardedCtx(ctx), readIndexKey, "1"), n.rpcTimeout())
	defer cancel()
	defer n.cancelOnLeaderChange(lid, cancel)()
	cl, err := n.peers.client(actx, addr)
	if err != nil {
		return 0, err
	}
	resp, err := cl.Status(actx, &pb.StatusRequest{})
	if err != nil {
		return 0, fmt.Errorf("cluster: read index from leader %s: %w", lid, err)
	}
	return resp.CommitIndex, nil
}

// WaitApplied blocks until this node's Store reflects every log entry up to
// index (or ctx ends).
//
// Raft's AppliedIndex only says an entry was handed to the FSM goroutine, and
// the Store's AppliedIndex only moves for commands (not for no-op, barrier or
// configuration entries), so we look up the last command at or before index
// in the log and wait for the Store to reach it.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	store := n.fsm.Store()
	wait := 2 * time.Millisecond
	for {
		watch := store.Watch()
		if n.raft.AppliedIndex() >= index && store.AppliedIndex() >= n.lastCommandAtOrBefore(index) {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-watch:
		case <-t.C:
			wait = min(2*wait, 50*time.Millisecond)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("cluster: wait for index %d: %w", index, ctx.Err())
		case <-n.closed:
			t.Stop()
			return ErrShuttingDown
		}
		t.Stop()
	}
}

// lastCommandAtOrBefore returns the index of the last command entry <= index
// still in the log, or 0 when there is none there (entries compacted away are
// covered by a snapshot of this node's FSM, hence already applied).
func (n *Node) lastCommandAtOrBefore(index uint64) uint64 {
	first, err := n.logs.FirstIndex()
	if err != nil || first == 0 {
		return 0
	}
	var l raft.Log
	for i := index; i >= first && i > 0; i-- {
		if err := n.logs.GetLog(i, &l); err != nil {
			return 0
		}
		if l.Type == raft.LogCommand {
			return i
		}
	}
	return 0
}
