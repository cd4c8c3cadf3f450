package index

import (
	"math"
	"math/rand"
	"runtime"
	"sort"
	"sync"
)

// ivf is the embedded store's approximate index (DESIGN.md, "Approximate
// search"): an inverted file over a k-means coarse quantizer. Every slot of
// the index is in exactly one list, the list of its nearest centroid; a
// search scores the centroids, then scans the vectors of the nprobe best
// lists exactly (the same vectors, norms and tie-breaking as the exact
// scan). Centroids never change after a build; the lists follow every
// upsert and delete under the index's write lock.
type ivf struct {
	dim    int
	metric string    // the index's distance
	cent   []float32 // nlist x dim; unit length for cosine and dot
	cn2    []float32 // squared norm of each centroid (euclidean)
	nlist  int

	lists [][]int32 // list -> slots
	// Each list's vectors and norms, in list order: a copy of the store's
	// (2x the vectors' memory), so a probe reads one contiguous block
	// instead of gathering vectors from all over the store's array.
	lvec  [][]float32
	lnorm [][]float32
	where []int32 // slot -> its list
	pos   []int32 // slot -> its position in lists[where[slot]]

	trainedN int // points in the index when the build started
	// Lists to probe, from the calibration at build time: the fewest that
	// gave recall >= annConfig.target on the calibration queries, for k <=
	// 10 and for k <= calibK.
	probe10, probeK int
	calRecall10     float64 // recall@10 measured on the calibration queries at probe10
}

// probes is the number of lists a search for k neighbours scans.
func (x *ivf) probes(k int) int {
	if k > 10 {
		return x.probeK
	}
	return x.probe10
}

// useful says whether searching x beats the exact scan: when the
// calibration needs more than half of the lists (data without structure,
// such as random vectors), scanning them in list order costs as much as a
// sequential scan of everything, so search stays exact.
func (x *ivf) useful(k int) bool { return 2*x.probes(k) <= x.nlist }

// annConfig are the approximate index's knobs; defaultANN in production,
// smaller values in tests that need a build to be quick.
type annConfig struct {
	min      int     // below this many points search is exact and no index is built
	regrow   float64 // rebuild when the index holds this many times trainedN
	target   float64 // recall the calibration aims at
	calibQ   int     // calibration queries
	iters    int     // k-means iterations
	perList  int     // k-means training points per centroid
	chunk    int     // slots assigned per read-locked step of a build
	disabled bool    // never build (exact search only)
}

var defaultANN = annConfig{min: 20_000, regrow: 2, target: 0.98, calibQ: 100, iters: 10, perList: 40, chunk: 8192}

// calibK is the largest k the calibration covers; a search for more
// neighbours is exact.
const calibK = 100

// nlistFor is the number of lists for n points: sqrt(n), the usual IVF
// choice (centroid scoring and list scanning then cost about the same).
func nlistFor(n int) int {
	return min(4096, max(16, int(math.Sqrt(float64(n)))))
}

// centScore ranks centroid c for vector v: higher is nearer. For cosine and
// dot, the dot product with the unit centroid (the argmax does not depend
// on v's norm); for euclidean, -|v-c|^2 + |v|^2 = 2 v.c - |c|^2.
func (x *ivf) centScore(v []float32, c int) float32 {
	d := dot(v, x.cent[c*x.dim:(c+1)*x.dim:(c+1)*x.dim])
	if x.metric == Euclidean {
		return 2*d - x.cn2[c]
	}
	return d
}

func (x *ivf) nearest(v []float32) int32 {
	best, bs := int32(0), float32(math.Inf(-1))
	for c := 0; c < x.nlist; c++ {
		if s := x.centScore(v, c); s > bs {
			best, bs = int32(c), s
		}
	}
	return best
}

// order returns the lists by decreasing centroid score for q.
func (x *ivf) order(q []float32) []int32 {
	sc := make([]float32, x.nlist)
	ord := make([]int32, x.nlist)
	for c := range sc {
		sc[c] = x.centScore(q, c)
		ord[c] = int32(c)
	}
	sort.Slice(ord, func(i, j int) bool { return sc[ord[i]] > sc[ord[j]] })
	return ord
}

// attach puts slot s (a new slot, or one just detached) with vector v
// (norm vn) in list l.
func (x *ivf) attach(s int, l int32, v []float32, vn float32) {
	for len(x.where) <= s {
		x.where = append(x.where, -1)
		x.pos = append(x.pos, -1)
	}
	x.where[s], x.pos[s] = l, int32(len(x.lists[l]))
	x.lists[l] = append(x.lists[l], int32(s))
	x.lvec[l] = append(x.lvec[l], v...)
	x.lnorm[l] = append(x.lnorm[l], vn)
}

// detach removes slot s from its list (swap with the list's last entry).
func (x *ivf) detach(s int) {
	l, p := x.where[s], x.pos[s]
	li := x.lists[l]
	end := len(li) - 1
	last := li[end]
	li[p] = last
	x.pos[last] = p
	x.lists[l] = li[:end]
	d := x.dim
	copy(x.lvec[l][int(p)*d:(int(p)+1)*d], x.lvec[l][end*d:])
	x.lvec[l] = x.lvec[l][:end*d]
	x.lnorm[l][p] = x.lnorm[l][end]
	x.lnorm[l] = x.lnorm[l][:end]
	x.where[s], x.pos[s] = -1, -1
}

// moved records that the point in slot from now lives in slot to (the
// store's swap-remove; slot to was detached before), and drops slot from.
func (x *ivf) moved(from, to int) {
	if from != to {
		l, p := x.where[from], x.pos[from]
		x.lists[l][p] = int32(to)
		x.where[to], x.pos[to] = l, p
	}
	x.where, x.pos = x.where[:from], x.pos[:from]
}

// set places slot s (new or replaced) with vector v in list l.
func (x *ivf) set(s int, l int32, v []float32, vn float32) {
	if s < len(x.where) && x.where[s] >= 0 {
		if x.where[s] == l {
			p := int(x.pos[s])
			copy(x.lvec[l][p*x.dim:(p+1)*x.dim], v)
			x.lnorm[l][p] = vn
			return
		}
		x.detach(s)
	}
	x.attach(s, l, v, vn)
}

// kmeans trains k centroids on the n x dim sample (modified: rows of
// cosine/dot samples are normalised, and so are their centroids, i.e.
// spherical k-means). An empty cluster is re-seeded with a random sample
// point. stop is polled between iterations.
func kmeans(sample []float32, dim, k, iters int, metric string, rng *rand.Rand, stop func() bool) *ivf {
	n := len(sample) / dim
	spherical := metric != Euclidean
	if spherical {
		for i := 0; i < n; i++ {
			normalize(sample[i*dim : (i+1)*dim])
		}
	}
	x := &ivf{dim: dim, metric: metric, nlist: k, cent: make([]float32, k*dim), cn2: make([]float32, k)}
	workers := max(1, runtime.GOMAXPROCS(0))
	seedPlusPlus(x, sample, n, rng, workers)
	x.fixNorms()
	assign := make([]int32, n)
	for it := 0; it < iters; it++ {
		if stop() {
			return nil
		}
		parallel(n, workers, func(from, to int) {
			for i := from; i < to; i++ {
				assign[i] = x.nearest(sample[i*dim : (i+1)*dim])
			}
		})
		sums := make([]float64, k*dim)
		counts := make([]int, k)
		for i := 0; i < n; i++ {
			c := int(assign[i])
			counts[c]++
			row := sums[c*dim : (c+1)*dim]
			for j, f := range sample[i*dim : (i+1)*dim] {
				row[j] += float64(f)
			}
		}
		for c := 0; c < k; c++ {
			dst := x.cent[c*dim : (c+1)*dim]
			if counts[c] == 0 {
				i := rng.Intn(n)
				copy(dst, sample[i*dim:(i+1)*dim])
				continue
			}
			for j := range dst {
				dst[j] = float32(sums[c*dim+j] / float64(counts[c]))
			}
		}
		x.fixNorms()
	}
	return x
}

// seedPlusPlus picks the initial centroids by k-means++ (each next one a
// sample point drawn with probability proportional to its squared distance
// to the nearest centroid so far): without it, random seeds leave some
// topics sharing a list and others split, and searches probe more.
func seedPlusPlus(x *ivf, sample []float32, n int, rng *rand.Rand, workers int) {
	dim := x.dim
	d2 := make([]float64, n)
	vn := make([]float64, n) // |v|^2
	for i := range d2 {
		d2[i] = math.Inf(1)
		v := sample[i*dim : (i+1)*dim]
		vn[i] = float64(dot(v, v))
	}
	pick := rng.Intn(n)
	for c := 0; c < x.nlist; c++ {
		cent := x.cent[c*dim : (c+1)*dim]
		copy(cent, sample[pick*dim:(pick+1)*dim])
		cn := float64(dot(cent, cent))
		parallel(n, workers, func(from, to int) {
			for i := from; i < to; i++ {
				v := sample[i*dim : (i+1)*dim]
				// |v-c|^2 = |v|^2 + |c|^2 - 2 v.c
				d := vn[i] + cn - 2*float64(dot(v, cent))
				if d < d2[i] {
					d2[i] = max(d, 0)
				}
			}
		})
		var total float64
		for _, d := range d2 {
			total += d
		}
		if total <= 0 {
			pick = rng.Intn(n)
			continue
		}
		r := rng.Float64() * total
		pick = n - 1
		for i, d := range d2 {
			if r -= d; r <= 0 {
				pick = i
				break
			}
		}
	}
}

func (x *ivf) fixNorms() {
	for c := 0; c < x.nlist; c++ {
		row := x.cent[c*x.dim : (c+1)*x.dim]
		if x.metric != Euclidean {
			normalize(row)
		}
		x.cn2[c] = dot(row, row)
	}
}

func normalize(v []float32) {
	if n := norm(v); n > 0 {
		for i := range v {
			v[i] /= n
		}
	}
}

// parallel runs f over [0, n) split in contiguous parts, one goroutine each.
func parallel(n, workers int, f func(from, to int)) {
	workers = max(1, min(workers, n))
	per := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		from, to := w*per, min(n, (w+1)*per)
		if from >= to {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(from, to)
		}()
	}
	wg.Wait()
}

// calibrate picks probe10/probeK: for each calibration query and each of its
// true neighbours (truth, by slot), the rank of the neighbour's list in the
// query's list order; the recall at p probes is the share of ranks below p.
func (x *ivf) calibrate(queries [][]float32, truth [][]int32, target float64) {
	hist10 := make([]int, x.nlist)
	histK := make([]int, x.nlist)
	var n10, nK int
	for qi, q := range queries {
		rank := make([]int32, x.nlist)
		for r, l := range x.order(q) {
			rank[l] = int32(r)
		}
		for j, s := range truth[qi] {
			if int(s) >= len(x.where) || x.where[s] < 0 {
				continue
			}
			r := rank[x.where[s]]
			if j < 10 {
				hist10[r]++
				n10++
			}
			histK[r]++
			nK++
		}
	}
	pick := func(hist []int, total int) (int, float64) {
		if total == 0 {
			return x.nlist, 1
		}
		got := 0
		for p, h := range hist {
			got += h
			if float64(got) >= target*float64(total) {
				return p + 1, float64(got) / float64(total)
			}
		}
		return x.nlist, 1
	}
	x.probe10, x.calRecall10 = pick(hist10, n10)
	x.probeK, _ = pick(histK, nK)
	x.probeK = max(x.probeK, x.probe10)
}
