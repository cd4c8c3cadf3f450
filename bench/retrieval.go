package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/indexify-go/indexify/internal/index"
	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// The retrieval suite (issue 12): vector search latency and recall@10,
// the embedded store (exact search) vs a real Weaviate on the same machine,
// both through internal/index's Store; bulk indexing rate of each; and
// upload -> searchable on `indexify dev`.

const (
	vecDim     = 384
	vecBatch   = 1000 // points per Upsert (the Weaviate store sends 500 per request)
	recallK    = 10
	searchNS   = "bench"
	searchName = "vectors"
)

// vecSet is n random vectors (normal components, a hard case for an
// approximate index: no clusters to exploit) and the queries.
type vecSet struct {
	vecs    [][]float32
	norms   []float64
	queries [][]float32
}

func makeVecs(n, q int) *vecSet {
	rng := rand.New(rand.NewSource(1))
	gen := func() []float32 {
		v := make([]float32, vecDim)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	s := &vecSet{vecs: make([][]float32, n), queries: make([][]float32, q)}
	s.norms = make([]float64, n)
	for i := range s.vecs {
		s.vecs[i] = gen()
		s.norms[i] = norm(s.vecs[i])
	}
	for i := range s.queries {
		s.queries[i] = gen()
	}
	return s
}

// exactTop is the ground truth: the ids of the k vectors among the first
// n with the highest cosine similarity to q, by brute force here (not by
// either store), split over two goroutines.
func (s *vecSet) exactTop(q []float32, n, k int) map[string]bool {
	type cand struct {
		i     int
		score float64
	}
	qn := norm(q)
	parts := make([][]cand, 2)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			var best []cand
			for i := p; i < n; i += len(parts) {
				v := s.vecs[i]
				var dot float64
				for j, c := range v {
					dot += float64(c) * float64(q[j])
				}
				sc := dot / (s.norms[i] * qn)
				if len(best) < k || sc > best[len(best)-1].score {
					best = append(best, cand{i, sc})
					sort.Slice(best, func(a, b int) bool { return best[a].score > best[b].score })
					if len(best) > k {
						best = best[:k]
					}
				}
			}
			parts[p] = best
		}(p)
	}
	wg.Wait()
	all := append(parts[0], parts[1]...)
	sort.Slice(all, func(a, b int) bool { return all[a].score > all[b].score })
	out := map[string]bool{}
	for _, c := range all[:min(k, len(all))] {
		out[vecID(c.i)] = true
	}
	return out
}

func norm(v []float32) float64 {
	var x float64
	for _, c := range v {
		x += float64(c) * float64(c)
	}
	return math.Sqrt(x)
}

func vecID(i int) string { return fmt.Sprintf("v%07d", i) }

// load upserts vectors [from, n) in batches until done or the deadline
// passes, and returns how many are in the index and the write time.
func load(ctx context.Context, st index.Store, s *vecSet, from, n int, deadline time.Time) (int, time.Duration, error) {
	var took time.Duration
	batch := make([]index.Point, 0, vecBatch)
	i := from
	for i < n {
		if time.Now().After(deadline) {
			break
		}
		batch = batch[:0]
		for ; i < n && len(batch) < vecBatch; i++ {
			batch = append(batch, index.Point{ContentID: vecID(i), Text: "a chunk of some length, a sentence or two of text", Vector: s.vecs[i]})
		}
		t0 := time.Now()
		if err := st.Upsert(ctx, searchNS, searchName, batch); err != nil {
			return i - len(batch), took, err
		}
		took += time.Since(t0)
	}
	return i, took, nil
}

type storeFigures struct {
	n          int // vectors in the index
	rate       float64
	p50, p99   time.Duration
	recall     float64
	importNote string
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func retrievalSuite(r *runner, o options) (string, error) {
	ctx := context.Background()
	sizes := []int{100_000, 1_000_000}
	searches := 200
	nq := 50
	if o.quick {
		sizes, searches, nq = []int{2_000}, 20, 10
	}
	srv := harness.StartWeaviate(r)
	var b strings.Builder
	b.WriteString("## Retrieval: vector search, embedded store vs Weaviate (same machine, same vectors)\n\n")
	b.WriteString(fmt.Sprintf("Both through `internal/index`'s `Store` (what the API server calls): the embedded store (exact search over packed vectors, durable log fsynced per batch) and Weaviate v1.35.2 (HNSW, defaults, synchronous indexing, through its Go client; one importer). "+
		"Random vectors of dim %d (normal components), cosine, k=%d, no filter. Bulk indexing: batches of %d points through `Upsert`, one client goroutine, time in `Upsert` only. "+
		"recall@10 is against a brute-force search done by the benchmark itself over the same %d queries. Latency: %d searches per store, alternating embedded and Weaviate query by query so both see the same machine load; Weaviate's includes the GraphQL round trip on loopback. "+
		"Weaviate's import is bounded by `--weaviate-import-budget` (%s): when it runs out, the row says how many vectors Weaviate holds and its figures are at that size.\n\n",
		vecDim, recallK, vecBatch, nq, searches, o.weaviateBudget))
	var rows [][]string
	var profile string
	for si, n := range sizes {
		slog.Info("retrieval: generating vectors", "n", n)
		s := makeVecs(n, nq)
		emb, err := index.OpenEmbedded(r.TempDir())
		if err != nil {
			return "", err
		}
		w, err := index.OpenWeaviate(srv.URL())
		if err != nil {
			return "", err
		}
		for _, st := range []index.Store{emb, w} {
			_ = st.DropIndex(ctx, searchNS, searchName)
			if err := st.EnsureIndex(ctx, searchNS, searchName, index.Schema{Dim: vecDim, Distance: index.Cosine}); err != nil {
				return "", err
			}
		}
		var ef, wf storeFigures
		slog.Info("retrieval: embedded import", "n", n)
		got, took, err := load(ctx, emb, s, 0, n, time.Now().Add(24*time.Hour))
		if err != nil {
			return "", err
		}
		ef.n, ef.rate = got, float64(got)/took.Seconds()
		slog.Info("retrieval: weaviate import", "n", n, "budget", o.weaviateBudget)
		got, took, err = load(ctx, w, s, 0, n, time.Now().Add(o.weaviateBudget))
		if err != nil {
			return "", err
		}
		wf.n, wf.rate = got, float64(got)/took.Seconds()
		if wf.n < n {
			wf.importNote = fmt.Sprintf(" (import stopped at %d of %d by the budget)", wf.n, n)
		}
		slog.Info("retrieval: ground truth", "queries", nq)
		truthE := make([]map[string]bool, nq)
		truthW := make([]map[string]bool, nq)
		for i, q := range s.queries {
			truthE[i] = s.exactTop(q, ef.n, recallK)
			truthW[i] = truthE[i]
			if wf.n != ef.n {
				truthW[i] = s.exactTop(q, wf.n, recallK)
			}
		}
		recall := func(st index.Store, truth []map[string]bool) (float64, error) {
			found := 0
			for i, q := range s.queries {
				hits, err := st.Search(ctx, searchNS, searchName, q, recallK, nil)
				if err != nil {
					return 0, err
				}
				for _, h := range hits {
					if truth[i][h.ContentID] {
						found++
					}
				}
			}
			return float64(found) / float64(recallK*nq), nil
		}
		if ef.recall, err = recall(emb, truthE); err != nil {
			return "", err
		}
		if wf.recall, err = recall(w, truthW); err != nil {
			return "", err
		}
		// When Weaviate's import stopped short, an embedded index of the
		// same first wf.n vectors gives a like-for-like pair.
		var same index.Store
		var sf storeFigures
		if wf.n < ef.n && wf.n > 0 {
			e2, err := index.OpenEmbedded(r.TempDir())
			if err != nil {
				return "", err
			}
			defer e2.Close()
			if err := e2.EnsureIndex(ctx, searchNS, searchName, index.Schema{Dim: vecDim, Distance: index.Cosine}); err != nil {
				return "", err
			}
			got, took, err := load(ctx, e2, s, 0, wf.n, time.Now().Add(24*time.Hour))
			if err != nil {
				return "", err
			}
			sf.n, sf.rate = got, float64(got)/took.Seconds()
			if sf.recall, err = recall(e2, truthW); err != nil {
				return "", err
			}
			same = e2
		}
		slog.Info("retrieval: latency", "searches", searches)
		var le, lw, ls []time.Duration
		var stopProf func() string
		if si == len(sizes)-1 && o.profile {
			stopProf = startCPUProfile(r)
		}
		for i := 0; i < searches; i++ {
			q := s.queries[i%nq]
			t0 := time.Now()
			if _, err := emb.Search(ctx, searchNS, searchName, q, recallK, nil); err != nil {
				return "", err
			}
			le = append(le, time.Since(t0))
			t0 = time.Now()
			if _, err := w.Search(ctx, searchNS, searchName, q, recallK, nil); err != nil {
				return "", err
			}
			lw = append(lw, time.Since(t0))
			if same != nil {
				t0 = time.Now()
				if _, err := same.Search(ctx, searchNS, searchName, q, recallK, nil); err != nil {
					return "", err
				}
				ls = append(ls, time.Since(t0))
			}
		}
		if stopProf != nil {
			profile = stopProf()
		}
		ef.p50, ef.p99 = percentile(le, 0.5), percentile(le, 0.99)
		wf.p50, wf.p99 = percentile(lw, 0.5), percentile(lw, 0.99)
		row := func(label string, f storeFigures, vsW bool) []string {
			r := []string{num(float64(n)), label, fmt.Sprint(f.n), msd(f.p50), msd(f.p99), fmt.Sprintf("%.3f", f.recall), num(f.rate), "", ""}
			if vsW {
				r[7], r[8] = ratio(float64(wf.p99), float64(f.p99)), ratio(f.rate, wf.rate)
			}
			return r
		}
		rows = append(rows, row("embedded (exact)", ef, same == nil))
		if same != nil {
			sf.p50, sf.p99 = percentile(ls, 0.5), percentile(ls, 0.99)
			rows = append(rows, row("embedded (exact), same vectors as Weaviate", sf, true))
		}
		rows = append(rows, row("Weaviate (HNSW)"+wf.importNote, wf, false))
		_ = emb.DropIndex(ctx, searchNS, searchName)
		_ = w.DropIndex(ctx, searchNS, searchName)
		emb.Close()
		w.Close()
	}
	b.WriteString(table([]string{"vectors", "store", "vectors in index", "p50 ms", "p99 ms", "recall@10", "bulk indexing vectors/s", "p99 Weaviate/embedded", "indexing rate embedded/Weaviate"}, rows))
	b.WriteString("\n(Ratios compare indexes of the same vectors only. \"p99 Weaviate/embedded\" above 1x means the embedded store's p99 is lower.)\n")
	if profile != "" {
		b.WriteString("\n### CPU profile of the bench process during the searches at the largest size (`go tool pprof -top`)\n\nThe embedded store runs in this process; Weaviate's CPU is in its own process and not in this profile.\n\n```\n" + profile + "\n```\n")
	}

	up, err := uploadToSearchable(r, o)
	if err != nil {
		return "", err
	}
	b.WriteString("\n" + up)
	return b.String(), nil
}

const searchableGraph = `name: fresh
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 400, overlap: 0}
  - extractor: tensorlake/lexical-embedding
    name: embeddings
    content_source: chunks
`

// uploadToSearchable measures, on `indexify dev` (embedded stores, its own
// executor), the time from the upload's answer to the first search that
// returns the chunk, one upload at a time (light load).
func uploadToSearchable(r *runner, o options) (string, error) {
	trials := 50
	if o.quick {
		trials = 5
	}
	dev := harness.StartDev(r, r.TempDir())
	api := dev.API
	harness.Eventually(r, 60*time.Second, "executor registered", func() error {
		code, body, err := api.Do(context.Background(), http.MethodGet, "/executors", "", nil)
		if err != nil || code != 200 || !strings.Contains(string(body), "tensorlake/lexical-embedding") {
			return fmt.Errorf("GET /executors: %d %v %s", code, err, body)
		}
		return nil
	})
	code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/default/extraction_graphs", "application/x-yaml", strings.NewReader(searchableGraph))
	if err != nil || code != 200 {
		return "", fmt.Errorf("create graph: %d %v %s", code, err, body)
	}
	const idx = "fresh.embeddings.embedding"
	var lat []time.Duration
	polls := 0
	for i := 0; i < trials; i++ {
		token := fmt.Sprintf("zebratoken%dx%d", i, time.Now().UnixNano()%1_000_000)
		text := "A short note about benchmarks, number " + fmt.Sprint(i) + ", with the marker word " + token + " in it."
		payload := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"n.txt\"\r\nContent-Type: text/plain\r\n\r\n" + text + "\r\n--b--\r\n"
		code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/default/extraction_graphs/fresh/extract", "multipart/form-data; boundary=b", strings.NewReader(payload))
		if err != nil || code/100 != 2 {
			return "", fmt.Errorf("upload: %d %v %s", code, err, body)
		}
		t0 := time.Now()
		k := 1
		req, _ := json.Marshal(wire.SearchRequest{Query: token, K: &k})
		found := false
		for time.Since(t0) < 20*time.Second {
			polls++
			code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/default/indexes/"+idx+"/search", "application/json", strings.NewReader(string(req)))
			if err != nil || code != 200 {
				return "", fmt.Errorf("search: %d %v %s", code, err, body)
			}
			var res wire.SearchResponse
			if err := json.Unmarshal(body, &res); err != nil {
				return "", err
			}
			if len(res.Results) > 0 && strings.Contains(res.Results[0].Text, token) {
				found = true
				break
			}
		}
		if !found {
			return "", fmt.Errorf("upload %d not searchable after 20 s", i)
		}
		lat = append(lat, time.Since(t0))
	}
	var out strings.Builder
	out.WriteString("### Upload -> searchable on `indexify dev` (light load)\n\n")
	out.WriteString(fmt.Sprintf("Graph `chunks (tensorlake/chunk-extractor) -> embeddings (tensorlake/lexical-embedding)` on `indexify dev` (embedded stores, its built-in executor). One upload at a time, %d uploads of a ~90-byte text file with a unique word; the clock starts when the upload answers and stops when a search for that word (k=1, polled back to back, %d searches in all) first returns the chunk: two tasks (chunk, then embed) and the feature write to the index.\n\n", trials, polls))
	out.WriteString(table([]string{"setup", "uploads", "p50 ms", "p99 ms", "max ms"},
		[][]string{{"`indexify dev` (1 node), embedded index", fmt.Sprint(trials), msd(percentile(lat, 0.5)), msd(percentile(lat, 0.99)), msd(percentile(lat, 1))}}))
	return out.String(), nil
}
