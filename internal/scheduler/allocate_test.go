package scheduler

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func mkExecutor(id string, maxPending uint32, extractors ...string) *pb.Executor {
	e := &pb.Executor{Id: id, MaxPendingTasks: maxPending}
	for _, x := range extractors {
		e.Extractors = append(e.Extractors, &pb.ExtractorDescription{Name: x})
	}
	return e
}

func mkTasks(n int, extractor string) []*pb.Task {
	out := make([]*pb.Task, n)
	for i := range out {
		out[i] = &pb.Task{Id: fmt.Sprintf("t%06d", i), Extractor: extractor}
	}
	return out
}

func assignedCounts(as []*pb.Assignment) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		m[a.GetExecutorId()]++
	}
	return m
}

func TestAllocateSpreadsEvenlyWithIDTieBreak(t *testing.T) {
	execs := []*pb.Executor{mkExecutor("c", 0, "x"), mkExecutor("a", 0, "x"), mkExecutor("b", 0, "x")}
	got := Allocate(mkTasks(7, "x"), execs, nil)
	var order []string
	for _, a := range got {
		order = append(order, a.GetExecutorId())
	}
	want := []string{"a", "b", "c", "a", "b", "c", "a"}
	if !slices.Equal(order, want) {
		t.Fatalf("assignment order = %v, want %v", order, want)
	}
	for i, a := range got {
		if a.GetTaskId() != fmt.Sprintf("t%06d", i) {
			t.Fatalf("assignment %d is for task %s", i, a.GetTaskId())
		}
	}
}

func TestAllocateUsesCurrentLoad(t *testing.T) {
	execs := []*pb.Executor{mkExecutor("a", 0, "x"), mkExecutor("b", 0, "x")}
	load := map[string]int{"a": 5, "b": 1}
	got := assignedCounts(Allocate(mkTasks(6, "x"), execs, load))
	// b catches up to a (4 tasks), then they alternate (1 each).
	if got["a"] != 1 || got["b"] != 5 {
		t.Fatalf("counts = %v, want a:1 b:5", got)
	}
	if load["a"] != 5 || load["b"] != 1 {
		t.Fatalf("Allocate modified the caller's load map: %v", load)
	}
}

func TestAllocateRespectsCapacity(t *testing.T) {
	execs := []*pb.Executor{mkExecutor("a", 2, "x"), mkExecutor("b", 3, "x"), mkExecutor("c", 0, "y")}
	load := map[string]int{"b": 1}
	got := Allocate(mkTasks(10, "x"), execs, load)
	counts := assignedCounts(got)
	if len(got) != 4 || counts["a"] != 2 || counts["b"] != 2 {
		t.Fatalf("got %d assignments %v, want a:2 b:2 (caps 2 and 3, b already has 1)", len(got), counts)
	}
	// An executor with a higher load but spare capacity still receives
	// tasks when the least loaded one is full.
	execs = []*pb.Executor{mkExecutor("a", 1, "x"), mkExecutor("b", 100, "x")}
	counts = assignedCounts(Allocate(mkTasks(5, "x"), execs, map[string]int{"b": 50}))
	if counts["a"] != 1 || counts["b"] != 4 {
		t.Fatalf("counts = %v, want a:1 b:4", counts)
	}
}

func TestAllocateWithoutCapableExecutor(t *testing.T) {
	execs := []*pb.Executor{mkExecutor("a", 0, "x")}
	if got := Allocate(mkTasks(3, "y"), execs, nil); len(got) != 0 {
		t.Fatalf("tasks for an extractor nobody offers were assigned: %v", got)
	}
	if got := Allocate(mkTasks(3, "x"), nil, nil); len(got) != 0 {
		t.Fatalf("assigned without executors: %v", got)
	}
}

func TestAllocateSharedExecutorAcrossExtractors(t *testing.T) {
	// "shared" offers both extractors; its load must count tasks of both.
	execs := []*pb.Executor{mkExecutor("shared", 0, "x", "y", "x"), mkExecutor("xonly", 0, "x"), mkExecutor("yonly", 0, "y")}
	var tasks []*pb.Task
	for i := range 12 {
		ext := "x"
		if i%2 == 1 {
			ext = "y"
		}
		tasks = append(tasks, &pb.Task{Id: fmt.Sprint(i), Extractor: ext})
	}
	counts := assignedCounts(Allocate(tasks, execs, nil))
	if counts["shared"] != 4 || counts["xonly"] != 4 || counts["yonly"] != 4 {
		t.Fatalf("counts = %v, want 4 each", counts)
	}
}

// naiveAllocate is the straightforward peer of Allocate: for every task a
// linear scan over the executors offering its extractor. It defines the
// expected result and is the baseline of the benchmarks.
func naiveAllocate(tasks []*pb.Task, executors []*pb.Executor, load map[string]int) []*pb.Assignment {
	sorted := slices.Clone(executors)
	slices.SortFunc(sorted, func(x, y *pb.Executor) int { return strings.Compare(x.GetId(), y.GetId()) })
	cur := make([]int, len(sorted))
	offers := map[string][]int{}
	for i, e := range sorted {
		cur[i] = load[e.GetId()]
		seen := map[string]bool{}
		for _, d := range e.GetExtractors() {
			if !seen[d.GetName()] {
				seen[d.GetName()] = true
				offers[d.GetName()] = append(offers[d.GetName()], i)
			}
		}
	}
	var out []*pb.Assignment
	for _, t := range tasks {
		best := -1
		for _, i := range offers[t.GetExtractor()] {
			if m := int(sorted[i].GetMaxPendingTasks()); m > 0 && cur[i] >= m {
				continue
			}
			if best < 0 || cur[i] < cur[best] {
				best = i
			}
		}
		if best < 0 {
			continue
		}
		cur[best]++
		out = append(out, &pb.Assignment{TaskId: t.GetId(), ExecutorId: sorted[best].GetId()})
	}
	return out
}

func TestAllocateMatchesNaivePeer(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		nExec := 1 + rng.IntN(12)
		nExt := 1 + rng.IntN(4)
		var execs []*pb.Executor
		load := map[string]int{}
		for i := range nExec {
			var exts []string
			for x := range nExt {
				if rng.IntN(2) == 0 {
					exts = append(exts, fmt.Sprint("x", x))
				}
			}
			id := fmt.Sprintf("e%02d", rng.IntN(100)*100+i)
			execs = append(execs, mkExecutor(id, uint32(rng.IntN(6)), exts...))
			load[id] = rng.IntN(5)
		}
		var tasks []*pb.Task
		for i := range rng.IntN(60) {
			tasks = append(tasks, &pb.Task{Id: fmt.Sprint(i), Extractor: fmt.Sprint("x", rng.IntN(nExt+1))})
		}
		before := maps.Clone(load)
		got, want := Allocate(tasks, execs, load), naiveAllocate(tasks, execs, load)
		if len(got) != len(want) {
			t.Fatalf("round %d: %d assignments, naive peer made %d", round, len(got), len(want))
		}
		for i := range got {
			if got[i].GetTaskId() != want[i].GetTaskId() || got[i].GetExecutorId() != want[i].GetExecutorId() {
				t.Fatalf("round %d assignment %d: got %v, naive peer %v", round, i, got[i], want[i])
			}
		}
		if !maps.Equal(before, load) {
			t.Fatalf("round %d: load map modified", round)
		}
	}
}

// benchInput builds the benchmark workload: 500,000 tasks over 100
// executors with some initial load and no capacity cap. Homogeneous: every
// executor offers the one extractor (a fleet of identical workers, the
// planner's worst case for a linear scan). Mixed: 10 extractors, each
// executor offering 3 of them (30 executors per extractor), so every
// assignment also makes the executor's entries in 2 other heaps stale.
func benchInput(mixed bool) ([]*pb.Task, []*pb.Executor, map[string]int) {
	const nTasks, nExec, nExt = 500_000, 100, 10
	execs := make([]*pb.Executor, nExec)
	load := map[string]int{}
	for i := range execs {
		id := fmt.Sprintf("executor-%03d", i)
		if mixed {
			execs[i] = mkExecutor(id, 0, fmt.Sprint("ext", i%nExt), fmt.Sprint("ext", (i+3)%nExt), fmt.Sprint("ext", (i+7)%nExt))
		} else {
			execs[i] = mkExecutor(id, 0, "ext0")
		}
		load[id] = i % 7
	}
	tasks := make([]*pb.Task, nTasks)
	for i := range tasks {
		ext := "ext0"
		if mixed {
			ext = fmt.Sprint("ext", i%nExt)
		}
		tasks[i] = &pb.Task{Id: fmt.Sprintf("task-%07d", i), Extractor: ext}
	}
	return tasks, execs, load
}

type allocFunc func([]*pb.Task, []*pb.Executor, map[string]int) []*pb.Assignment

func benchAlloc(b *testing.B, alloc allocFunc, mixed, withSetup bool) {
	tasks, execs, load := benchInput(mixed)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if withSetup {
			tasks, execs, load = benchInput(mixed)
		}
		if got := alloc(tasks, execs, load); len(got) != len(tasks) {
			b.Fatalf("assigned %d of %d", len(got), len(tasks))
		}
	}
}

func BenchmarkAllocate500kTasks100Executors(b *testing.B) {
	benchAlloc(b, Allocate, false, false)
}

// WithSetup also times building the 500,000 task messages (the original
// spent minutes setting up its 500k-task run).
func BenchmarkAllocate500kTasks100ExecutorsWithSetup(b *testing.B) {
	benchAlloc(b, Allocate, false, true)
}

func BenchmarkNaiveAllocate500kTasks100Executors(b *testing.B) {
	benchAlloc(b, naiveAllocate, false, false)
}

func BenchmarkAllocate500kTasks100ExecutorsMixed(b *testing.B) {
	benchAlloc(b, Allocate, true, false)
}

func BenchmarkNaiveAllocate500kTasks100ExecutorsMixed(b *testing.B) {
	benchAlloc(b, naiveAllocate, true, false)
}
