// Package scheduler is the leader-only planner of the coordinator: it turns
// unprocessed state changes into tasks, garbage-collection work and task
// assignments, and proposes them as one pb.SchedulerUpdateCmd per pass.
//
// The planner (Plan) is a pure function of the store and a clock reading so
// that every decision is reproducible in tests; the loop (Scheduler.Run) only
// decides when to plan and proposes the result through an Applier.
package scheduler

import (
	"time"

	"github.com/indexify-go/indexify/internal/state"
)

// Defaults used when a Config field is zero.
const (
	DefaultBatchChanges    = 1000
	DefaultTick            = 250 * time.Millisecond
	DefaultExecutorTimeout = 15 * time.Second
	DefaultInFlight        = 2
)

// Config tunes the planner and the loop. Zero values mean the defaults.
type Config struct {
	// NodeID names this coordinator in SchedulerUpdateCmd.scheduler_node and
	// in request ids.
	NodeID string
	// Term is the Raft term the loop runs in; Run sets it.
	Term uint64
	// ExecutorTimeout is how long an executor may stay silent before the
	// leader removes it.
	ExecutorTimeout time.Duration
	// Tick wakes the loop even without state changes, so retry backoffs that
	// expire and executors that go silent are noticed.
	Tick time.Duration
	// BatchChanges caps the state changes one pass processes, which bounds
	// the size of one Raft entry.
	BatchChanges int
	// InFlight is how many passes may be proposed and not yet applied at
	// once while a backlog drains: the next batch is planned (PlanAhead)
	// while the one before commits. 1 plans every pass after the previous
	// one applied.
	InFlight int
	// MaxUnfinishedTasks bounds a namespace's unfinished tasks: at the
	// bound, its content changes wait unplanned until tasks finish (Plan).
	// Zero means state.DefaultMaxUnfinishedTasks.
	MaxUnfinishedTasks int
	// Now is the clock (tests inject one); nil means time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.BatchChanges <= 0 {
		c.BatchChanges = DefaultBatchChanges
	}
	if c.InFlight <= 0 {
		c.InFlight = DefaultInFlight
	}
	if c.Tick <= 0 {
		c.Tick = DefaultTick
	}
	if c.ExecutorTimeout <= 0 {
		c.ExecutorTimeout = DefaultExecutorTimeout
	}
	if c.MaxUnfinishedTasks <= 0 {
		c.MaxUnfinishedTasks = state.DefaultMaxUnfinishedTasks
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
