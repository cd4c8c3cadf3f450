package index

import (
	"container/heap"
	"context"
	"math"
	"math/rand"
	"runtime"
	"sort"
	"sync"
)

// annBuild is a build in progress, visible to the index's writers: each
// slot's list under the new centroids, -1 for a slot not assigned yet or
// changed since it was (the build assigns those when it installs).
type annBuild struct {
	assign []int32
}

// maybeBuildLocked starts a background build of the approximate index when
// the index is large enough and has none, or has outgrown it. The caller
// holds ix.mu for writing.
func (ix *embIndex) maybeBuildLocked() {
	c := ix.cfg
	n := len(ix.pts)
	if c.disabled || ix.building || ix.f == nil || n < c.min || ix.stopped() {
		return
	}
	if ix.ann != nil && float64(n) < c.regrow*float64(ix.ann.trainedN) {
		return
	}
	ix.building = true
	ix.bg.Add(1)
	go func() {
		defer ix.bg.Done()
		ix.buildANN()
		ix.mu.Lock()
		ix.building, ix.pending = false, nil
		ix.maybeBuildLocked() // grown past regrow during the build
		ix.mu.Unlock()
	}()
}

func (ix *embIndex) stopped() bool {
	select {
	case <-ix.quit:
		return true
	default:
		return false
	}
}

// buildANN trains, assigns and calibrates a new ivf and installs it. It
// holds the read lock only in steps of cfg.chunk slots, so writers and
// searches go on meanwhile (searches use the previous ivf, or exact scan);
// writers record what they change in ix.pending. It returns without
// installing anything when the index is closed or shrinks below cfg.min.
func (ix *embIndex) buildANN() {
	c := ix.cfg
	dim := ix.schema.Dim
	ix.mu.RLock()
	n := len(ix.pts)
	if n < c.min || ix.f == nil {
		ix.mu.RUnlock()
		return
	}
	rng := rand.New(rand.NewSource(int64(n)))
	nlist := min(nlistFor(n), n)
	m := min(n, nlist*c.perList)
	sample := make([]float32, m*dim)
	for i, s := range rng.Perm(n)[:m] {
		copy(sample[i*dim:(i+1)*dim], ix.vec(s))
	}
	// Calibration queries: points of the index (their own point excluded
	// from their neighbours), standing for queries like the data.
	nq := min(c.calibQ, n)
	queries := make([][]float32, nq)
	qids := make([]string, nq)
	for i, s := range rng.Perm(n)[:nq] {
		queries[i] = append([]float32(nil), ix.vec(s)...)
		qids[i] = ix.pts[s].ContentID
	}
	ix.mu.RUnlock()

	x := kmeans(sample, dim, nlist, c.iters, ix.schema.Distance, rng, ix.stopped)
	if x == nil {
		return
	}
	x.trainedN = n
	sample = nil

	ix.mu.Lock()
	if ix.f == nil {
		ix.mu.Unlock()
		return
	}
	b := &annBuild{assign: make([]int32, len(ix.pts))}
	for i := range b.assign {
		b.assign[i] = -1
	}
	ix.pending = b
	ix.mu.Unlock()

	truth := make([]idHeap, nq)
	qn := make([]float32, nq)
	for i, q := range queries {
		qn[i] = norm(q)
	}
	workers := max(1, runtime.GOMAXPROCS(0))
	for done := 0; ; {
		if ix.stopped() {
			return
		}
		ix.mu.RLock()
		n := len(ix.pts)
		if ix.f == nil || n < c.min {
			ix.mu.RUnlock()
			return
		}
		if done >= n {
			ix.mu.RUnlock()
			break
		}
		end := min(n, done+c.chunk)
		parallel(end-done, workers, func(from, to int) {
			for s := done + from; s < done+to; s++ {
				b.assign[s] = x.nearest(ix.vec(s))
			}
		})
		parallel(nq, workers, func(from, to int) {
			for i := from; i < to; i++ {
				for s := done; s < end; s++ {
					if id := ix.pts[s].ContentID; id != qids[i] {
						truth[i].offer(ix.score(queries[i], qn[i], s), id)
					}
				}
			}
		})
		ix.mu.RUnlock()
		done = end
	}

	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.f == nil || len(ix.pts) < c.min {
		return
	}
	counts := make([]int, nlist)
	for s, l := range b.assign {
		if l < 0 {
			l = x.nearest(ix.vec(s))
			b.assign[s] = l
		}
		counts[l]++
	}
	x.lists = make([][]int32, nlist)
	x.lvec = make([][]float32, nlist)
	x.lnorm = make([][]float32, nlist)
	for l, c := range counts {
		x.lists[l] = make([]int32, 0, c+c/8)
		x.lvec[l] = make([]float32, 0, (c+c/8)*dim)
		x.lnorm[l] = make([]float32, 0, c+c/8)
	}
	x.where = make([]int32, 0, len(ix.pts))
	x.pos = make([]int32, 0, len(ix.pts))
	for s, l := range b.assign {
		x.attach(s, l, ix.vec(s), ix.norms[s])
	}
	slots := make([][]int32, nq)
	for i := range truth {
		seen := map[string]bool{}
		for _, e := range truth[i].best() {
			if s, ok := ix.slot[e.id]; ok && !seen[e.id] {
				seen[e.id] = true
				slots[i] = append(slots[i], int32(s))
			}
		}
	}
	x.calibrate(queries, slots, c.target)
	ix.ann = x
}

// annSearch searches the probed lists of x. ok is false when the result
// must come from the exact scan instead: fewer than k points found, or a
// filter so selective that the probed lists hold too few accepted points
// for the calibrated recall (below 1 in 4 of the candidates it saw).
// With a less selective filter it probes proportionally more lists.
// The caller holds ix.mu for reading.
func (ix *embIndex) annSearch(ctx context.Context, x *ivf, q []float32, qn float32, k int, keep func(*Point) bool) (all []cand, scored int, ok bool, err error) {
	ord := x.order(q)
	p := min(x.probes(k), len(ord))
	workers := max(1, runtime.GOMAXPROCS(0))
	tops := make([]*topk, workers)
	for w := range tops {
		tops[w] = &topk{ix: ix, q: q, qn: qn, k: k, keep: keep, h: make([]cand, 0, k)}
	}
	if err := ix.scanLists(ctx, x, ord[:p], tops); err != nil {
		return nil, 0, false, err
	}
	if keep != nil {
		var calls, acc int
		for _, t := range tops {
			calls, acc = calls+t.calls, acc+t.accepted
		}
		if acc < k || 4*acc < calls {
			return nil, 0, false, nil
		}
		if acc < calls {
			p2 := min(len(ord), int(math.Ceil(float64(p)*float64(calls)/float64(acc))))
			if err := ix.scanLists(ctx, x, ord[p:p2], tops); err != nil {
				return nil, 0, false, err
			}
		}
	}
	for _, t := range tops {
		all = append(all, t.h...)
		scored += t.scored
	}
	if len(all) < k && len(ix.pts) > len(all) {
		return nil, 0, false, nil
	}
	return all, scored, true, nil
}

// scanLists offers the slots of lists to the workers' top-k heaps: one
// goroutine per heap when there is enough to scan, list by list.
func (ix *embIndex) scanLists(ctx context.Context, x *ivf, lists []int32, tops []*topk) error {
	total := 0
	for _, l := range lists {
		total += len(x.lists[l])
	}
	workers := min(len(tops), max(1, total/scanChunk))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			t := tops[w]
			for i := w; i < len(lists); i += workers {
				if i%16 == 15 && ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				l := lists[i]
				vecs, norms := x.lvec[l], x.lnorm[l]
				d := x.dim
				for p, s := range x.lists[l] {
					t.offerScore(int(s), ix.scoreVec(t.q, t.qn, vecs[p*d:(p+1)*d:(p+1)*d], norms[p]))
				}
			}
		}(w)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// topk keeps the k best accepted candidates offered to it in a min-heap
// (h[0] the worst kept). keep runs only for a candidate that would enter
// the heap, so a selective filter costs little; calls and accepted count
// those runs (the filter's selectivity among near candidates).
type topk struct {
	ix              *embIndex
	q               []float32
	qn              float32
	k               int
	keep            func(*Point) bool
	h               []cand
	calls, accepted int
	scored          int // points scored (the work of a search)
}

func (t *topk) offer(s int) { t.offerScore(s, t.ix.score(t.q, t.qn, s)) }

// offerScore offers slot s whose score is sc.
func (t *topk) offerScore(s int, sc float32) {
	ix := t.ix
	t.scored++
	c := cand{score: sc, slot: int32(s)}
	if len(t.h) == t.k && !ix.worse(t.h[0], c) {
		return
	}
	if t.keep != nil {
		p := ix.pts[s]
		p.Vector = ix.vec(s)
		t.calls++
		if !t.keep(&p) {
			return
		}
		t.accepted++
	}
	if len(t.h) < t.k {
		t.h = append(t.h, c)
		ix.up(t.h, len(t.h)-1)
	} else {
		t.h[0] = c
		ix.down(t.h, 0)
	}
}

// idHeap is a calibration query's calibK best points by content id (ids,
// not slots: slots move between the build's locked steps).
type idHeap []idScore

type idScore struct {
	score float32
	id    string
}

func (h idHeap) Len() int           { return len(h) }
func (h idHeap) Less(i, j int) bool { return h[i].score < h[j].score }
func (h idHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *idHeap) Push(v any)        { *h = append(*h, v.(idScore)) }
func (h *idHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

func (h *idHeap) offer(score float32, id string) {
	if len(*h) < calibK {
		heap.Push(h, idScore{score, id})
	} else if score > (*h)[0].score {
		(*h)[0] = idScore{score, id}
		heap.Fix(h, 0)
	}
}

// best returns the entries best first.
func (h idHeap) best() []idScore {
	out := append([]idScore(nil), h...)
	sort.Slice(out, func(i, j int) bool { return out[i].score > out[j].score })
	return out
}
