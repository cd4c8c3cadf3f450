package loadgen

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Success is one successful write of a probe: when it was sent and when its
// answer arrived (wall clock, so times from different processes on one
// machine compare).
type Success struct{ Start, End time.Time }

// Probe keeps `writers` closed-loop writers busy until ctx ends and calls
// emit for every successful write and failed (if not nil) with the times of
// every failed one: an error or no answer within timeout, which is what a
// client of the system would have seen. Failed writes are retried after a
// short pause, so the probe sees the first moment a system takes writes
// again.
// Failover benchmarks run one probe across all trials and cut its
// successes at each fault's time.
func Probe(ctx context.Context, writers int, timeout time.Duration, op Op, emit, failed func(Success)) {
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				rctx, cancel := context.WithTimeout(ctx, timeout)
				t0 := time.Now()
				err := op(rctx, w, i)
				t1 := time.Now()
				cancel()
				if err == nil {
					emit(Success{Start: t0, End: t1})
					continue
				}
				if failed != nil && ctx.Err() == nil {
					failed(Success{Start: t0, End: t1})
				}
				select { // bounded retry rate while the system is down
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
}

// OutageWindow is how long after the first success following a fault
// Outage keeps looking for gaps.
const OutageWindow = 2 * time.Second

// Outage measures a fault at time at from a probe's successes: firstOK is
// the time from the fault to the answer of the first successful write sent
// after it; maxGap is the longest stretch without any successful answer in
// the window from the fault to 2 s after firstOK (so a hand-off whose old
// leader still answers a few writes is not reported as seamless). ok is
// false when no write succeeded after the fault.
func Outage(succ []Success, at time.Time) (firstOK, maxGap time.Duration, ok bool) {
	var first time.Time
	for _, s := range succ {
		if !s.Start.Before(at) && (first.IsZero() || s.End.Before(first)) {
			first = s.End
		}
	}
	if first.IsZero() {
		return 0, 0, false
	}
	firstOK = first.Sub(at)
	horizon := first.Add(OutageWindow)
	var ends []time.Time
	for _, s := range succ {
		if s.End.After(at) && !s.End.After(horizon) {
			ends = append(ends, s.End)
		}
	}
	sortTimes(ends)
	prev := at
	for _, e := range ends {
		if g := e.Sub(prev); g > maxGap {
			maxGap = g
		}
		prev = e
	}
	return firstOK, maxGap, true
}

func sortTimes(ts []time.Time) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
}
