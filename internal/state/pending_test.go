package state

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// The chunked list against a plain sorted slice: random inserts (mostly
// appends, as the scheduler makes them, some in the middle, as retries and
// a new leader's clock do) and removals (mostly the oldest, some anywhere),
// enough of them to split and merge chunks many times.
func TestTaskListMatchesSortedSlice(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		r := rand.New(rand.NewSource(seed))
		var l taskList
		var ref []*pb.Task
		clock := int64(0)
		for step := range 20000 {
			switch op := r.Intn(10); {
			case op < 6 || len(ref) == 0:
				clock += int64(r.Intn(2))
				at := clock
				if r.Intn(5) == 0 {
					at = r.Int63n(clock + 1) // out of order
				}
				tk := &pb.Task{Id: fmt.Sprintf("t%d-%d", seed, step), CreatedAt: at}
				l.insert(tk)
				i, _ := slices.BinarySearchFunc(ref, tk, TaskOrder)
				ref = slices.Insert(ref, i, tk)
			default:
				i := 0
				if op == 9 {
					i = r.Intn(len(ref))
				}
				if !l.remove(ref[i]) {
					t.Fatalf("seed %d step %d: %s not found", seed, step, ref[i].Id)
				}
				ref = slices.Delete(ref, i, i+1)
			}
			if step%997 == 0 || step == 19999 {
				checkList(t, &l, ref)
			}
		}
		// Removing what is not there (a copy with the same key, or a task
		// never inserted) changes nothing.
		if len(ref) > 0 {
			cp := &pb.Task{Id: ref[0].Id, CreatedAt: ref[0].CreatedAt}
			if l.remove(cp) {
				t.Fatal("removed a different message with the same key")
			}
		}
		if l.remove(&pb.Task{Id: "absent", CreatedAt: -1}) {
			t.Fatal("removed an absent task")
		}
		checkList(t, &l, ref)
		for len(ref) > 0 {
			i := r.Intn(len(ref))
			if !l.remove(ref[i]) {
				t.Fatalf("seed %d: %s not found while draining", seed, ref[i].Id)
			}
			ref = slices.Delete(ref, i, i+1)
		}
		checkList(t, &l, ref)
		if len(l.chunks) != 0 {
			t.Fatalf("empty list keeps %d chunks", len(l.chunks))
		}
	}
}

func checkList(t *testing.T, l *taskList, ref []*pb.Task) {
	t.Helper()
	var got []*pb.Task
	l.each(func(x *pb.Task) bool { got = append(got, x); return true })
	if l.n != len(ref) || len(got) != len(ref) {
		t.Fatalf("list holds %d (n=%d), want %d", len(got), l.n, len(ref))
	}
	for i := range ref {
		if got[i] != ref[i] {
			t.Fatalf("position %d: %s, want %s", i, got[i].Id, ref[i].Id)
		}
	}
	for i, c := range l.chunks {
		if len(c) == 0 || len(c) > chunkMax {
			t.Fatalf("chunk %d holds %d", i, len(c))
		}
	}
}

// PendingTasksFor merges extractors oldest first, skips tasks in backoff,
// and stops at the number asked for per extractor.
func TestPendingTasksForOrderAndLimits(t *testing.T) {
	s := NewStore()
	mk := func(id, x string, at, notBefore int64) *pb.Task {
		return &pb.Task{Id: id, Extractor: x, CreatedAt: at, NotBefore: notBefore}
	}
	s.mu.Lock()
	for _, tk := range []*pb.Task{
		mk("a1", "a", 1, 0), mk("b1", "b", 2, 0), mk("a2", "a", 3, 50), // a2 in backoff until 50
		mk("a3", "a", 4, 0), mk("b2", "b", 4, 0), mk("c1", "c", 0, 0),
		{Id: "done", Extractor: "a", CreatedAt: 0, Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS},
		{Id: "held", Extractor: "a", CreatedAt: 0, ExecutorId: "e1"},
	} {
		s.d.putTask(tk)
	}
	s.mu.Unlock()
	ids := func(ts []*pb.Task) []string {
		var out []string
		for _, x := range ts {
			out = append(out, x.Id)
		}
		return out
	}
	for _, tc := range []struct {
		now  int64
		want map[string]int
		ids  []string
	}{
		{10, map[string]int{"a": AllPending, "b": AllPending}, []string{"a1", "b1", "a3", "b2"}},
		{60, map[string]int{"a": AllPending, "b": AllPending}, []string{"a1", "b1", "a2", "a3", "b2"}},
		{10, map[string]int{"a": 1, "b": AllPending}, []string{"a1", "b1", "b2"}},
		{10, map[string]int{"a": 2, "c": 0, "x": 5}, []string{"a1", "a3"}},
		{10, map[string]int{}, nil},
	} {
		if got := ids(s.PendingTasksFor(tc.now, tc.want)); !slices.Equal(got, tc.ids) {
			t.Errorf("PendingTasksFor(%d, %v) = %v, want %v", tc.now, tc.want, got, tc.ids)
		}
	}
	if got, want := ids(s.PendingTasks()), []string{"c1", "a1", "b1", "a2", "a3", "b2"}; !slices.Equal(got, want) {
		t.Errorf("PendingTasks = %v, want %v", got, want)
	}
}
