package state

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/indexify-go/indexify/internal/state/statedb"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// viewOf writes s into an in-memory state database and returns a view of
// it (closed with the test).
func viewOf(t *testing.T, s *Store) *statedb.View {
	t.Helper()
	db, err := statedb.Open(statedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := s.WriteStateDB(db); err != nil {
		t.Fatal(err)
	}
	v := db.View()
	t.Cleanup(func() { v.Close() })
	return v
}

// sameTasks compares the in-memory answer (tasks with their content copy)
// with the layout's (without): same tasks, same order, every other field
// equal.
func sameTasks(mem, disk []*pb.Task) error {
	if len(mem) != len(disk) {
		return fmt.Errorf("%d tasks in memory, %d from the layout", len(mem), len(disk))
	}
	for i := range mem {
		m := cloneTask(mem[i])
		m.Content = nil
		if !proto.Equal(m, disk[i]) {
			return fmt.Errorf("task %d: memory %v, layout %v", i, m, disk[i])
		}
	}
	return nil
}

// The layout's scheduler reads give what the in-memory indexes give, at
// every 25th step of random histories: every pending task per extractor and
// across both, the oldest few (a scheduler pass asks for as many as the
// executors can take), at times before and after the retried tasks'
// not_before, and every executor's assigned tasks.
func TestSchedulerReadsFromTheLayoutMatchMemory(t *testing.T) {
	sawPending, sawAssigned, sawDeferred := false, false, false
	for seed := int64(1); seed <= 12; seed++ {
		randomHistory(t, seed, 400, func(step int, s *Store) {
			if step%25 != 0 {
				return
			}
			d := compareSchedulerReads(t, s, viewOf(t, s))
			sawPending = sawPending || d.pending
			sawAssigned = sawAssigned || d.assigned
			sawDeferred = sawDeferred || d.deferred
			if t.Failed() {
				t.Fatalf("seed %d, step %d", seed, step)
			}
		})
	}
	if !sawPending || !sawAssigned || !sawDeferred {
		t.Fatalf("the histories did not exercise every case: pending %v, assigned %v, retried with not_before %v",
			sawPending, sawAssigned, sawDeferred)
	}
}

type readCases struct{ pending, assigned, deferred bool }

func compareSchedulerReads(t *testing.T, s *Store, v LayoutView) readCases {
	t.Helper()
	var saw readCases
	times := []int64{0, math.MaxInt64}
	for _, pt := range s.PendingTasks() {
		if pt.NotBefore > 0 {
			saw.deferred = true
			times = append(times, pt.NotBefore-1, pt.NotBefore)
		}
	}
	wants := []map[string]int{
		{"chunk": AllPending, "embed": AllPending},
		{"chunk": AllPending},
		{"embed": 1},
		{"chunk": 2, "embed": 3},
		{"chunk": 0, "nobody": 5},
	}
	for _, now := range times {
		for _, want := range wants {
			mem := s.PendingTasksFor(now, want)
			disk, err := PendingTasksIn(v, now, want)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameTasks(mem, disk); err != nil {
				t.Errorf("now %d, want %v: pending: %v", now, want, err)
			}
			saw.pending = saw.pending || len(mem) > 0
		}
	}
	for _, ex := range []string{"ex1", "ex2", "ex3", "nobody"} {
		mem := s.TasksAssignedTo(ex)
		disk, err := AssignedTasksIn(v, ex)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameTasks(mem, disk); err != nil {
			t.Errorf("assigned to %s: %v", ex, err)
		}
		saw.assigned = saw.assigned || len(mem) > 0
	}
	return saw
}

// A backlog larger than one write batch comes back oldest first and cut at
// what was asked for.
func TestPendingFromTheLayoutAcrossBatches(t *testing.T) {
	backlog := LayoutFlushEvery / 2
	s := backlogStore(t, backlog)
	v := viewOf(t, s)
	for _, n := range []int{1, 1000, AllPending} {
		want := map[string]int{"chunk": n}
		disk, err := PendingTasksIn(v, math.MaxInt64, want)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameTasks(s.PendingTasksFor(math.MaxInt64, want), disk); err != nil {
			t.Fatalf("n %d: %v", n, err)
		}
		if got := min(n, backlog); len(disk) != got {
			t.Fatalf("n %d: %d tasks, want %d", n, len(disk), got)
		}
		if !slices.IsSortedFunc(disk, TaskOrder) {
			t.Fatalf("n %d: not oldest first", n)
		}
	}
}
