package main

import (
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/state/layout"
	"github.com/indexify-go/indexify/internal/state/statedb"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// pageSize is what one scheduler pass asks an extractor for here: the
// oldest 1,000 pending tasks (the scheduler asks for what its executors can
// take; 1,000 is the size of one ingest batch).
const pageSize = 1000

// pendingRead is what pendingReads measured: one scheduler pass's read of
// the oldest pending tasks, from the maps and from the on-disk layout.
type pendingRead struct {
	mem, diskCold, diskWarm time.Duration
	passes                  int
	drainMedian, drainLast  time.Duration
}

// pendingReads times the scheduler's hottest read (the oldest pageSize
// pending tasks) on the in-memory store and on the layout in the pebble
// directory at dir (state.PendingTasksIn), then drains the queue the way
// assignments would (each pass moves the page it read to an executor, in
// one committed batch: its pending keys become deletions at the head of the
// queue, which a later scan has to step over until a compaction drops
// them) and times each pass's read.
func pendingReads(s *state.Store, dir string, items int) (pendingRead, error) {
	var p pendingRead
	want := map[string]int{benchExtractor: pageSize}
	var times []time.Duration
	for range 21 {
		t0 := time.Now()
		if got := s.PendingTasksFor(math.MaxInt64, want); len(got) != pageSize {
			return p, fmt.Errorf("pending page from memory: %d tasks, want %d", len(got), pageSize)
		}
		times = append(times, time.Since(t0))
	}
	p.mem = median(times)

	db, err := statedb.Open(statedb.Options{Dir: dir})
	if err != nil {
		return p, err
	}
	defer db.Close()
	read := func() ([]*pb.Task, time.Duration, error) {
		v := db.View()
		defer v.Close()
		t0 := time.Now()
		ts, err := state.PendingTasksIn(v, math.MaxInt64, want)
		return ts, time.Since(t0), err
	}
	first, took, err := read()
	if err != nil {
		return p, err
	}
	if len(first) != pageSize {
		return p, fmt.Errorf("pending page from the layout: %d tasks, want %d", len(first), pageSize)
	}
	p.diskCold = took
	times = times[:0]
	for range 21 {
		_, took, err := read()
		if err != nil {
			return p, err
		}
		times = append(times, took)
	}
	p.diskWarm = median(times)

	// Drain: half the queue at most, 200 passes at most.
	p.passes = min(200, items/2/pageSize)
	times = times[:0]
	for range p.passes {
		page, took, err := read()
		if err != nil {
			return p, err
		}
		times = append(times, took)
		b := db.NewBatch()
		for _, t := range page {
			nt := proto.Clone(t).(*pb.Task)
			nt.ExecutorId = "bench-executor"
			if err := layout.PutTask(b, t, nt); err != nil {
				b.Discard()
				return p, err
			}
		}
		if err := b.Commit(db.Applied()); err != nil {
			return p, err
		}
	}
	if len(times) > 0 {
		p.drainLast = times[len(times)-1]
		p.drainMedian = median(times)
	}
	return p, nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func (p pendingRead) rows() [][]string {
	return [][]string{
		{fmt.Sprintf("a scheduler pass's read of the oldest %d pending tasks, from the maps (PendingTasksFor, median of 21)", pageSize), fmt.Sprintf("%.2f ms", ms64(p.mem)), "", ""},
		{"the same read from the on-disk layout (state.PendingTasksIn: one queue scan, its entries hold the task records), first after opening / median of 21", fmt.Sprintf("%.2f ms / %.2f ms (%.1fx the maps)", ms64(p.diskCold), ms64(p.diskWarm), float64(p.diskWarm)/float64(max(p.mem, 1))), "", ""},
		{fmt.Sprintf("the same read while %d passes each assign the page they read (its queue keys deleted at the head), median / last", p.passes), fmt.Sprintf("%.2f ms / %.2f ms", ms64(p.drainMedian), ms64(p.drainLast)), "", ""},
	}
}
