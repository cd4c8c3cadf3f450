// Package loadgen is the closed-loop load generator shared by every write
// benchmark, ours and etcd's: N clients each issue one request at a time for
// a fixed duration, and every latency is kept so percentiles are exact. The
// etcd peer (a separate module, so the indexify binary never links etcd)
// imports this same package, so both systems are measured by identical code.
package loadgen

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
)

// Op performs one request for client c (its i-th); a non-nil error counts
// as a failed request.
type Op func(ctx context.Context, c, i int) error

// Config bounds a run both in time and in count.
type Config struct {
	Clients  int
	Duration time.Duration // measured phase
	Warmup   time.Duration // requests issued but not measured
	MaxOps   int           // per client; 0 = unbounded (Duration still applies)
	Timeout  time.Duration // per request (default 10s)
}

// Result is one run's outcome (JSON: the etcd peer prints it).
type Result struct {
	Clients    int       `json:"clients"`
	Ops        int       `json:"ops"`
	Errors     int       `json:"errors"`
	Seconds    float64   `json:"seconds"`
	OpsPerSec  float64   `json:"ops_per_sec"`
	P50Ms      float64   `json:"p50_ms"`
	P99Ms      float64   `json:"p99_ms"`
	MaxMs      float64   `json:"max_ms"`
	FirstError string    `json:"first_error,omitempty"`
	Latencies  []float64 `json:"-"` // ms, sorted
}

func (r Result) String() string {
	return fmt.Sprintf("clients=%d ops=%d errors=%d %.0f ops/s p50=%.2fms p99=%.2fms",
		r.Clients, r.Ops, r.Errors, r.OpsPerSec, r.P50Ms, r.P99Ms)
}

// Run drives op with cfg.Clients concurrent closed-loop clients.
func Run(ctx context.Context, cfg Config, op Op) Result {
	if cfg.Clients <= 0 {
		cfg.Clients = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	start := time.Now()
	measureFrom := start.Add(cfg.Warmup)
	end := measureFrom.Add(cfg.Duration)
	type clientOut struct {
		lat      []float64
		errs     int
		firstErr error
		last     time.Time
	}
	outs := make([]clientOut, cfg.Clients)
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &outs[c]
			for i := 0; cfg.MaxOps == 0 || i < cfg.MaxOps; i++ {
				t0 := time.Now()
				if !t0.Before(end) || ctx.Err() != nil {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
				err := op(rctx, c, i)
				cancel()
				t1 := time.Now()
				if t0.Before(measureFrom) {
					continue
				}
				o.last = t1
				if err != nil {
					o.errs++
					if o.firstErr == nil {
						o.firstErr = err
					}
					continue
				}
				o.lat = append(o.lat, float64(t1.Sub(t0))/float64(time.Millisecond))
			}
		}()
	}
	wg.Wait()
	res := Result{Clients: cfg.Clients}
	finish := measureFrom
	for _, o := range outs {
		res.Latencies = append(res.Latencies, o.lat...)
		res.Errors += o.errs
		if o.firstErr != nil && res.FirstError == "" {
			res.FirstError = o.firstErr.Error()
		}
		if o.last.After(finish) {
			finish = o.last
		}
	}
	// The phase ends when the last measured request returned, so a run cut
	// short by MaxOps is not diluted by idle time.
	res.Seconds = finish.Sub(measureFrom).Seconds()
	res.Ops = len(res.Latencies)
	if res.Seconds > 0 {
		res.OpsPerSec = float64(res.Ops) / res.Seconds
	}
	sort.Float64s(res.Latencies)
	res.P50Ms = Percentile(res.Latencies, 50)
	res.P99Ms = Percentile(res.Latencies, 99)
	if n := len(res.Latencies); n > 0 {
		res.MaxMs = res.Latencies[n-1]
	}
	return res
}

// Percentile of sorted values (nearest rank); NaN when empty.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Payload returns a deterministic printable value of n bytes (a JSON string
// literal when quoted is true, quotes included in n).
func Payload(n int, quoted bool) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[i%len(alphabet)]
	}
	if quoted && n >= 2 {
		b[0], b[n-1] = '"', '"'
	}
	return string(b)
}
