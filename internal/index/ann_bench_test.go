package index

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// annBenchSizes are the index sizes of the approximate-index benchmarks:
// INDEX_BENCH_SIZES (comma separated) or 100k and 1M.
func annBenchSizes(b *testing.B) []int {
	s := os.Getenv("INDEX_BENCH_SIZES")
	if s == "" {
		return []int{100_000, 1_000_000}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			b.Fatalf("INDEX_BENCH_SIZES: %v", err)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkEmbeddedANN measures the embedded store's approximate index
// against its exact scan in the same run, on the same index: build time
// and the ivf's memory, then 200 queries (new vectors from the data's
// generator) alternating exact and approximate, p50/p99 of each, recall@10
// of the approximate answers against the exact ones; then the same with a
// filter accepting half the points (50 queries). Dim 384, cosine, k=10.
// data=clustered is newClustered (1000 topics at 1M, n/1000 in general),
// data=random is normal vectors (no structure: the worst case).
//
//	go test -run '^$' -bench EmbeddedANN -benchtime 1x -timeout 60m ./internal/index
func BenchmarkEmbeddedANN(b *testing.B) {
	for _, data := range []string{"clustered", "random"} {
		for _, n := range annBenchSizes(b) {
			b.Run(fmt.Sprintf("data=%s/n=%d", data, n), func(b *testing.B) {
				const dim = 384
				var gen func() []float32
				if data == "clustered" {
					gen = newClustered(1, dim, max(10, n/1000)).next
				} else {
					rng := rand.New(rand.NewSource(1))
					gen = func() []float32 { return randVec(rng, dim) }
				}
				ix := &embIndex{schema: Schema{Dim: dim, Distance: Cosine}, slot: map[string]int{}, f: nopFile(b), cfg: defaultANN}
				batch := make([]Point, 0, 10_000)
				for i := 0; i < n; i++ {
					batch = append(batch, Point{ContentID: fmt.Sprintf("c%07d", i), Vector: gen()})
					if len(batch) == cap(batch) {
						ix.apply(batch, nil)
						batch = batch[:0]
					}
				}
				ix.apply(batch, nil)
				queries := make([][]float32, 200)
				for i := range queries {
					queries[i] = gen()
				}
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				before := ms.HeapAlloc
				t0 := time.Now()
				ix.building = true
				ix.buildANN()
				build := time.Since(t0)
				runtime.GC()
				runtime.ReadMemStats(&ms)
				if ix.ann == nil {
					b.Fatal("no approximate index was built")
				}
				x := ix.ann
				b.Logf("%s n=%d: build %v, nlist %d, probe10 %d (calibration recall@10 %.3f), ivf memory %.1f MB, vectors %.0f MB",
					data, n, build.Round(time.Millisecond), x.nlist, x.probe10, x.calRecall10,
					float64(int64(ms.HeapAlloc)-int64(before))/1e6, float64(4*len(ix.vecs))/1e6)

				ctx := context.Background()
				exactSearch := func(q []float32, keep func(*Point) bool) []Hit {
					ix.mu.RLock()
					defer ix.mu.RUnlock()
					all, err := ix.exact(ctx, q, norm(q), 10, keep)
					if err != nil {
						b.Fatal(err)
					}
					return ix.hits(all, 10)
				}
				// CPU time of the process during each search (nothing else
				// runs in it meanwhile): what the search costs, apart from
				// the time the machine's other jobs take from it.
				var exCPU, apCPU time.Duration
				run := func(qs [][]float32, keep func(*Point) bool) (ex, ap []time.Duration, recall float64) {
					found, want := 0, 0
					for _, q := range qs {
						c0, t1 := cpuTime(b), time.Now()
						truth := exactSearch(q, keep)
						ex = append(ex, time.Since(t1))
						c1, t2 := cpuTime(b), time.Now()
						exCPU += c1 - c0
						got, err := ix.search(ctx, q, 10, keep)
						ap = append(ap, time.Since(t2))
						apCPU += cpuTime(b) - c1
						if err != nil {
							b.Fatal(err)
						}
						ids := map[string]bool{}
						for _, h := range truth {
							ids[h.ContentID] = true
						}
						want += len(truth)
						for _, h := range got {
							if ids[h.ContentID] {
								found++
							}
						}
					}
					return ex, ap, float64(found) / float64(want)
				}
				// The work of a search: points scored, against n for the exact scan.
				scored := 0
				for _, q := range queries {
					ix.mu.RLock()
					_, sc, _, err := ix.annSearch(ctx, x, q, norm(q), 10, nil)
					ix.mu.RUnlock()
					if err != nil {
						b.Fatal(err)
					}
					scored += sc
				}
				longest := 0
				for _, l := range x.lists {
					longest = max(longest, len(l))
				}
				b.Logf("approximate search scores %.0f points per query (%.1f%% of the index); longest list %d, mean %d",
					float64(scored)/float64(len(queries)), 100*float64(scored)/float64(len(queries))/float64(n), longest, n/x.nlist)
				b.ResetTimer()
				ex, ap, recall := run(queries, nil)
				b.ReportMetric(float64(exCPU)/1e6/float64(len(queries)), "exact-cpu-ms/query")
				b.ReportMetric(float64(apCPU)/1e6/float64(len(queries)), "ann-cpu-ms/query")
				half := func(p *Point) bool { return p.ContentID[len(p.ContentID)-1]%2 == 0 }
				fex, fap, frecall := run(queries[:50], half)
				b.StopTimer()
				ms2 := func(d []time.Duration, p float64) float64 { return float64(percentile(d, p)) / 1e6 }
				b.ReportMetric(ms2(ex, 0.5), "exact-p50-ms")
				b.ReportMetric(ms2(ex, 0.99), "exact-p99-ms")
				b.ReportMetric(ms2(ap, 0.5), "ann-p50-ms")
				b.ReportMetric(ms2(ap, 0.99), "ann-p99-ms")
				b.ReportMetric(recall, "recall@10")
				b.ReportMetric(ms2(fex, 0.99), "filtered-exact-p99-ms")
				b.ReportMetric(ms2(fap, 0.99), "filtered-ann-p99-ms")
				b.ReportMetric(frecall, "filtered-recall@10")
				b.ReportMetric(build.Seconds(), "build-s")
				b.ReportMetric(float64(x.probe10), "probe10")
				b.ReportMetric(float64(scored)/float64(len(queries)), "ann-scored/query")
				b.ReportMetric(float64(x.nlist), "nlist")
			})
		}
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := 1; i < len(s); i++ { // insertion sort: a few hundred entries
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// BenchmarkEmbeddedOpen measures a restart at n points (dim 384,
// clustered): the log written through Upsert (the approximate index
// disabled meanwhile), the store closed, then OpenEmbedded's time (the log
// replay: searches are exact from then on) and the time until the
// approximate index rebuilt in the background is serving.
//
//	INDEX_BENCH_SIZES=1000000 go test -run '^$' -bench EmbeddedOpen -benchtime 1x -timeout 60m ./internal/index
func BenchmarkEmbeddedOpen(b *testing.B) {
	for _, n := range annBenchSizes(b) {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			e, err := OpenEmbedded(dir)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := e.EnsureIndex(ctx, "ns", "i", Schema{Dim: 384, Distance: Cosine}); err != nil {
				b.Fatal(err)
			}
			ix := annIndex(b, e, "ns", "i")
			ix.mu.Lock()
			ix.cfg.disabled = true
			ix.mu.Unlock()
			gen := newClustered(1, 384, max(10, n/1000)).next
			for i := 0; i < n; i += 1000 {
				var pts []Point
				for j := i; j < min(n, i+1000); j++ {
					pts = append(pts, Point{ContentID: fmt.Sprintf("c%07d", j), Text: "a chunk of some length, a sentence or two of text", Vector: gen()})
				}
				if err := e.Upsert(ctx, "ns", "i", pts); err != nil {
					b.Fatal(err)
				}
			}
			if err := e.Close(); err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			b.ResetTimer()
			t0 := time.Now()
			e2, err := OpenEmbedded(dir)
			if err != nil {
				b.Fatal(err)
			}
			open := time.Since(t0)
			waitANN(b, annIndex(b, e2, "ns", "i"), n)
			ready := time.Since(t0)
			b.StopTimer()
			e2.Close()
			b.ReportMetric(open.Seconds(), "open-s")
			b.ReportMetric(ready.Seconds(), "ann-ready-s")
		})
	}
}
