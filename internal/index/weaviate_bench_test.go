package index

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// BenchmarkWeaviateSearch is BenchmarkEmbeddedSearch's counterpart on a real
// Weaviate on this machine: import rate through Upsert (batches of 1000
// points, 500 per request), recall@10 against exact search, and p50/p99
// latency of Search (k=10, no filter) including the client.
//
// INDEXIFY_BENCH_WEAVIATE_N sets the number of vectors (default 100000:
// the import alone took 10-30 minutes on this shared machine).
//
//	go test -run '^$' -bench WeaviateSearch -benchtime 200x -timeout 60m ./internal/index
func BenchmarkWeaviateSearch(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("INDEXIFY_BENCH_WEAVIATE_N")); err == nil && v > 0 {
		n = v
	}
	{
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			const dim = 384
			srv := harness.StartWeaviate(b)
			w, err := OpenWeaviate(srv.URL())
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := w.EnsureIndex(ctx, "ns", "i", Schema{Dim: dim, Distance: Cosine}); err != nil {
				b.Fatal(err)
			}
			ix := &embIndex{schema: Schema{Dim: dim, Distance: Cosine}, slot: map[string]int{}, f: nopFile(b)}
			rng := rand.New(rand.NewSource(1))
			batch := make([]Point, 0, 1000)
			var took time.Duration
			for i := 0; i < n; i++ {
				batch = append(batch, Point{ContentID: fmt.Sprintf("c%d", i), Vector: randVec(rng, dim)})
				if len(batch) == cap(batch) || i == n-1 {
					t0 := time.Now()
					if err := w.Upsert(ctx, "ns", "i", batch); err != nil {
						b.Fatal(err)
					}
					took += time.Since(t0)
					ix.apply(batch, nil)
					batch = batch[:0]
				}
			}
			queries := make([][]float32, 50)
			found := 0
			for i := range queries {
				queries[i] = randVec(rng, dim)
				exact, err := ix.search(ctx, queries[i], 10, nil)
				if err != nil {
					b.Fatal(err)
				}
				want := map[string]bool{}
				for _, h := range exact {
					want[h.ContentID] = true
				}
				got, err := w.Search(ctx, "ns", "i", queries[i], 10, nil)
				if err != nil {
					b.Fatal(err)
				}
				for _, h := range got {
					if want[h.ContentID] {
						found++
					}
				}
			}
			importRate, recall := float64(n)/took.Seconds(), float64(found)/float64(10*len(queries))
			// A nested benchmark, so the import above runs once, not once
			// per b.N the framework tries.
			b.Run("search", func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					if _, err := w.Search(ctx, "ns", "i", queries[i%len(queries)], 10, nil); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				b.StopTimer()
				reportPercentiles(b, lat)
				b.ReportMetric(importRate, "import-vectors/s")
				b.ReportMetric(recall, "recall@10")
			})
		})
	}
}
