package loadgen

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {99, 10}, {10, 1}, {100, 10}, {0, 1}} {
		if got := Percentile(v, c.p); got != c.want {
			t.Errorf("p%.0f = %v, want %v", c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("percentile of nothing is not NaN")
	}
}

func TestRunCountsOpsAndErrors(t *testing.T) {
	res := Run(context.Background(), Config{Clients: 3, Duration: time.Minute, MaxOps: 10},
		func(ctx context.Context, c, i int) error {
			if i%5 == 4 {
				return errors.New("boom")
			}
			return nil
		})
	if res.Ops != 24 || res.Errors != 6 || res.FirstError != "boom" {
		t.Fatalf("ops=%d errors=%d first=%q, want 24, 6, boom", res.Ops, res.Errors, res.FirstError)
	}
	if len(res.Latencies) != 24 || res.OpsPerSec <= 0 {
		t.Fatalf("latencies %d, rate %v", len(res.Latencies), res.OpsPerSec)
	}
}

func TestPayloadSizeAndQuotes(t *testing.T) {
	p := Payload(256, true)
	if len(p) != 256 || p[0] != '"' || p[255] != '"' {
		t.Fatalf("payload %q", p)
	}
	if len(Payload(4096, false)) != 4096 {
		t.Fatal("size")
	}
}

func TestOutage(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	succ := []Success{
		{at(-20), at(-10)}, // before the fault
		{at(-5), at(30)},   // sent before the fault, answered after: not a "first write"
		{at(100), at(900)}, // first write sent after the fault
		{at(950), at(960)},
		{at(1000), at(1010)},
	}
	first, gap, ok := Outage(succ, at(0))
	if !ok || first != 900*time.Millisecond {
		t.Fatalf("first=%v ok=%v, want 900ms", first, ok)
	}
	// Answers at 30, 900, 960, 1010: the longest stretch is 30 -> 900.
	if gap != 870*time.Millisecond {
		t.Fatalf("gap=%v, want 870ms", gap)
	}
	if _, _, ok := Outage(succ, at(2000)); ok {
		t.Fatal("outage with no later success reported ok")
	}
}

func TestProbeStopsAndRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n, fails := 0, 0
	Probe(ctx, 1, time.Second, func(ctx context.Context, c, i int) error {
		if i == 0 {
			return errors.New("down")
		}
		if i >= 3 {
			cancel()
		}
		return nil
	}, func(Success) { n++ }, func(Success) { fails++ })
	if n != 3 || fails != 1 {
		t.Fatalf("%d successes and %d failures, want 3 and 1 (one failure retried)", n, fails)
	}
}
