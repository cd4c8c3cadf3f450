package scheduler

import (
	"slices"
	"strings"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Allocate assigns tasks to executors, load aware: for each task it picks,
// among the executors offering the task's extractor and still below their
// max_pending_tasks (0 = no cap), the one with the fewest unfinished tasks,
// ties broken by executor id so the result is deterministic. Tasks are
// considered in the given order (callers pass oldest first). A task no
// capable executor can take is left out of the result (it stays pending).
//
// load holds each executor's current unfinished task count; it is not
// modified.
//
// Every extractor has its own min-heap of executors, but an executor that
// offers several extractors sits in several heaps and its load is shared.
// Rather than updating every heap on each assignment, heap keys are allowed to
// go stale (they can only be lower than the real load, since loads only grow
// during a run) and are refreshed lazily when a stale entry reaches the top.
func Allocate(tasks []*pb.Task, executors []*pb.Executor, load map[string]int) []*pb.Assignment {
	if len(tasks) == 0 || len(executors) == 0 {
		return nil
	}
	a := newAllocState(executors, load)
	out := make([]*pb.Assignment, 0, min(len(tasks), a.capacity()))
	// One backing array for all assignments: 500k small allocations would
	// otherwise dominate the run time.
	slab := make([]pb.Assignment, cap(out))
	var lastName string
	var h *execHeap
	for _, t := range tasks {
		if len(out) == len(slab) {
			break // every executor is full
		}
		if h == nil || t.GetExtractor() != lastName {
			lastName = t.GetExtractor()
			h = a.heapFor(lastName)
		}
		e := h.take(a)
		if e < 0 {
			continue
		}
		as := &slab[len(out)]
		as.TaskId = t.GetId()
		as.ExecutorId = a.ids[e]
		out = append(out, as)
	}
	return out
}

// allocState is the shared part of one Allocate run.
type allocState struct {
	ids    []string // executor ids, sorted: the index is the tie-break rank
	load   []int
	limit  []int // max pending tasks; 0 = unlimited
	offers map[string][]int32
	heaps  map[string]*execHeap
}

func newAllocState(executors []*pb.Executor, load map[string]int) *allocState {
	sorted := slices.Clone(executors)
	slices.SortFunc(sorted, func(x, y *pb.Executor) int { return strings.Compare(x.GetId(), y.GetId()) })
	a := &allocState{
		ids:    make([]string, len(sorted)),
		load:   make([]int, len(sorted)),
		limit:  make([]int, len(sorted)),
		offers: make(map[string][]int32),
		heaps:  make(map[string]*execHeap),
	}
	for i, e := range sorted {
		a.ids[i] = e.GetId()
		a.load[i] = load[e.GetId()]
		a.limit[i] = int(e.GetMaxPendingTasks())
		seen := map[string]bool{}
		for _, d := range e.GetExtractors() {
			if seen[d.GetName()] {
				continue // an extractor listed twice must not double the executor
			}
			seen[d.GetName()] = true
			a.offers[d.GetName()] = append(a.offers[d.GetName()], int32(i))
		}
	}
	return a
}

// capacity is the most assignments this run can make (an upper bound for
// the output's size).
func (a *allocState) capacity() int {
	total := 0
	for i, l := range a.limit {
		if l == 0 {
			return int(^uint(0) >> 1)
		}
		if l > a.load[i] {
			total += l - a.load[i]
		}
	}
	return total
}

func (a *allocState) full(e int32) bool {
	return a.limit[e] > 0 && a.load[e] >= a.limit[e]
}

func (a *allocState) heapFor(extractor string) *execHeap {
	if h, ok := a.heaps[extractor]; ok {
		return h
	}
	h := &execHeap{}
	for _, e := range a.offers[extractor] {
		if !a.full(e) {
			h.items = append(h.items, heapKey(a.load[e], e))
		}
	}
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	a.heaps[extractor] = h
	return h
}

// A heap item packs (load, executor rank) into one integer so ordering by
// load with the id tie-break is a single comparison in the hot loop. The
// load part may be stale: never above the executor's real load.
func heapKey(load int, exec int32) uint64 { return uint64(load)<<32 | uint64(uint32(exec)) }

func keyExec(k uint64) int32 { return int32(uint32(k)) }

func keyLoad(k uint64) int { return int(k >> 32) }

// execHeap is a min-heap of packed keys. It is hand-rolled rather than
// container/heap to avoid interface calls in the hot loop.
type execHeap struct{ items []uint64 }

func (h *execHeap) down(i int) {
	items := h.items
	n := len(items)
	x := items[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && items[r] < items[l] {
			m = r
		}
		if items[m] >= x {
			break
		}
		items[i] = items[m]
		i = m
	}
	items[i] = x
}

// take returns the least loaded executor that can accept one more task and
// charges it, or -1 when none can.
func (h *execHeap) take(a *allocState) int32 {
	for len(h.items) > 0 {
		top := h.items[0]
		e := keyExec(top)
		if cur := a.load[e]; keyLoad(top) != cur {
			// Another extractor's heap charged this executor: refresh.
			h.items[0] = heapKey(cur, e)
			h.down(0)
			continue
		}
		if a.full(e) {
			// Loads never drop during a run, so a full executor leaves
			// the heap for good.
			last := len(h.items) - 1
			h.items[0] = h.items[last]
			h.items = h.items[:last]
			if last > 0 {
				h.down(0)
			}
			continue
		}
		a.load[e]++
		h.items[0] = top + 1<<32
		h.down(0)
		return e
	}
	return -1
}
