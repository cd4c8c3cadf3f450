package index

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/retry"
)

// clustered makes vectors shaped like text embeddings in the way an
// inverted file depends on: topics, each a random centre (scaled by 0.6)
// plus a spread in a 32-dimensional subspace of its own (a random 384x32
// map of a normal vector, about as long as the centre), plus isotropic
// noise. Topics overlap but are not arbitrary (as random normal vectors
// are), and neighbours are not duplicates. Queries come from the same
// generator (new points, not stored ones). A model, not real embeddings:
// BENCHMARKS.md says so next to its figures.
type clustered struct {
	rng    *rand.Rand
	dim    int
	topics []topic
}

type topic struct {
	centre []float32
	basis  [][]float32 // 32 x dim
}

func newClustered(seed int64, dim, topics int) *clustered {
	c := &clustered{rng: rand.New(rand.NewSource(seed)), dim: dim}
	for i := 0; i < topics; i++ {
		tp := topic{centre: randVec(c.rng, dim)}
		for j := range tp.centre {
			tp.centre[j] *= 0.6
		}
		for j := 0; j < 32; j++ {
			tp.basis = append(tp.basis, randVec(c.rng, dim))
		}
		c.topics = append(c.topics, tp)
	}
	return c
}

func (c *clustered) next() []float32 {
	tp := c.topics[c.rng.Intn(len(c.topics))]
	v := append([]float32(nil), tp.centre...)
	for _, b := range tp.basis {
		z := float32(c.rng.NormFloat64()) * 0.18
		for j := range v {
			v[j] += z * b[j]
		}
	}
	for j := range v {
		v[j] += 0.5 * float32(c.rng.NormFloat64())
	}
	return v
}

// annIndex returns the embIndex behind an Embedded index.
func annIndex(t testing.TB, e *Embedded, ns, name string) *embIndex {
	t.Helper()
	ix, err := e.get(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// waitANN polls until the index has an approximate index trained on at
// least n points and no build is running.
func waitANN(t testing.TB, ix *embIndex, n int) *ivf {
	t.Helper()
	var x *ivf
	err := retry.PollFor(5*time.Minute, 20*time.Millisecond, func() error {
		ix.mu.RLock()
		defer ix.mu.RUnlock()
		if ix.ann == nil || ix.ann.trainedN < n || ix.building {
			return errors.New("approximate index not built yet")
		}
		x = ix.ann
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// checkIVF asserts the lists' invariants: every slot in exactly one list,
// at the position where/pos say.
func checkIVF(t *testing.T, ix *embIndex) {
	t.Helper()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	x := ix.ann
	if x == nil {
		return
	}
	for l := range x.lists {
		if len(x.lvec[l]) != len(x.lists[l])*x.dim || len(x.lnorm[l]) != len(x.lists[l]) {
			t.Fatalf("list %d: %d slots, %d vector floats, %d norms", l, len(x.lists[l]), len(x.lvec[l]), len(x.lnorm[l]))
		}
	}
	if len(x.where) != len(ix.pts) || len(x.pos) != len(ix.pts) {
		t.Fatalf("ivf tracks %d/%d slots, the index has %d", len(x.where), len(x.pos), len(ix.pts))
	}
	seen := make([]bool, len(ix.pts))
	for l, li := range x.lists {
		for p, s := range li {
			if int(s) >= len(seen) || seen[s] {
				t.Fatalf("slot %d listed twice or out of range", s)
			}
			seen[s] = true
			if x.where[s] != int32(l) || x.pos[s] != int32(p) {
				t.Fatalf("slot %d is at list %d pos %d, where/pos say %d/%d", s, l, p, x.where[s], x.pos[s])
			}
			if !eqVec(x.lvec[l][p*x.dim:(p+1)*x.dim], ix.vec(int(s))) || x.lnorm[l][p] != ix.norms[s] {
				t.Fatalf("slot %d: the list's copy of its vector differs from the store's", s)
			}
		}
	}
	for s, ok := range seen {
		if !ok {
			t.Fatalf("slot %d is in no list", s)
		}
	}
}

func loadPoints(t testing.TB, e *Embedded, ns, name string, vecs [][]float32) {
	t.Helper()
	for i := 0; i < len(vecs); i += 1000 {
		var b []Point
		for j := i; j < min(len(vecs), i+1000); j++ {
			b = append(b, Point{ContentID: fmt.Sprintf("c%06d", j), Vector: vecs[j]})
		}
		if err := e.Upsert(context.Background(), ns, name, b); err != nil {
			t.Fatal(err)
		}
	}
}

// recallAt10 compares the store's answers with the exact scan's (which the
// conformance suite checks against brute force).
func recallAt10(t *testing.T, e *Embedded, ns, name string, queries [][]float32, keep func(*Point) bool) float64 {
	t.Helper()
	ix := annIndex(t, e, ns, name)
	found, want := 0, 0
	for _, q := range queries {
		ix.mu.RLock()
		all, err := ix.exact(context.Background(), q, norm(q), 10, keep)
		var truth []Hit
		if err == nil {
			truth = ix.hits(all, 10)
		}
		ix.mu.RUnlock()
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, h := range truth {
			ids[h.ContentID] = true
		}
		want += len(ids)
		for _, h := range mustSearch(t, e, ns, name, q, 10, keep) {
			if ids[h.ContentID] {
				found++
			}
		}
	}
	return float64(found) / float64(want)
}

// At 50 000 vectors of dim 384 the store answers from its approximate
// index, and recall@10 on new queries is at least 0.95: on clustered data
// (while scanning a small share of the lists) and on random normal vectors
// (the worst case: the calibration probes as many lists as that takes).
func TestANNRecall(t *testing.T) {
	const n, dim = 50_000, 384
	for _, data := range []string{"clustered", "random"} {
		t.Run(data, func(t *testing.T) {
			var gen func() []float32
			if data == "clustered" {
				gen = newClustered(1, dim, 100).next
			} else {
				rng := rand.New(rand.NewSource(1))
				gen = func() []float32 { return randVec(rng, dim) }
			}
			vecs := make([][]float32, n)
			pts := make([]Point, n)
			for i := range vecs {
				vecs[i] = gen()
				pts[i] = Point{ContentID: fmt.Sprintf("c%06d", i), Vector: vecs[i]}
			}
			queries := make([][]float32, 50)
			for i := range queries {
				queries[i] = gen()
			}
			e := openEmbedded(t, t.TempDir())
			mustEnsure(t, e, "ns", "i", Schema{Dim: dim, Distance: Cosine})
			loadPoints(t, e, "ns", "i", vecs)
			x := waitANN(t, annIndex(t, e, "ns", "i"), defaultANN.min)
			checkIVF(t, annIndex(t, e, "ns", "i"))
			r := recallAt10(t, e, "ns", "i", queries, nil)
			t.Logf("%s: nlist %d, probe10 %d (calibration recall %.3f; used: %v), recall@10 %.3f", data, x.nlist, x.probe10, x.calRecall10, x.useful(10), r)
			if r < 0.95 {
				t.Fatalf("recall@10 = %.3f, want >= 0.95", r)
			}
			if data == "clustered" && (x.probe10 > x.nlist/4 || !x.useful(10)) {
				t.Fatalf("clustered data: probes %d of %d lists, want at most a quarter", x.probe10, x.nlist)
			}

			// A filter accepting half the points keeps the recall; a
			// selective one (1 in 250) gives exactly the exact result.
			half := func(p *Point) bool { return p.ContentID[len(p.ContentID)-1]%2 == 0 }
			if r := recallAt10(t, e, "ns", "i", queries[:20], half); r < 0.95 {
				t.Fatalf("recall@10 with a filter keeping half = %.3f, want >= 0.95", r)
			}
			rare := func(p *Point) bool {
				return p.ContentID[len(p.ContentID)-3:] == "007" || p.ContentID[len(p.ContentID)-3:] == "501" || p.ContentID[len(p.ContentID)-3:] == "900"
			}
			for i, q := range queries[:10] {
				checkHits(t, fmt.Sprintf("selective filter, query %d", i), mustSearch(t, e, "ns", "i", q, 10, rare), bruteForce(pts, q, Cosine, 10, rare))
			}
		})
	}
}

// The approximate index stays consistent while points are upserted,
// replaced and deleted during searches and during its own (re)builds: every
// search answers points with their true scores, best first, no duplicates;
// afterwards every slot is in exactly one list and recall holds.
func TestANNConcurrentUpsertSearch(t *testing.T) {
	const dim = 32
	e := openEmbedded(t, t.TempDir())
	mustEnsure(t, e, "ns", "i", Schema{Dim: dim, Distance: Cosine})
	ix := annIndex(t, e, "ns", "i")
	ix.mu.Lock()
	ix.cfg = annConfig{min: 1500, regrow: 2, target: 0.98, calibQ: 50, iters: 5, perList: 30, chunk: 500}
	ix.mu.Unlock()

	c := newClustered(2, dim, 20)
	var genMu sync.Mutex // the generator is shared by the goroutines
	gen := func() []float32 {
		genMu.Lock()
		defer genMu.Unlock()
		return c.next()
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for b := 0; b < 60; b++ {
				var pts []Point
				for j := 0; j < 100; j++ {
					pts = append(pts, Point{ContentID: fmt.Sprintf("c%05d", rng.Intn(8000)), Labels: map[string]string{"w": fmt.Sprint(w)}, Vector: gen()})
				}
				if err := e.Upsert(ctx, "ns", "i", pts); err != nil {
					errc <- err
					return
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewSource(9))
		for b := 0; b < 60; b++ {
			var ids []string
			for j := 0; j < 20; j++ {
				ids = append(ids, fmt.Sprintf("c%05d", rng.Intn(8000)))
			}
			if err := e.Delete(ctx, "ns", ids); err != nil {
				errc <- err
				return
			}
		}
	}()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for i := 0; i < 150; i++ {
				q := gen()
				var keep func(*Point) bool
				if i%3 == 0 {
					keep = func(p *Point) bool { return p.Labels["w"] == "0" }
				}
				hits, err := e.Search(ctx, "ns", "i", q, 10, keep)
				if err != nil {
					errc <- err
					return
				}
				if err := validHits(q, hits, keep); err != nil {
					errc <- err
					return
				}
			}
		}(r)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	ix.mu.RLock()
	n := len(ix.pts)
	ix.mu.RUnlock()
	x := waitANN(t, ix, n/2)
	checkIVF(t, ix)
	// A rebuild ran: the final ivf was trained on more points than the
	// first build's threshold.
	if x.trainedN < 3000 {
		t.Fatalf("final ivf trained on %d points, want a rebuild past 3000 (index holds %d)", x.trainedN, n)
	}
	var queries [][]float32
	for i := 0; i < 30; i++ {
		queries = append(queries, gen())
	}
	if r := recallAt10(t, e, "ns", "i", queries, nil); r < 0.9 {
		t.Fatalf("recall@10 after the concurrent writes = %.3f, want >= 0.9", r)
	}
}

// validHits checks a search answer on its own: at most 10 hits, best
// first, distinct ids, each score the cosine of its returned vector, each
// accepted by keep.
func validHits(q []float32, hits []Hit, keep func(*Point) bool) error {
	if len(hits) > 10 {
		return fmt.Errorf("%d hits for k=10", len(hits))
	}
	seen := map[string]bool{}
	for i, h := range hits {
		if seen[h.ContentID] {
			return fmt.Errorf("duplicate hit %s", h.ContentID)
		}
		seen[h.ContentID] = true
		want := bruteForce([]Point{h.Point}, q, Cosine, 1, nil)[0].Score
		if !near(h.Score, want) {
			return fmt.Errorf("hit %s score %v, its vector scores %v", h.ContentID, h.Score, want)
		}
		if i > 0 && hits[i-1].Score < h.Score {
			return fmt.Errorf("hits not best first: %v then %v", hits[i-1].Score, h.Score)
		}
		if keep != nil && !keep(&h.Point) {
			return fmt.Errorf("hit %s rejected by the filter", h.ContentID)
		}
	}
	return nil
}

// A reopened store replays its log, searches exactly at once, and rebuilds
// its approximate index in the background; then it answers from it with
// the same recall.
func TestANNReopen(t *testing.T) {
	const n, dim = 25_000, 64
	gen := newClustered(3, dim, 50).next
	vecs := make([][]float32, n)
	pts := make([]Point, n)
	for i := range vecs {
		vecs[i] = gen()
		pts[i] = Point{ContentID: fmt.Sprintf("c%06d", i), Vector: vecs[i]}
	}
	var queries [][]float32
	for i := 0; i < 30; i++ {
		queries = append(queries, gen())
	}
	dir := t.TempDir()
	e, err := OpenEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustEnsure(t, e, "ns", "i", Schema{Dim: dim, Distance: Cosine})
	loadPoints(t, e, "ns", "i", vecs)
	waitANN(t, annIndex(t, e, "ns", "i"), defaultANN.min)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e2 := openEmbedded(t, dir)
	if r := recallAt10(t, e2, "ns", "i", queries[:5], nil); r < 0.95 {
		t.Fatalf("recall@10 right after reopen = %.3f", r)
	}
	waitANN(t, annIndex(t, e2, "ns", "i"), n)
	checkIVF(t, annIndex(t, e2, "ns", "i"))
	if r := recallAt10(t, e2, "ns", "i", queries, nil); r < 0.95 {
		t.Fatalf("recall@10 after the rebuild = %.3f, want >= 0.95", r)
	}
	// Deleting below the threshold makes search exact again: the result is
	// brute force's, point for point.
	var ids []string
	for i := 0; i < n-5000; i++ {
		ids = append(ids, pts[i].ContentID)
	}
	if err := e2.Delete(context.Background(), "ns", ids); err != nil {
		t.Fatal(err)
	}
	checkIVF(t, annIndex(t, e2, "ns", "i"))
	for i, q := range queries[:5] {
		checkHits(t, fmt.Sprintf("query %d below the threshold", i), mustSearch(t, e2, "ns", "i", q, 10, nil), bruteForce(pts[n-5000:], q, Cosine, 10, nil))
	}
}
