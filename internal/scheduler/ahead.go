package scheduler

import (
	"time"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// This file plans a pass while earlier passes are still in flight (proposed,
// not yet applied): the loop overlaps planning the next batch of a backlog
// with committing the one before, instead of leaving the leader idle for
// the whole commit (DESIGN.md, "Planning ahead").

// ahead is what the in-flight passes decided, as a planner reads it: the
// store shows none of it yet.
type ahead struct {
	processed map[uint64]bool
	tasks     map[string]bool // new tasks by id
	assigned  map[string]bool // stored tasks the passes (un)assign
	perNS     map[string]int  // new tasks per namespace
	perExec   map[string]int  // tasks given to each executor
	// tombstoned versions (state.VersionRef): supersession checks read a
	// version the in-flight passes tombstone as tombstoned.
	tombstoned map[string]bool
}

func newAhead(inflight []*pb.SchedulerUpdateCmd) *ahead {
	a := &ahead{
		processed:  map[uint64]bool{},
		tasks:      map[string]bool{},
		assigned:   map[string]bool{},
		perNS:      map[string]int{},
		perExec:    map[string]int{},
		tombstoned: map[string]bool{},
	}
	for _, c := range inflight {
		for _, id := range c.GetProcessedChangeIds() {
			a.processed[id] = true
		}
		for _, t := range c.GetNewTasks() {
			a.tasks[t.GetId()] = true
			a.perNS[t.GetNamespace()]++
			if e := t.GetExecutorId(); e != "" {
				a.perExec[e]++
			}
		}
		for _, as := range c.GetAssignments() {
			a.assigned[as.GetTaskId()] = true
			if e := as.GetExecutorId(); e != "" {
				a.perExec[e]++
			}
		}
		for _, ref := range c.GetTombstoneContentIds() {
			a.tombstoned[ref] = true
		}
	}
	return a
}

// PlanAhead is Plan for a pass that follows the passes in inflight, which
// were proposed but may not be applied yet. It plans as Plan would once they
// are applied, for the changes whose decisions the in-flight passes' own
// decisions fully describe: content to plan (its tasks, the namespace
// budgets and the executors' load include the in-flight tasks) and the
// changes that need no per-change work. It stops at the first change whose
// planning reads what an in-flight pass may still change beyond that: a
// task's completion and a deleted tree (they decide garbage collection from
// the tasks of a whole tree), and content whose root has superseded
// versions still live. Those wait for a pass planned after the in-flight
// ones apply. Stored pending tasks an in-flight pass assigns are not
// allocated again.
//
// Reading a pass both in the store and in inflight (it applied while this
// one planned) only makes this pass more careful: its tasks count twice
// against budgets and load, its changes and assignments are skipped either
// way. With no pass in flight, PlanAhead is Plan.
func PlanAhead(s *state.Store, now time.Time, cfg Config, inflight []*pb.SchedulerUpdateCmd) *pb.SchedulerUpdateCmd {
	if len(inflight) == 0 {
		return Plan(s, now, cfg)
	}
	return plan(s, now, cfg, newAhead(inflight))
}

// safeAhead reports whether change ch can be planned ahead of in-flight
// passes (PlanAhead).
func (p *planner) safeAhead(ch *pb.StateChange) bool {
	switch ch.GetType() {
	case pb.ChangeType_CHANGE_TYPE_NEW_CONTENT, pb.ChangeType_CHANGE_TYPE_CONTENT_UPDATED,
		pb.ChangeType_CHANGE_TYPE_ADD_GRAPH_TO_CONTENT:
		c, ok := p.s.Content(ch.GetNamespace(), ch.GetObjectId())
		if !ok || c.GetTombstoned() {
			return true // planContent does nothing
		}
		root := c.GetRootContentId()
		if isRoot(c) {
			root = c.GetId()
		}
		// planContent ends with maybeSupersede, which reads the tree's
		// tasks only when older live versions exist.
		_, olds := p.liveOlds(ch.GetNamespace(), root)
		return len(olds) == 0
	case pb.ChangeType_CHANGE_TYPE_EXECUTOR_ADDED, pb.ChangeType_CHANGE_TYPE_EXECUTOR_REMOVED,
		pb.ChangeType_CHANGE_TYPE_EXTRACTION_GRAPH_DELETED:
		return true // no per-change work (process)
	default:
		// A task's completion and a deleted tree decide garbage
		// collection from a whole tree's tasks; an unknown type is not
		// guessed at.
		return false
	}
}
