// Package push delivers tasks to executors over their heartbeat streams and
// keeps the replicated liveness of the executors connected to this node.
//
// Executors hold a heartbeat stream open to any coordinator, leader or not.
// Because every node applies the same log, the node holding the stream sees
// an assignment as soon as its own replica applies it and pushes the task
// down the stream: no node needs to ask the leader where an executor is.
//
// Each stream has a queue of task ids fed by a state.TaskObserver: for every
// applied batch, the tasks whose assignment moved to or from the stream's
// executor. A stream reads only those tasks from the store (never every task
// of its executor), so the cost of a push is the size of the change, not of
// the executor's backlog.
//
// Liveness is replicated: each node batches the heartbeats it received into
// one ExecutorHeartbeatCmd per flush interval; the leader's scheduler removes
// executors whose last_seen is too old. A stream that ends without the node
// shutting down asks for removal after a grace period, so a killed executor's
// tasks move quickly while a reconnecting one keeps them.
package push

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/requestid"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Replicator is what pushing needs from the Raft layer; *cluster.Node
// implements it.
type Replicator interface {
	// Apply commits a command (forwarding to the leader if needed) and
	// returns the FSM's result.
	Apply(ctx context.Context, cmd *pb.Command) (*pb.CommandResult, error)
	// ReadBarrier returns once a read at the given level may be served from
	// the local store.
	ReadBarrier(ctx context.Context, level pb.ReadConsistency) error
}

// Config tunes the hub.
type Config struct {
	// HeartbeatFlush is how often heartbeats of the streams open here are
	// written to the log as one command (default 2 s).
	HeartbeatFlush time.Duration
	// DisconnectGrace is how long an executor whose stream ended may take to
	// reconnect before this node asks for its removal (default 5 s).
	DisconnectGrace time.Duration
}

// Stream is the server side of CoordinatorService.Heartbeat after its first
// (registration) message.
type Stream interface {
	Context() context.Context
	Send(*pb.HeartbeatResponse) error
	Recv() (*pb.HeartbeatRequest, error)
}

// Hub holds this node's executor streams.
type Hub struct {
	store *state.Store
	raft  Replicator
	cfg   Config
	log   *slog.Logger

	mu      sync.Mutex
	conns   map[string]map[*conn]struct{} // executor id -> its open streams
	closing atomic.Bool
	flushOK atomic.Int64 // unix ms of the last committed heartbeat flush

	// Test hooks, if set: detached is called when a stream ends, with
	// whether a grace period started; afterGrace when one ends, with
	// whether the executor's removal was asked for.
	detached   func(id string, grace bool)
	afterGrace func(id string, removed bool)
}

type conn struct {
	id       string
	lastRecv atomic.Int64  // unix ms
	kick     chan struct{} // closed to end the stream (node cut off, executor removed)
	kickOnce sync.Once
	kicked   atomic.Bool
	why      string // the stream's end, set before kick is closed
	// registered: this replica has applied the executor's registration
	// since the stream opened, so its absence from the store now means it
	// was removed since (endRemoved).
	registered atomic.Bool

	qmu    sync.Mutex
	dirty  map[string]struct{} // tasks whose assignment to or from id changed
	resync bool                // re-read every task of id (new stream, restore)
	wake   chan struct{}       // capacity 1: something is queued
}

// New returns a hub pushing from store; it observes the store's task writes
// from now on.
func New(store *state.Store, raft Replicator, cfg Config, logger *slog.Logger) *Hub {
	if cfg.HeartbeatFlush == 0 {
		cfg.HeartbeatFlush = 2 * time.Second
	}
	if cfg.DisconnectGrace == 0 {
		cfg.DisconnectGrace = 5 * time.Second
	}
	if logger == nil {
		logger = slog.Default()
	}
	h := &Hub{store: store, raft: raft, cfg: cfg, log: logger, conns: map[string]map[*conn]struct{}{}}
	h.flushOK.Store(nowMillis())
	store.ObserveTasks(h.observe)
	return h
}

func nowMillis() int64 { return time.Now().UnixMilli() }

// Stop marks the node as shutting down: streams that end from now on do not
// ask for their executor's removal (it will reconnect to another node).
func (h *Hub) Stop() { h.closing.Store(true) }

// Connected is the number of executors with a stream open to this node.
func (h *Hub) Connected() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// observe is the store's task observer: it queues each changed task on the
// streams of the executor it left and of the one it went to. It runs under
// the store's write lock, so it only touches the queues.
func (h *Hub) observe(changes []state.TaskChange, reset bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.conns) == 0 {
		return
	}
	if reset {
		for _, set := range h.conns {
			for c := range set {
				c.queue(nil, true)
			}
		}
		return
	}
	// Each stream gets the batch's ids at once, so one response carries
	// every task of a batch, in push order.
	batch := map[*conn][]string{}
	for _, ch := range changes {
		var from, to, id string
		if ch.Prev != nil {
			from, id = ch.Prev.GetExecutorId(), ch.Prev.GetId()
		}
		if ch.Cur != nil {
			to, id = ch.Cur.GetExecutorId(), ch.Cur.GetId()
		}
		if from != "" {
			for c := range h.conns[from] {
				batch[c] = append(batch[c], id)
			}
		}
		if to != "" && to != from {
			for c := range h.conns[to] {
				batch[c] = append(batch[c], id)
			}
		}
	}
	for c, ids := range batch {
		c.queue(ids, false)
	}
}

func (c *conn) queue(taskIDs []string, resync bool) {
	c.qmu.Lock()
	c.resync = c.resync || resync
	for _, id := range taskIDs {
		c.dirty[id] = struct{}{}
	}
	c.qmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take empties the queue.
func (c *conn) take() (dirty map[string]struct{}, resync bool) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	dirty, resync = c.dirty, c.resync
	c.dirty, c.resync = map[string]struct{}{}, false
	return dirty, resync
}

// attach registers a stream; its first pass re-reads all of id's tasks.
func (h *Hub) attach(id string) *conn {
	c := &conn{id: id, kick: make(chan struct{}), dirty: map[string]struct{}{}, resync: true, wake: make(chan struct{}, 1)}
	c.wake <- struct{}{}
	c.lastRecv.Store(nowMillis())
	h.mu.Lock()
	if h.conns[id] == nil {
		h.conns[id] = map[*conn]struct{}{}
	}
	h.conns[id][c] = struct{}{}
	h.mu.Unlock()
	return c
}

// detach forgets a stream and, unless the node is stopping, schedules the
// executor's removal if it has not come back within the grace period.
func (h *Hub) detach(c *conn) {
	h.mu.Lock()
	delete(h.conns[c.id], c)
	if len(h.conns[c.id]) == 0 {
		delete(h.conns, c.id)
	}
	h.mu.Unlock()
	grace := !h.closing.Load() && !c.kicked.Load()
	if h.detached != nil {
		h.detached(c.id, grace)
	}
	if !grace {
		// Shutting down, or cut off from the leader: the executor is alive
		// and reconnects to another node; removing it would hand its tasks
		// to others while it still runs them.
		return
	}
	gone := nowMillis()
	time.AfterFunc(h.cfg.DisconnectGrace, func() {
		removed := h.removeIfGone(c.id, gone)
		if h.afterGrace != nil {
			h.afterGrace(c.id, removed)
		}
	})
}

// removeIfGone asks for the removal of an executor whose stream ended at
// gone (unix ms) unless it came back, here or through another node.
func (h *Hub) removeIfGone(id string, gone int64) bool {
	if h.closing.Load() {
		return false
	}
	h.mu.Lock()
	_, back := h.conns[id]
	h.mu.Unlock()
	if back {
		return false
	}
	if e, ok := h.store.Executor(id); !ok || e.GetLastSeen() > gone {
		return false // removed already, or heartbeating through another node
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := h.apply(ctx, &pb.Command{Op: &pb.Command_RemoveExecutor{
		RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: id, Reason: "heartbeat stream closed"}}})
	if err != nil {
		h.log.Warn("could not remove disconnected executor; the leader's timeout will", "executor", id, "err", err)
		return false
	}
	return true
}

func (h *Hub) apply(ctx context.Context, cmd *pb.Command) error {
	cmd.RequestId = requestid.New()
	res, err := h.raft.Apply(ctx, cmd)
	if err != nil {
		return err
	}
	return state.ResultError(res)
}

// Run flushes heartbeats of live streams every HeartbeatFlush until ctx ends.
func (h *Hub) Run(ctx context.Context) {
	t := time.NewTicker(h.cfg.HeartbeatFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.flush(ctx)
	}
}

// end closes c's stream with why (once); the executor reconnects.
func (c *conn) end(why string) {
	c.kickOnce.Do(func() { c.why = why; c.kicked.Store(true); close(c.kick) })
}

// flush writes one heartbeat command for the streams that delivered a
// message recently (the executor sends one every few seconds).
func (h *Hub) flush(ctx context.Context) {
	h.endRemoved()
	staleBefore := nowMillis() - (5 * h.cfg.HeartbeatFlush).Milliseconds()
	var ids []string
	h.mu.Lock()
	for id, set := range h.conns {
		for c := range set {
			if c.lastRecv.Load() >= staleBefore {
				ids = append(ids, id)
				break
			}
		}
	}
	h.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	actx, cancel := context.WithTimeout(ctx, h.cfg.HeartbeatFlush)
	err := h.apply(actx, &pb.Command{Op: &pb.Command_ExecutorHeartbeat{
		ExecutorHeartbeat: &pb.ExecutorHeartbeatCmd{ExecutorIds: ids}}})
	cancel()
	switch {
	case err == nil:
		h.flushOK.Store(nowMillis())
	case ctx.Err() == nil:
		h.log.Debug("heartbeat flush failed", "executors", len(ids), "err", err)
		h.kickIfCutOff()
	}
}

// endRemoved ends the streams of executors the state no longer has. The
// leader removes an executor whose heartbeats stopped reaching the log (its
// stream hung, or it was away longer than the timeout) even if it connects
// again at that moment: its registration can commit just before the
// removal. Heartbeats of an unknown executor change nothing, so it would
// stay connected and unknown, never given a task (test/k8s, every pod
// deleted: the executor reconnected within a millisecond of its removal
// and got nothing for 90 s). Ending the stream makes it reconnect, and
// every stream starts with a registration.
func (h *Hub) endRemoved() {
	h.mu.Lock()
	conns := map[*conn]string{}
	for id, set := range h.conns {
		for c := range set {
			conns[c] = id
		}
	}
	h.mu.Unlock()
	// The store is read without h.mu: its observers take h.mu under the
	// store's lock.
	var gone []string
	for c, id := range conns {
		_, known := h.store.Executor(id)
		switch {
		case known:
			c.registered.Store(true)
		case c.registered.Load():
			c.end("this executor was removed (no heartbeat reached the leader in time); register again")
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		h.log.Warn("ended the streams of executors the cluster removed, so they register again", "executors", gone)
	}
}

// kickIfCutOff ends every executor stream when this node has not committed a
// heartbeat flush for two flush intervals. A node cut off from the leader
// (minority partition) cannot report its executors' heartbeats, so the leader
// would soon remove live executors and hand their tasks to others while they
// still hold them; ended streams make the executors reconnect to another
// coordinator first. (Found by test/chaos: an 18 s partition.)
func (h *Hub) kickIfCutOff() {
	if nowMillis()-h.flushOK.Load() < (2 * h.cfg.HeartbeatFlush).Milliseconds() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.conns {
		for c := range set {
			c.end("this coordinator cannot reach the leader; reconnect to another one")
		}
	}
	if len(h.conns) > 0 {
		h.log.Warn("heartbeats not committed for a while; asking executors to reconnect elsewhere", "executors", len(h.conns))
	}
}

// Serve pushes executor id's tasks down stream until the stream or ctx
// ends; the caller has registered the executor (the stream's first message).
func (h *Hub) Serve(stream Stream, id string) error {
	ctx := stream.Context()
	// The registration committed before Serve was called; a barrier makes
	// sure this replica applied it too, so that the executor missing from
	// the store later means it was removed since, not that the registration
	// has not arrived here yet (endRemoved). Without a leader the stream
	// starts anyway, and the first flush that sees the executor marks it.
	bctx, cancel := context.WithTimeout(ctx, h.cfg.HeartbeatFlush)
	applied := h.raft.ReadBarrier(bctx, pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE) == nil
	cancel()
	c := h.attach(id)
	c.registered.Store(applied)
	defer h.detach(c)

	recvErr := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				recvErr <- err
				return
			}
			c.lastRecv.Store(nowMillis())
		}
	}()

	p := &pusher{h: h, id: id, sent: map[string]uint64{}, held: map[string]struct{}{}}
	var retry <-chan time.Time // set while new assignments wait for a barrier
	for {
		select {
		case <-c.wake:
		case <-retry:
		case <-c.kick:
			return status.Error(codes.Unavailable, c.why)
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
		resp, ok := p.next(ctx, c)
		retry = nil
		if !ok {
			retry = time.After(h.cfg.HeartbeatFlush / 4)
		}
		if len(resp.Tasks) > 0 || len(resp.CancelledTaskIds) > 0 {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// pusher is one stream's view of what it has pushed.
type pusher struct {
	h  *Hub
	id string
	// sent remembers the assignment (by its log index) each task was pushed
	// under, so a task reassigned back to this executor is pushed again.
	sent map[string]uint64
	// held are tasks not pushed yet because the read barrier failed.
	held map[string]struct{}
}

// next turns the queued changes into one response: new assignments oldest
// first, then cancellations of tasks that left this executor unfinished. ok
// is false when new assignments are held back (barrier failed).
func (p *pusher) next(ctx context.Context, c *conn) (resp *pb.HeartbeatResponse, ok bool) {
	h := p.h
	dirty, resync := c.take()
	if resync {
		for _, t := range h.store.TasksAssignedTo(p.id) {
			dirty[t.GetId()] = struct{}{}
		}
		for tid := range p.sent {
			dirty[tid] = struct{}{}
		}
	}
	for tid := range p.held {
		dirty[tid] = struct{}{}
	}
	// A replica catching up (after a partition or a restart) passes through
	// superseded states: an assignment it applies may already have moved to
	// another executor. New assignments are pushed only after a
	// linearizable barrier, i.e. from a state at least as new as the
	// leader's commit index now; until then only cancellations go.
	pushNew := true
	if p.anyNew(dirty) {
		bctx, cancel := context.WithTimeout(ctx, h.cfg.HeartbeatFlush)
		if err := h.raft.ReadBarrier(bctx, pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE); err != nil {
			pushNew = false
		}
		cancel()
	}
	resp = &pb.HeartbeatResponse{}
	p.held = map[string]struct{}{}
	for tid := range dirty {
		t, found := h.store.Task(tid)
		if found && p.mine(t) {
			if p.sent[tid] == t.GetAssignedIndex() {
				continue
			}
			if !pushNew {
				p.held[tid] = struct{}{}
				continue
			}
			p.sent[tid] = t.GetAssignedIndex()
			resp.Tasks = append(resp.Tasks, t)
			continue
		}
		if _, was := p.sent[tid]; !was {
			continue
		}
		delete(p.sent, tid)
		if found && t.GetOutcome() == pb.TaskOutcome_TASK_OUTCOME_UNKNOWN {
			resp.CancelledTaskIds = append(resp.CancelledTaskIds, tid)
		}
	}
	slices.SortFunc(resp.Tasks, state.TaskOrder)
	slices.Sort(resp.CancelledTaskIds)
	return resp, pushNew
}

// mine reports whether t is an unfinished task assigned to this executor.
func (p *pusher) mine(t *pb.Task) bool {
	return t.GetExecutorId() == p.id && t.GetOutcome() == pb.TaskOutcome_TASK_OUTCOME_UNKNOWN
}

// anyNew reports whether a queued task is assigned here under an assignment
// not pushed yet.
func (p *pusher) anyNew(dirty map[string]struct{}) bool {
	for tid := range dirty {
		if t, ok := p.h.store.Task(tid); ok && p.mine(t) && p.sent[tid] != t.GetAssignedIndex() {
			return true
		}
	}
	return false
}
