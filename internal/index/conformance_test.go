package index

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strconv"
	"sync"
	"testing"
)

// backend gives each subtest a Store over fresh (or freshly namespaced)
// storage, and reopen: a new Store over the same storage, used after the
// first one is closed to prove persistence.
type backend func(t *testing.T) (s Store, reopen func() Store)

// conformance is the behaviour every Store implementation must have; it runs
// against the embedded store and against a real Weaviate.
func conformance(t *testing.T, open backend) {
	ctx := context.Background()
	cos := Schema{Dim: 3, Distance: Cosine}

	t.Run("EnsureIndex", func(t *testing.T) {
		s, _ := open(t)
		ns := nsOf(t)
		if err := s.EnsureIndex(ctx, ns, "g.p.embedding", cos); err != nil {
			t.Fatal(err)
		}
		if err := s.EnsureIndex(ctx, ns, "g.p.embedding", cos); err != nil {
			t.Fatalf("second EnsureIndex with the same schema: %v", err)
		}
		if err := s.EnsureIndex(ctx, ns, "g.p.embedding", Schema{Dim: 4, Distance: Cosine}); err == nil {
			t.Fatal("EnsureIndex with another dimension succeeded")
		}
		if err := s.EnsureIndex(ctx, ns, "g.p.embedding", Schema{Dim: 3, Distance: Dot}); err == nil {
			t.Fatal("EnsureIndex with another distance succeeded")
		}
		if err := s.EnsureIndex(ctx, ns, "bad", Schema{Dim: 0, Distance: Cosine}); err == nil {
			t.Fatal("EnsureIndex with dimension 0 succeeded")
		}
		if err := s.EnsureIndex(ctx, ns, "bad", Schema{Dim: 3, Distance: "manhattan"}); err == nil {
			t.Fatal("EnsureIndex with an unknown distance succeeded")
		}
		// The same name in another namespace is another index.
		if err := s.EnsureIndex(ctx, ns+"-other", "g.p.embedding", Schema{Dim: 5, Distance: Dot}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("UpsertReplacesAndRoundTrips", func(t *testing.T) {
		s, _ := open(t)
		ns := nsOf(t)
		mustEnsure(t, s, ns, "i", cos)
		p := Point{ContentID: "c1", RootContentID: "root1", MimeType: "text/plain", Text: "first",
			Labels: map[string]string{"page": "3", "lang": `"en"`}, Vector: []float32{1, 0, 0}}
		mustUpsert(t, s, ns, "i", p)
		p.Text, p.Vector, p.Labels = "second", []float32{0, 1, 0}, map[string]string{"page": "4"}
		mustUpsert(t, s, ns, "i", p)
		// The same content twice in one batch: the last one wins.
		mustUpsert(t, s, ns, "i", Point{ContentID: "c2", Text: "old", Vector: []float32{0, 0, 1}},
			Point{ContentID: "c2", Text: "new", Vector: []float32{0, 0, 1}})
		hits := mustSearch(t, s, ns, "i", []float32{0, 1, 0}, 10, nil)
		if len(hits) != 2 {
			t.Fatalf("got %d hits, want 2 (one per content): %+v", len(hits), hits)
		}
		h := hits[0]
		if h.ContentID != "c1" || h.Text != "second" || h.RootContentID != "root1" || h.MimeType != "text/plain" ||
			len(h.Labels) != 1 || h.Labels["page"] != "4" || !near(h.Score, 1) || !eqVec(h.Vector, []float32{0, 1, 0}) {
			t.Fatalf("hit 0 = %+v, want the replaced c1 with score 1", h)
		}
		if hits[1].ContentID != "c2" || hits[1].Text != "new" {
			t.Fatalf("hit 1 = %+v, want c2 with text new", hits[1])
		}
	})

	t.Run("DimensionMismatch", func(t *testing.T) {
		s, _ := open(t)
		ns := nsOf(t)
		mustEnsure(t, s, ns, "i", cos)
		err := s.Upsert(ctx, ns, "i", []Point{
			{ContentID: "ok", Vector: []float32{1, 0, 0}},
			{ContentID: "bad", Vector: []float32{1, 0}},
		})
		if !errors.Is(err, ErrDim) {
			t.Fatalf("Upsert with a 2-dim vector: err = %v, want ErrDim", err)
		}
		// All or none: the valid point of the batch is not there.
		if hits := mustSearch(t, s, ns, "i", []float32{1, 0, 0}, 10, nil); len(hits) != 0 {
			t.Fatalf("a rejected batch left %d points visible: %+v", len(hits), hits)
		}
		if _, err := s.Search(ctx, ns, "i", []float32{1, 0, 0, 0}, 3, nil); !errors.Is(err, ErrDim) {
			t.Fatalf("Search with a 4-dim query: err = %v, want ErrDim", err)
		}
		if err := s.Upsert(ctx, ns, "i", []Point{{ContentID: "", Vector: []float32{1, 0, 0}}}); err == nil {
			t.Fatal("Upsert of a point without content id succeeded")
		}
	})

	t.Run("OrderAndScores", func(t *testing.T) {
		s, _ := open(t)
		ns := nsOf(t)
		pts := []Point{
			{ContentID: "a", Vector: []float32{1, 0, 0}},
			{ContentID: "b", Vector: []float32{2, 2, 0}},
			{ContentID: "c", Vector: []float32{0, 0, 3}},
			{ContentID: "d", Vector: []float32{-1, 0, 0}},
		}
		q := []float32{1, 1, 0}
		for _, dist := range []string{Cosine, Dot, Euclidean} {
			name := "i-" + dist
			mustEnsure(t, s, ns, name, Schema{Dim: 3, Distance: dist})
			mustUpsert(t, s, ns, name, pts...)
			want := bruteForce(pts, q, dist, 4, nil)
			hits := mustSearch(t, s, ns, name, q, 4, nil)
			checkHits(t, dist, hits, want)
			// k smaller than the index.
			checkHits(t, dist+" k=2", mustSearch(t, s, ns, name, q, 2, nil), want[:2])
		}
	})

	t.Run("KeepFilterGivesKBestMatching", func(t *testing.T) {
		s, _ := open(t)
		ns := nsOf(t)
		sc := Schema{Dim: 8, Distance: Cosine}
		mustEnsure(t, s, ns, "i", sc)
		rng := rand.New(rand.NewSource(7))
		var pts []Point
		for i := 0; i < 300; i++ {
			pts = append(pts, Point{ContentID: fmt.Sprintf("c%03d", i), Labels: map[string]string{"n": strconv.Itoa(i)},
				Vector: randVec(rng, 8)})
		}
		mustUpsert(t, s, ns, "i", pts...)
		q := randVec(rng, 8)
		all := bruteForce(pts, q, Cosine, len(pts), nil)
		// Accept only the 7 points that match q worst: a filtered top-k
		// would return nothing, the k best matching points are these.
		worst := map[string]bool{}
		for _, h := range all[len(all)-7:] {
			worst[h.ContentID] = true
		}
		keepWorst := func(p *Point) bool { return worst[p.ContentID] }
		want := bruteForce(pts, q, Cosine, 5, keepWorst)
		checkHits(t, "worst", mustSearch(t, s, ns, "i", q, 5, keepWorst), want)
		// A filter on labels, accepting one point in three.
		third := func(p *Point) bool { n, _ := strconv.Atoi(p.Labels["n"]); return n%3 == 0 }
		checkHits(t, "third", mustSearch(t, s, ns, "i", q, 10, third), bruteForce(pts, q, Cosine, 10, third))
		// Fewer matching points than k.
		checkHits(t, "few", mustSearch(t, s, ns, "i", q, 20, keepWorst), bruteForce(pts, q, Cosine, 20, keepWorst))
		none := func(*Point) bool { return false }
		if hits := mustSearch(t, s, ns, "i", q, 5, none); len(hits) != 0 {
			t.Fatalf("a filter accepting nothing returned %d hits", len(hits))
		}
	})

	t.Run("DeleteAcrossIndexes", func(t *testing.T) {
		s, _ := open(t)
		ns := nsOf(t)
		other := ns + "-other"
		for _, n := range []string{"g.p.a", "g.q.b"} {
			mustEnsure(t, s, ns, n, cos)
			mustUpsert(t, s, ns, n, Point{ContentID: "x", Vector: []float32{1, 0, 0}},
				Point{ContentID: "y", Vector: []float32{0, 1, 0}}, Point{ContentID: "z", Vector: []float32{0, 0, 1}})
		}
		mustEnsure(t, s, other, "g.p.a", cos)
		mustUpsert(t, s, other, "g.p.a", Point{ContentID: "x", Vector: []float32{1, 0, 0}})
		if err := s.Delete(ctx, ns, []string{"x", "z", "never-indexed"}); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"g.p.a", "g.q.b"} {
			if ids := idsOf(mustSearch(t, s, ns, n, []float32{1, 1, 1}, 10, nil)); fmt.Sprint(ids) != "[y]" {
				t.Fatalf("%s after Delete holds %v, want [y]", n, ids)
			}
		}
		if ids := idsOf(mustSearch(t, s, other, "g.p.a", []float32{1, 1, 1}, 10, nil)); fmt.Sprint(ids) != "[x]" {
			t.Fatalf("Delete reached into another namespace: it holds %v, want [x]", ids)
		}
		if err := s.Delete(ctx, ns+"-empty", []string{"x"}); err != nil {
			t.Fatalf("Delete in a namespace without indexes: %v", err)
		}
	})

	t.Run("DropIndexAndErrNoIndex", func(t *testing.T) {
		s, _ := open(t)
		ns := nsOf(t)
		if _, err := s.Search(ctx, ns, "never", []float32{1, 0, 0}, 3, nil); !errors.Is(err, ErrNoIndex) {
			t.Fatalf("Search of a missing index: err = %v, want ErrNoIndex", err)
		}
		if err := s.Upsert(ctx, ns, "never", []Point{{ContentID: "a", Vector: []float32{1, 0, 0}}}); !errors.Is(err, ErrNoIndex) {
			t.Fatalf("Upsert into a missing index: err = %v, want ErrNoIndex", err)
		}
		if err := s.DropIndex(ctx, ns, "never"); err != nil {
			t.Fatalf("DropIndex of a missing index: %v", err)
		}
		mustEnsure(t, s, ns, "i", cos)
		mustEnsure(t, s, ns, "keep", cos)
		mustUpsert(t, s, ns, "i", Point{ContentID: "a", Vector: []float32{1, 0, 0}})
		mustUpsert(t, s, ns, "keep", Point{ContentID: "a", Vector: []float32{1, 0, 0}})
		if err := s.DropIndex(ctx, ns, "i"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Search(ctx, ns, "i", []float32{1, 0, 0}, 3, nil); !errors.Is(err, ErrNoIndex) {
			t.Fatalf("Search of a dropped index: err = %v, want ErrNoIndex", err)
		}
		if n := len(mustSearch(t, s, ns, "keep", []float32{1, 0, 0}, 3, nil)); n != 1 {
			t.Fatalf("dropping one index changed another: %d points, want 1", n)
		}
		// Recreated, with another schema: empty.
		mustEnsure(t, s, ns, "i", Schema{Dim: 2, Distance: Dot})
		if hits := mustSearch(t, s, ns, "i", []float32{1, 0}, 3, nil); len(hits) != 0 {
			t.Fatalf("a recreated index holds %d old points", len(hits))
		}
	})

	t.Run("SurvivesRestart", func(t *testing.T) {
		s, reopen := open(t)
		ns := nsOf(t)
		mustEnsure(t, s, ns, "i", Schema{Dim: 3, Distance: Euclidean})
		mustEnsure(t, s, ns, "dropped", cos)
		mustUpsert(t, s, ns, "i", Point{ContentID: "a", Text: "alpha", Labels: map[string]string{"k": `"v"`}, Vector: []float32{1, 0, 0}},
			Point{ContentID: "b", Vector: []float32{0, 1, 0}}, Point{ContentID: "c", Vector: []float32{0, 0, 1}})
		mustUpsert(t, s, ns, "i", Point{ContentID: "b", Text: "beta", Vector: []float32{0, 2, 0}})
		if err := s.Delete(ctx, ns, []string{"c"}); err != nil {
			t.Fatal(err)
		}
		if err := s.DropIndex(ctx, ns, "dropped"); err != nil {
			t.Fatal(err)
		}
		before := mustSearch(t, s, ns, "i", []float32{1, 1, 0}, 10, nil)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2 := reopen()
		after := mustSearch(t, s2, ns, "i", []float32{1, 1, 0}, 10, nil)
		checkHits(t, "after restart", after, before)
		if after[0].ContentID != "a" || after[0].Text != "alpha" || after[0].Labels["k"] != `"v"` {
			t.Fatalf("after restart hit 0 = %+v", after[0])
		}
		if err := s2.EnsureIndex(ctx, ns, "i", cos); err == nil {
			t.Fatal("the schema was forgotten at restart: EnsureIndex with another one succeeded")
		}
		if _, err := s2.Search(ctx, ns, "dropped", []float32{1, 0, 0}, 3, nil); !errors.Is(err, ErrNoIndex) {
			t.Fatalf("a dropped index came back at restart: err = %v", err)
		}
		// Still writable.
		mustUpsert(t, s2, ns, "i", Point{ContentID: "d", Vector: []float32{1, 1, 0}})
		if n := len(mustSearch(t, s2, ns, "i", []float32{1, 1, 0}, 10, nil)); n != 3 {
			t.Fatalf("%d points after restart and one upsert, want 3", n)
		}
	})

	t.Run("ConcurrentUpsertsAndSearches", func(t *testing.T) {
		s, _ := open(t)
		ns := nsOf(t)
		sc := Schema{Dim: 16, Distance: Dot}
		mustEnsure(t, s, ns, "i", sc)
		const writers, batches, per = 4, 10, 5
		var wg sync.WaitGroup
		errc := make(chan error, 64)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(w)))
				for b := 0; b < batches; b++ {
					var pts []Point
					for i := 0; i < per; i++ {
						// Every batch rewrites ids of the earlier one too.
						pts = append(pts, Point{ContentID: fmt.Sprintf("w%d-%d", w, (b*per+i)%(per*batches/2)),
							Vector: randVec(rng, 16)})
					}
					if err := s.Upsert(ctx, ns, "i", pts); err != nil {
						errc <- err
						return
					}
				}
			}(w)
		}
		for r := 0; r < 3; r++ {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(100 + int64(r)))
				for i := 0; i < 20; i++ {
					hits, err := s.Search(ctx, ns, "i", randVec(rng, 16), 5, func(p *Point) bool { return p.ContentID != "" })
					if err != nil {
						errc <- err
						return
					}
					for j := 1; j < len(hits); j++ {
						if hits[j].Score > hits[j-1].Score {
							errc <- fmt.Errorf("hits out of order: %+v", hits)
							return
						}
					}
				}
			}(r)
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		hits := mustSearch(t, s, ns, "i", make([]float32, 16), 1000, nil)
		if want := writers * per * batches / 2; len(hits) != want {
			t.Fatalf("%d points after concurrent upserts, want %d (no duplicates, none lost)", len(hits), want)
		}
	})
}

var nsSeq struct {
	sync.Mutex
	n int
}

// nsOf is a namespace of its own for each subtest (backends may share one
// server between subtests).
func nsOf(t *testing.T) string {
	nsSeq.Lock()
	defer nsSeq.Unlock()
	nsSeq.n++
	return fmt.Sprintf("ns%d-%s", nsSeq.n, t.Name())
}

func mustEnsure(t *testing.T, s Store, ns, name string, sc Schema) {
	t.Helper()
	if err := s.EnsureIndex(context.Background(), ns, name, sc); err != nil {
		t.Fatal(err)
	}
}

func mustUpsert(t *testing.T, s Store, ns, name string, pts ...Point) {
	t.Helper()
	if err := s.Upsert(context.Background(), ns, name, pts); err != nil {
		t.Fatal(err)
	}
}

func mustSearch(t *testing.T, s Store, ns, name string, q []float32, k int, keep func(*Point) bool) []Hit {
	t.Helper()
	hits, err := s.Search(context.Background(), ns, name, q, k, keep)
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// bruteForce is the reference: scores computed here in float64, sorted
// best first (ties by content id).
func bruteForce(pts []Point, q []float32, dist string, k int, keep func(*Point) bool) []Hit {
	var hs []Hit
	for _, p := range pts {
		p := p
		if keep != nil && !keep(&p) {
			continue
		}
		var d, qq, pp, l2 float64
		for i := range q {
			d += float64(q[i]) * float64(p.Vector[i])
			qq += float64(q[i]) * float64(q[i])
			pp += float64(p.Vector[i]) * float64(p.Vector[i])
			l2 += (float64(q[i]) - float64(p.Vector[i])) * (float64(q[i]) - float64(p.Vector[i]))
		}
		var sc float64
		switch dist {
		case Cosine:
			sc = d / math.Sqrt(qq*pp)
		case Dot:
			sc = d
		case Euclidean:
			sc = -math.Sqrt(l2)
		}
		hs = append(hs, Hit{Point: p, Score: float32(sc)})
	}
	sort.SliceStable(hs, func(i, j int) bool {
		if hs[i].Score != hs[j].Score {
			return hs[i].Score > hs[j].Score
		}
		return hs[i].ContentID < hs[j].ContentID
	})
	if len(hs) > k {
		hs = hs[:k]
	}
	return hs
}

func checkHits(t *testing.T, what string, got, want []Hit) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d hits %v, want %d %v", what, len(got), idsOf(got), len(want), idsOf(want))
	}
	for i := range got {
		if got[i].ContentID != want[i].ContentID || !near(got[i].Score, want[i].Score) {
			t.Fatalf("%s: hit %d = %s score %v, want %s score %v (all: got %v, want %v)", what, i,
				got[i].ContentID, got[i].Score, want[i].ContentID, want[i].Score, idsOf(got), idsOf(want))
		}
	}
}

func idsOf(hs []Hit) []string {
	var ids []string
	for _, h := range hs {
		ids = append(ids, h.ContentID)
	}
	return ids
}

func near(a, b float32) bool {
	return math.Abs(float64(a)-float64(b)) <= 1e-4*math.Max(1, math.Abs(float64(b)))
}

func eqVec(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}

func randVec(rng *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}
