package state

// The pending index: unfinished, unassigned tasks per extractor, kept in
// TaskOrder (created_at, then id) by the FSM as it writes tasks. It is
// derived state like every other index here: never in a snapshot, rebuilt
// by Restore (through putTask), and its order is a function of the tasks
// alone, so the same log gives the same index on every replica.
//
// A scheduler pass reads it in order and stops once it has what the
// executors can take (PendingTasksFor), instead of copying and sorting the
// whole pending set on every pass.

import (
	"math"
	"slices"
	"sort"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// chunkMax bounds one chunk of a taskList: an insert or a removal moves at
// most this many pointers, and finding a chunk is a binary search over
// n/chunkMax..4n/chunkMax chunks.
const chunkMax = 512

// taskList is a set of tasks in TaskOrder, stored as a list of sorted
// chunks (a two-level B+ tree without the inner nodes). Tasks created by
// the scheduler arrive in order, so the common insert is an append to the
// last chunk and the common removal (allocation takes the oldest) is at the
// front of the first.
type taskList struct {
	chunks [][]*pb.Task
	n      int
}

// chunkFor is the index of the chunk t belongs in: the first whose last
// task is not before t, or the last chunk when t is after every task.
func (l *taskList) chunkFor(t *pb.Task) int {
	last := len(l.chunks) - 1
	if c := l.chunks[last]; TaskOrder(c[len(c)-1], t) < 0 {
		return last // the append fast path
	}
	return sort.Search(last, func(i int) bool {
		c := l.chunks[i]
		return TaskOrder(c[len(c)-1], t) >= 0
	})
}

func (l *taskList) insert(t *pb.Task) {
	l.n++
	if len(l.chunks) == 0 {
		l.chunks = append(l.chunks, append(make([]*pb.Task, 0, 16), t))
		return
	}
	ci := l.chunkFor(t)
	c := l.chunks[ci]
	i, _ := slices.BinarySearchFunc(c, t, TaskOrder)
	c = slices.Insert(c, i, t)
	if len(c) <= chunkMax {
		l.chunks[ci] = c
		return
	}
	// Split in two halves; the right half gets its own array so that
	// appending to the left one never overwrites it.
	half := len(c) / 2
	right := make([]*pb.Task, len(c)-half, chunkMax)
	copy(right, c[half:])
	clear(c[half:])
	l.chunks[ci] = c[:half]
	l.chunks = slices.Insert(l.chunks, ci+1, right)
}

// remove takes t (the very message inserted) out; it reports whether t was
// there.
func (l *taskList) remove(t *pb.Task) bool {
	if len(l.chunks) == 0 {
		return false
	}
	ci := l.chunkFor(t)
	c := l.chunks[ci]
	i, found := slices.BinarySearchFunc(c, t, TaskOrder)
	if !found || c[i] != t {
		return false
	}
	l.n--
	c = slices.Delete(c, i, i+1)
	switch {
	case len(c) == 0:
		l.chunks = slices.Delete(l.chunks, ci, ci+1)
	case len(c) < chunkMax/4 && ci+1 < len(l.chunks) && len(c)+len(l.chunks[ci+1]) <= chunkMax:
		// Merge a small chunk with the next one, so removals in the
		// middle cannot leave many near-empty chunks behind.
		c = append(c, l.chunks[ci+1]...)
		l.chunks[ci] = c
		l.chunks = slices.Delete(l.chunks, ci+1, ci+2)
	default:
		l.chunks[ci] = c
	}
	return true
}

// each calls fn on the tasks in order until it returns false.
func (l *taskList) each(fn func(*pb.Task) bool) {
	for _, c := range l.chunks {
		for _, t := range c {
			if !fn(t) {
				return
			}
		}
	}
}

// pendingIndex is the pending tasks by extractor.
type pendingIndex map[string]*taskList

func (p pendingIndex) add(t *pb.Task) {
	l := p[t.Extractor]
	if l == nil {
		l = &taskList{}
		p[t.Extractor] = l
	}
	l.insert(t)
}

func (p pendingIndex) remove(t *pb.Task) {
	if l := p[t.Extractor]; l != nil && l.remove(t) && l.n == 0 {
		delete(p, t.Extractor)
	}
}

func (p pendingIndex) len() int {
	n := 0
	for _, l := range p {
		n += l.n
	}
	return n
}

// AllPending asks PendingTasksFor for every eligible task of an extractor.
const AllPending = math.MaxInt

// PendingTasksFor returns pending tasks (unfinished, unassigned) whose
// not_before is at or before nowMs, oldest first (TaskOrder) across all
// extractors: for each extractor in want, at most want[extractor] of its
// oldest such tasks (AllPending: all of them). Only what is returned is
// copied; nothing is sorted.
//
// The scheduler asks for as many tasks of an extractor as the executors
// offering it can still take: a task of an extractor beyond that number
// could not be assigned in this pass anyway.
func (s *Store) PendingTasksFor(nowMs int64, want map[string]int) []*pb.Task {
	names := make([]string, 0, len(want))
	for x, n := range want {
		if n > 0 {
			names = append(names, x)
		}
	}
	slices.Sort(names) // deterministic merge on equal keys (there are none: ids are unique)
	lists := make([][]*pb.Task, 0, len(names))
	total := 0
	s.mu.RLock()
	for _, x := range names {
		l := s.d.pendingIdx[x]
		if l == nil {
			continue
		}
		n := want[x]
		out := make([]*pb.Task, 0, min(n, l.n))
		l.each(func(t *pb.Task) bool {
			if t.NotBefore <= nowMs {
				out = append(out, t)
			}
			return len(out) < n
		})
		if len(out) > 0 {
			lists = append(lists, out)
			total += len(out)
		}
	}
	s.mu.RUnlock()
	return mergeOrdered(lists, total)
}

// PendingTasks returns every pending task (unfinished, unassigned), oldest
// first (TaskOrder).
func (s *Store) PendingTasks() []*pb.Task {
	s.mu.RLock()
	lists := make([][]*pb.Task, 0, len(s.d.pendingIdx))
	total := 0
	for _, l := range s.d.pendingIdx {
		out := make([]*pb.Task, 0, l.n)
		l.each(func(t *pb.Task) bool { out = append(out, t); return true })
		lists = append(lists, out)
		total += len(out)
	}
	s.mu.RUnlock()
	return mergeOrdered(lists, total)
}

// mergeOrdered merges lists each in TaskOrder into one. There are as many
// lists as extractors with pending tasks (a handful), so the smallest head
// is found by a linear scan.
func mergeOrdered(lists [][]*pb.Task, total int) []*pb.Task {
	switch len(lists) {
	case 0:
		return nil
	case 1:
		return lists[0]
	}
	out := make([]*pb.Task, 0, total)
	for len(lists) > 0 {
		m := 0
		for i := 1; i < len(lists); i++ {
			if TaskOrder(lists[i][0], lists[m][0]) < 0 {
				m = i
			}
		}
		out = append(out, lists[m][0])
		if lists[m] = lists[m][1:]; len(lists[m]) == 0 {
			lists = slices.Delete(lists, m, m+1)
		}
	}
	return out
}
