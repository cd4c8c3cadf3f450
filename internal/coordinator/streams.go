package coordinator

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Executors hold a heartbeat stream open to any coordinator, leader or not.
// Because every node applies the same log, the node holding the stream sees
// an assignment as soon as its own replica applies it and pushes the task
// down the stream: no node needs to ask the leader where an executor is.
//
// Liveness is replicated: each node batches the heartbeats it received into
// one ExecutorHeartbeatCmd per flush interval; the leader's scheduler removes
// executors whose last_seen is too old. A stream that ends without the node
// shutting down asks for removal after a grace period, so a killed executor's
// tasks move quickly while a reconnecting one keeps them.

type execConn struct {
	id       string
	lastRecv atomic.Int64  // unix ms
	kick     chan struct{} // closed to end the stream (node cut off)
	kickOnce sync.Once
	kicked   atomic.Bool
}

type streams struct {
	svc     *Service
	mu      sync.Mutex
	conns   map[string]*execConn
	closing atomic.Bool
	flushOK atomic.Int64 // unix ms of the last committed heartbeat flush
}

func newStreams(s *Service) *streams {
	st := &streams{svc: s, conns: make(map[string]*execConn)}
	st.flushOK.Store(nowMillis())
	return st
}

// Stop marks the node as shutting down: streams that end from now on do not
// ask for their executor's removal (it will reconnect to another node).
func (s *Service) Stop() { s.stream.closing.Store(true) }

func (st *streams) attach(id string) *execConn {
	c := &execConn{id: id, kick: make(chan struct{})}
	c.lastRecv.Store(nowMillis())
	st.mu.Lock()
	st.conns[id] = c
	st.mu.Unlock()
	return c
}

// detach forgets a stream and, unless the node is stopping, schedules the
// executor's removal if it has not come back within the grace period.
func (st *streams) detach(c *execConn) {
	st.mu.Lock()
	if st.conns[c.id] == c {
		delete(st.conns, c.id)
	}
	st.mu.Unlock()
	if st.closing.Load() || c.kicked.Load() {
		// Shutting down, or cut off from the leader: the executor is alive
		// and reconnects to another node; removing it would hand its tasks
		// to others while it still runs them.
		return
	}
	gone := nowMillis()
	time.AfterFunc(st.svc.cfg.DisconnectGrace, func() {
		if st.closing.Load() {
			return
		}
		st.mu.Lock()
		_, back := st.conns[c.id]
		st.mu.Unlock()
		if back {
			return
		}
		if e, ok := st.svc.store.Executor(c.id); !ok || e.GetLastSeen() > gone {
			return // removed already, or heartbeating through another node
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := st.svc.apply(ctx, "", &pb.Command{Op: &pb.Command_RemoveExecutor{
			RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: c.id, Reason: "heartbeat stream closed"}}})
		if err != nil {
			st.svc.log.Warn("could not remove disconnected executor; the leader's timeout will", "executor", c.id, "err", err)
		}
	})
}

// run flushes heartbeats of live streams every HeartbeatFlush until ctx ends.
func (st *streams) run(ctx context.Context) {
	t := time.NewTicker(st.svc.cfg.HeartbeatFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A stream counts as alive if it delivered a message recently; the
		// executor sends one every few seconds.
		staleBefore := nowMillis() - (5 * st.svc.cfg.HeartbeatFlush).Milliseconds()
		var ids []string
		st.mu.Lock()
		for id, c := range st.conns {
			if c.lastRecv.Load() >= staleBefore {
				ids = append(ids, id)
			}
		}
		st.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, st.svc.cfg.HeartbeatFlush)
		_, err := st.svc.apply(actx, "", &pb.Command{Op: &pb.Command_ExecutorHeartbeat{
			ExecutorHeartbeat: &pb.ExecutorHeartbeatCmd{ExecutorIds: ids}}})
		cancel()
		switch {
		case err == nil:
			st.flushOK.Store(nowMillis())
		case ctx.Err() == nil:
			st.svc.log.Debug("heartbeat flush failed", "executors", len(ids), "err", err)
			st.kickIfCutOff()
		}
	}
}

// kickIfCutOff ends every executor stream when this node has not committed a
// heartbeat flush for two flush intervals. A node cut off from the leader
// (minority partition) cannot report its executors' heartbeats, so the leader
// would soon remove live executors and hand their tasks to others while they
// still hold them; ended streams make the executors reconnect to another
// coordinator first. (Found by test/chaos: an 18 s partition.)
func (st *streams) kickIfCutOff() {
	if nowMillis()-st.flushOK.Load() < (2 * st.svc.cfg.HeartbeatFlush).Milliseconds() {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range st.conns {
		c.kickOnce.Do(func() { c.kicked.Store(true); close(c.kick) })
	}
	if len(st.conns) > 0 {
		st.svc.log.Warn("heartbeats not committed for a while; asking executors to reconnect elsewhere", "executors", len(st.conns))
	}
}

// Heartbeat is the executor's bidirectional stream: the first message
// registers the executor; the node then pushes every task assigned to it.
func (s *Service) Heartbeat(stream pb.CoordinatorService_HeartbeatServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	ex := first.GetExecutor()
	if err := validateExecutor(ex); err != nil {
		return err
	}
	if first.GetExecutorId() != "" && first.GetExecutorId() != ex.GetId() {
		return status.Error(codes.InvalidArgument, "executor_id differs from the registration's id")
	}
	if ex.GetMaxPendingTasks() == 0 {
		ex.MaxPendingTasks = first.GetMaxPendingTasks()
	}
	if _, err := s.apply(ctx, "", &pb.Command{Op: &pb.Command_RegisterExecutor{
		RegisterExecutor: &pb.RegisterExecutorCmd{Executor: ex}}}); err != nil {
		return err
	}
	id := ex.GetId()
	conn := s.stream.attach(id)
	defer s.stream.detach(conn)
	s.log.Info("executor connected", "executor", id, "extractors", len(ex.GetExtractors()))

	recvErr := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				recvErr <- err
				return
			}
			conn.lastRecv.Store(nowMillis())
		}
	}()

	// sent remembers the assignment (by its log index) each task was pushed
	// under, so a task reassigned back to this executor is pushed again.
	sent := make(map[string]uint64)
	for {
		watch := s.store.Watch()
		// A replica catching up (after a partition or a restart) passes
		// through superseded states: an assignment it applies may already
		// have moved to another executor. New assignments are pushed only
		// after a linearizable barrier, i.e. from a state at least as new as
		// the leader's commit index now; until then only cancellations go.
		pushNew, retry := true, (<-chan time.Time)(nil)
		if s.newAssignments(id, sent) {
			bctx, cancel := context.WithTimeout(ctx, s.cfg.HeartbeatFlush)
			if err := s.raft.ReadBarrier(bctx, pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE); err != nil {
				pushNew, retry = false, time.After(s.cfg.HeartbeatFlush/4)
			}
			cancel()
		}
		resp := &pb.HeartbeatResponse{}
		current := make(map[string]struct{})
		for _, t := range s.store.TasksAssignedTo(id) {
			current[t.GetId()] = struct{}{}
			if pushNew && sent[t.GetId()] != t.GetAssignedIndex() {
				sent[t.GetId()] = t.GetAssignedIndex()
				resp.Tasks = append(resp.Tasks, t)
			}
		}
		for tid := range sent {
			if _, ok := current[tid]; ok {
				continue
			}
			delete(sent, tid)
			if t, ok := s.store.Task(tid); ok && t.GetOutcome() == pb.TaskOutcome_TASK_OUTCOME_UNKNOWN {
				resp.CancelledTaskIds = append(resp.CancelledTaskIds, tid)
			}
		}
		if len(resp.Tasks) > 0 || len(resp.CancelledTaskIds) > 0 {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		select {
		case <-watch:
		case <-retry:
		case <-conn.kick:
			return status.Error(codes.Unavailable, "this coordinator cannot reach the leader; reconnect to another one")
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// newAssignments reports whether a task assigned to executor id has not been
// pushed under its current assignment yet.
func (s *Service) newAssignments(id string, sent map[string]uint64) bool {
	for _, t := range s.store.TasksAssignedTo(id) {
		if sent[t.GetId()] != t.GetAssignedIndex() {
			return true
		}
	}
	return false
}
