package state

// The scheduler's reads answered from the on-disk layout (issue 15): what
// PendingTasksFor and TasksAssignedTo give from the in-memory indexes,
// read instead from the layout's queue keys (0x32 pending per extractor,
// 0x33 assigned per executor, both in TaskOrder), whose values are copies
// of the task records (layout.PutTask). Not yet called by the scheduler (the FSM still runs on maps); the
// conformance test runs both on the same histories, and `bench scale`
// times both on the same state, so the switch-over knows what its hottest
// read costs before it is made.

import (
	"fmt"
	"slices"

	"github.com/indexify-go/indexify/internal/state/layout"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// LayoutView is what the layout's readers need: statedb's View (one
// consistent state: a read never sees half a batch), and its DB and Batch.
type LayoutView interface {
	LayoutReader
	Get(k []byte) ([]byte, bool, error)
}

// PendingTasksIn is PendingTasksFor answered from the layout: for each
// extractor in want, its oldest want[extractor] pending tasks whose
// not_before is at or before nowMs, merged oldest first (TaskOrder). The
// tasks come without their content copy (the layout stores none; the
// scheduler's allocation reads none). One queue scan per extractor.
func PendingTasksIn(v LayoutView, nowMs int64, want map[string]int) ([]*pb.Task, error) {
	names := make([]string, 0, len(want))
	for x, n := range want {
		if n > 0 {
			names = append(names, x)
		}
	}
	slices.Sort(names)
	var lists [][]*pb.Task
	total := 0
	for _, x := range names {
		n := want[x]
		var out []*pb.Task
		err := scanQueue(v, layout.PendingPrefix(x), func(t *pb.Task) bool {
			if t.NotBefore <= nowMs {
				out = append(out, t)
			}
			return len(out) < n
		})
		if err != nil {
			return nil, err
		}
		if len(out) > 0 {
			lists = append(lists, out)
			total += len(out)
		}
	}
	return mergeOrdered(lists, total), nil
}

// AssignedTasksIn is TasksAssignedTo answered from the layout: the
// unfinished tasks assigned to an executor, oldest first, without their
// content copy.
func AssignedTasksIn(v LayoutView, executorID string) ([]*pb.Task, error) {
	var out []*pb.Task
	err := scanQueue(v, layout.AssignedPrefix(executorID), func(t *pb.Task) bool {
		out = append(out, t)
		return true
	})
	return out, err
}

// scanQueue reads the tasks a queue prefix names, in key order, from the
// copies the queue entries hold (layout.PutTask), until fn returns false. An
// entry that does not decode, or whose task does not belong in that queue,
// is an error: the FSM writes the record and its entry in one batch, so
// either is a broken store, not a state to schedule from.
func scanQueue(v LayoutView, prefix []byte, fn func(*pb.Task) bool) error {
	var ferr error
	err := v.Scan(prefix, func(k, val []byte) bool {
		t := &pb.Task{}
		if err := layout.DecodeRecord(val, t); err != nil {
			ferr = fmt.Errorf("state: queue key %x: %w", k, err)
			return false
		}
		if q := layout.QueueKey(t); string(q) != string(k) {
			ferr = fmt.Errorf("state: task %q is under queue key %x but belongs under %x", t.Id, k, q)
			return false
		}
		return fn(t)
	})
	if err != nil {
		return err
	}
	return ferr
}
