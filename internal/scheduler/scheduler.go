package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Applier proposes a command to the replicated log and returns its result
// once applied (the cluster node on the leader; the FSM itself in tests).
type Applier interface {
	Apply(ctx context.Context, cmd *pb.Command) (*pb.CommandResult, error)
}

// pipelineWindow is how long one pipeline keeps planning ahead before it
// lets the in-flight passes drain, so the loop's other duties (the retry of
// a failed command, removing silent executors) come round at least this
// often while a long backlog drains.
const pipelineWindow = time.Second

// maxRetries bounds how often one command is re-proposed after Apply
// errors before it is dropped and the state re-planned.
const maxRetries = 5

// Scheduler is the leader-only loop that plans and proposes scheduling
// decisions and removes executors that stopped heart-beating.
type Scheduler struct {
	store   *state.Store
	applier Applier
	cfg     Config
	log     *slog.Logger

	passes    atomic.Uint64
	proposals atomic.Uint64
	failures  atomic.Uint64
}

// Stats are simple counters for logs and tests (metrics come later).
type Stats struct {
	Passes    uint64 // planning passes run
	Proposals uint64 // commands applied successfully
	Failures  uint64 // Apply errors and rejected commands
}

// New returns a scheduler; nothing runs until Run.
func New(store *state.Store, applier Applier, cfg Config, logger *slog.Logger) *Scheduler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{store: store, applier: applier, cfg: cfg.withDefaults(), log: logger}
}

// Stats returns the counters so far.
func (s *Scheduler) Stats() Stats {
	return Stats{Passes: s.passes.Load(), Proposals: s.proposals.Load(), Failures: s.failures.Load()}
}

// Run plans and proposes until ctx is done. The caller starts it when this
// node becomes leader of term and cancels ctx when leadership is lost; no
// command is proposed once ctx is done.
func (s *Scheduler) Run(ctx context.Context, term uint64) {
	cfg := s.cfg
	cfg.Term = term
	r := &run{s: s, cfg: cfg, leaderSince: cfg.Now()}
	s.log.Info("scheduler started", "term", term)
	defer s.log.Info("scheduler stopped", "term", term)
	ticker := time.NewTicker(cfg.Tick)
	defer ticker.Stop()
	for ctx.Err() == nil {
		// Take the watch channel before reading the store so a command
		// applied while planning still wakes the next round.
		watch := s.store.Watch()
		if r.pass(ctx) {
			continue // a full batch: more changes are waiting
		}
		select {
		case <-ctx.Done():
		case <-watch:
		case <-ticker.C:
		}
	}
}

// run is the state of one leadership term.
type run struct {
	s           *Scheduler
	cfg         Config
	leaderSince time.Time
	seq         uint64
	retry       *pb.Command // last command whose Apply failed
	retries     int
}

// pass runs one round; it reports whether another round should follow
// immediately.
func (r *run) pass(ctx context.Context) bool {
	r.s.passes.Add(1)
	if r.retry != nil {
		// The failed command may still have been applied (e.g. leadership
		// wobbled after the append): resending the same request id lets the
		// FSM deduplicate instead of applying a re-plan on top.
		cmd := r.retry
		r.retries++
		if r.retries > maxRetries {
			r.s.log.Warn("dropping command after repeated apply errors", "request_id", cmd.GetRequestId())
			r.retry, r.retries = nil, 0
		} else if ok := r.apply(ctx, cmd); !ok {
			return false
		}
	}
	now := r.cfg.Now()
	r.expireExecutors(ctx, now)
	if r.retry != nil || ctx.Err() != nil {
		return false
	}
	cmd := Plan(r.s.store, now, r.cfg)
	if cmd == nil {
		return false
	}
	full := len(cmd.GetProcessedChangeIds()) >= r.cfg.BatchChanges
	if full && r.cfg.InFlight > 1 {
		return r.pipeline(ctx, now, cmd)
	}
	ok := r.apply(ctx, r.command(now, &pb.Command{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: cmd}}))
	return ok && full
}

// flight is a proposed pass whose Apply has not returned yet.
type flight struct {
	upd  *pb.SchedulerUpdateCmd
	cmd  *pb.Command
	done chan applied
}

type applied struct {
	res *pb.CommandResult
	err error
}

// pipeline drains a backlog: it proposes first (a full batch) and, while
// passes are in flight, plans the next ones ahead of them (PlanAhead), up to
// cfg.InFlight at once, so the leader plans a batch while the one before it
// commits. It plans ahead for at most pipelineWindow, then returns once
// nothing is in flight, reporting whether another pass should follow at
// once. After a failed Apply it plans nothing more
// ahead; the first failed command is kept for the retry (pass).
func (r *run) pipeline(ctx context.Context, now time.Time, first *pb.SchedulerUpdateCmd) bool {
	var q []*flight
	launch := func(now time.Time, upd *pb.SchedulerUpdateCmd) {
		f := &flight{
			upd:  upd,
			cmd:  r.command(now, &pb.Command{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: upd}}),
			done: make(chan applied, 1),
		}
		go func() {
			res, err := r.s.applier.Apply(ctx, f.cmd)
			f.done <- applied{res, err}
		}()
		q = append(q, f)
	}
	launch(now, first)
	start := time.Now()
	more, ok := true, true // more: the last pass planned had a full batch
	for len(q) > 0 {
		if ok && more && len(q) < r.cfg.InFlight && ctx.Err() == nil && time.Since(start) < pipelineWindow {
			inflight := make([]*pb.SchedulerUpdateCmd, len(q))
			for i, f := range q {
				inflight[i] = f.upd
			}
			r.s.passes.Add(1)
			now := r.cfg.Now()
			if upd := PlanAhead(r.s.store, now, r.cfg, inflight); upd != nil && len(upd.GetProcessedChangeIds()) > 0 {
				more = len(upd.GetProcessedChangeIds()) >= r.cfg.BatchChanges
				launch(now, upd)
				continue
			}
			// Nothing ahead could be planned: the next pass is planned
			// once the in-flight ones applied.
			more = false
		}
		f := q[0]
		q = q[1:]
		a := <-f.done
		if !r.settle(ctx, f.cmd, a.res, a.err) {
			ok = false
		}
	}
	return ok && ctx.Err() == nil
}

// expireExecutors removes executors silent for longer than the timeout. The
// clock starts no earlier than this leadership: heartbeats sent to the
// previous leader may have been lost in the hand-over, so every executor
// gets a full timeout under the new leader.
func (r *run) expireExecutors(ctx context.Context, now time.Time) {
	since := r.leaderSince.UnixMilli()
	limit := r.cfg.ExecutorTimeout.Milliseconds()
	for _, e := range r.s.store.Executors() {
		seen := max(e.GetLastSeen(), since)
		if now.UnixMilli()-seen <= limit {
			continue
		}
		r.s.log.Info("removing silent executor", "executor", e.GetId(), "last_seen_ms", e.GetLastSeen())
		op := &pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{
			ExecutorId: e.GetId(),
			Reason:     fmt.Sprintf("no heartbeat for more than %s", r.cfg.ExecutorTimeout),
		}}
		if !r.apply(ctx, r.command(now, &pb.Command{Op: op})) {
			return
		}
	}
}

// command stamps a command with this term's next request id and the time.
func (r *run) command(now time.Time, cmd *pb.Command) *pb.Command {
	r.seq++
	cmd.RequestId = fmt.Sprintf("sched-%s-%d-%d", r.cfg.NodeID, r.cfg.Term, r.seq)
	cmd.Timestamp = now.UnixMilli()
	return cmd
}

// apply proposes cmd unless ctx is done. On an Apply error the command is
// kept for a retry; a rejection by the state machine is final (the same
// request id would return the same rejection) and the next pass re-plans.
func (r *run) apply(ctx context.Context, cmd *pb.Command) bool {
	if ctx.Err() != nil {
		return false
	}
	res, err := r.s.applier.Apply(ctx, cmd)
	return r.settle(ctx, cmd, res, err)
}

// settle books the outcome of proposing cmd. On an error the command is kept
// for a retry unless an earlier one already is (pipeline: the first failure
// is retried; the later passes' changes are planned again).
func (r *run) settle(ctx context.Context, cmd *pb.Command, res *pb.CommandResult, err error) bool {
	if err != nil {
		r.s.failures.Add(1)
		if ctx.Err() == nil {
			r.s.log.Warn("apply failed; will retry", "request_id", cmd.GetRequestId(), "err", err)
		}
		if r.retry == nil {
			r.retry, r.retries = cmd, 0
		}
		return false
	}
	if r.retry == cmd {
		r.retry, r.retries = nil, 0
	}
	if res.GetErrorCode() != pb.ErrorCode_ERROR_CODE_OK {
		r.s.failures.Add(1)
		r.s.log.Error("command rejected", "request_id", cmd.GetRequestId(), "code", res.GetErrorCode(), "err", res.GetError())
		return false
	}
	r.s.proposals.Add(1)
	return true
}
