package index

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"

	"github.com/viterin/vek/vek32"

	"github.com/indexify-go/indexify/internal/durable"
)

// embIndex is one index of the embedded store: points in memory (metadata
// in pts, vectors packed in vecs, slot i at vecs[i*dim:(i+1)*dim]) and a log
// of the changes on disk.
//
// Log record: u32 length of payload, u32 CRC-32C of payload, payload.
// Payload: one op byte, then
//
//	opUpsert: u32 n, n x (str content_id, str root_content_id, str mime_type,
//	          str text, u32 m, m x (str label, str json value), dim x f32)
//	opDelete: u32 n, n x str content_id
//
// with str = u32 length + bytes, all little endian. A record is written and
// fsynced before its change is applied in memory, so a change is either
// entirely in the log or (a torn tail, cut at reopen) not at all.
type embIndex struct {
	mu     sync.RWMutex
	dir    string
	schema Schema

	f       *os.File
	logSize int64

	slot    map[string]int
	pts     []Point // Vector is nil here: the vector lives in vecs
	vecs    []float32
	norms   []float32 // Euclidean norm of each vector (for cosine)
	garbage int       // points replaced or deleted since the log was last rewritten

	// The approximate index (ivf.go, annsearch.go): nil until the index
	// has cfg.min points and a background build has finished. pending is
	// the build in progress, building whether one runs; quit is closed
	// by close, and bg counts the build goroutines.
	cfg      annConfig
	ann      *ivf
	pending  *annBuild
	building bool
	quit     chan struct{}
	bg       sync.WaitGroup
}

const (
	opUpsert = 1
	opDelete = 2
	// Rewrite the log when it holds more dead points than live ones (and
	// at least this many).
	compactMin = 4096
	// Slots one search goroutine scans at least.
	scanChunk = 16384
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func openIndex(dir string, m meta) (*embIndex, error) {
	ix := &embIndex{dir: dir, schema: Schema{Dim: m.Dim, Distance: m.Distance}, slot: map[string]int{},
		cfg: defaultANN, quit: make(chan struct{})}
	if err := validSchema(ix.schema); err != nil {
		return nil, fmt.Errorf("index %s: %w", dir, err)
	}
	p := filepath.Join(dir, logFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	good, err := ix.replay(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("index %q: reading %s: %w", m.Name, p, err)
	}
	// Cut a torn or corrupt tail, so new records follow the last good one.
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, fmt.Errorf("index: %w", err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("index: %w", err)
	}
	ix.f, ix.logSize = f, good
	// A reopened index searches exactly until its approximate index is
	// rebuilt in the background (DESIGN.md: open time).
	ix.mu.Lock()
	ix.maybeBuildLocked()
	ix.mu.Unlock()
	return ix, nil
}

// replay applies the log's records and returns the offset after the last
// intact one.
func (ix *embIndex) replay(f *os.File) (int64, error) {
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	var hdr [8]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return off, nil // end, or a torn header
		}
		n := binary.LittleEndian.Uint32(hdr[:4])
		if n > 1<<31 {
			return off, nil
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return off, nil
		}
		if crc32.Checksum(buf, crcTable) != binary.LittleEndian.Uint32(hdr[4:]) {
			return off, nil
		}
		if err := ix.applyRecord(buf); err != nil {
			// The checksum matched, so this is not a torn write: refuse
			// to guess rather than silently lose what follows.
			return 0, fmt.Errorf("record at offset %d: %w", off, err)
		}
		off += 8 + int64(n)
	}
}

func (ix *embIndex) applyRecord(b []byte) error {
	d := decoder{b: b}
	op := d.byte()
	switch op {
	case opUpsert:
		n := d.u32()
		pts := make([]Point, 0, min(int(n), 1<<16))
		for i := uint32(0); i < n && d.err == nil; i++ {
			var p Point
			p.ContentID, p.RootContentID, p.MimeType, p.Text = d.str(), d.str(), d.str(), d.str()
			if m := d.u32(); m > 0 && d.err == nil {
				p.Labels = make(map[string]string, min(int(m), 64))
				for j := uint32(0); j < m && d.err == nil; j++ {
					k := d.str()
					p.Labels[k] = d.str()
				}
			}
			p.Vector = d.floats(ix.schema.Dim)
			pts = append(pts, p)
		}
		if d.err != nil {
			return d.err
		}
		ix.apply(pts, nil)
	case opDelete:
		n := d.u32()
		ids := make([]string, 0, min(int(n), 1<<16))
		for i := uint32(0); i < n && d.err == nil; i++ {
			ids = append(ids, d.str())
		}
		if d.err != nil {
			return d.err
		}
		ix.remove(ids)
	default:
		return fmt.Errorf("unknown op %d", op)
	}
	if len(d.b) != 0 {
		return errors.New("trailing bytes")
	}
	return nil
}

func encodeUpsert(pts []Point) []byte {
	var e encoder
	e.b = make([]byte, 8, 64*len(pts))
	e.byte(opUpsert)
	e.u32(uint32(len(pts)))
	for i := range pts {
		p := &pts[i]
		e.str(p.ContentID)
		e.str(p.RootContentID)
		e.str(p.MimeType)
		e.str(p.Text)
		e.u32(uint32(len(p.Labels)))
		for k, v := range p.Labels {
			e.str(k)
			e.str(v)
		}
		for _, f := range p.Vector {
			e.u32(math.Float32bits(f))
		}
	}
	return e.frame()
}

func encodeDelete(ids []string) []byte {
	var e encoder
	e.b = make([]byte, 8, 16+32*len(ids))
	e.byte(opDelete)
	e.u32(uint32(len(ids)))
	for _, id := range ids {
		e.str(id)
	}
	return e.frame()
}

// apply puts points in memory (the last of a content id wins) and in the
// approximate index's lists. pre, when not nil, holds each point's list
// under ix.ann, computed before the write lock was taken.
func (ix *embIndex) apply(pts []Point, pre []int32) {
	dim := ix.schema.Dim
	for i := range pts {
		p := pts[i]
		v := p.Vector
		p.Vector = nil
		if len(p.Labels) == 0 {
			p.Labels = nil
		} else {
			l := make(map[string]string, len(p.Labels))
			for k, v := range p.Labels {
				l[k] = v
			}
			p.Labels = l
		}
		s, ok := ix.slot[p.ContentID]
		if ok {
			ix.garbage++
			ix.pts[s] = p
			copy(ix.vecs[s*dim:(s+1)*dim], v)
			ix.norms[s] = norm(v)
		} else {
			s = len(ix.pts)
			ix.slot[p.ContentID] = s
			ix.pts = append(ix.pts, p)
			ix.vecs = append(ix.vecs, v...)
			ix.norms = append(ix.norms, norm(v))
		}
		if ix.ann != nil {
			var l int32
			if pre != nil {
				l = pre[i]
			} else {
				l = ix.ann.nearest(v)
			}
			ix.ann.set(s, l, v, ix.norms[s])
		}
		if b := ix.pending; b != nil {
			if s < len(b.assign) {
				b.assign[s] = -1
			} else {
				b.assign = append(b.assign, -1)
			}
		}
	}
}

// remove deletes points from memory, moving the last slot into each hole.
func (ix *embIndex) remove(ids []string) int {
	dim := ix.schema.Dim
	removed := 0
	for _, id := range ids {
		s, ok := ix.slot[id]
		if !ok {
			continue
		}
		removed++
		ix.garbage++
		last := len(ix.pts) - 1
		if ix.ann != nil {
			ix.ann.detach(s)
			ix.ann.moved(last, s)
		}
		if b := ix.pending; b != nil {
			b.assign[s] = b.assign[last]
			b.assign = b.assign[:last]
		}
		if s != last {
			ix.pts[s] = ix.pts[last]
			copy(ix.vecs[s*dim:(s+1)*dim], ix.vecs[last*dim:])
			ix.norms[s] = ix.norms[last]
			ix.slot[ix.pts[s].ContentID] = s
		}
		ix.pts[last] = Point{}
		ix.pts = ix.pts[:last]
		ix.vecs = ix.vecs[:last*dim]
		ix.norms = ix.norms[:last]
		delete(ix.slot, id)
	}
	return removed
}

func (ix *embIndex) upsert(pts []Point) error {
	rec := encodeUpsert(pts)
	// The points' lists cost nlist dot products each: computed before
	// taking the write lock, so searches do not wait for them.
	ix.mu.RLock()
	x := ix.ann
	ix.mu.RUnlock()
	var pre []int32
	if x != nil {
		pre = make([]int32, len(pts))
		for i := range pts {
			pre[i] = x.nearest(pts[i].Vector)
		}
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.append(rec); err != nil {
		return err
	}
	if ix.ann != x {
		pre = nil
	}
	ix.apply(pts, pre)
	_ = ix.maybeCompact()
	ix.maybeBuildLocked()
	return nil
}

func (ix *embIndex) delete(ids []string) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.f == nil {
		return nil // dropped meanwhile
	}
	present := ids[:0:0]
	for _, id := range ids {
		if _, ok := ix.slot[id]; ok {
			present = append(present, id)
		}
	}
	if len(present) == 0 {
		return nil
	}
	if err := ix.append(encodeDelete(present)); err != nil {
		return err
	}
	ix.remove(present)
	_ = ix.maybeCompact()
	ix.maybeBuildLocked()
	return nil
}

// append writes a record durably; on failure the log is cut back so the
// record is not there after a restart either (best effort: a record that
// cannot be cut back is still all or nothing thanks to its checksum).
func (ix *embIndex) append(rec []byte) error {
	if ix.f == nil {
		return fmt.Errorf("index: %w", ErrNoIndex)
	}
	_, err := ix.f.Write(rec)
	if err == nil {
		err = ix.f.Sync()
	}
	if err != nil {
		_ = ix.f.Truncate(ix.logSize)
		_, _ = ix.f.Seek(ix.logSize, io.SeekStart)
		return fmt.Errorf("index: writing log: %w", err)
	}
	ix.logSize += int64(len(rec))
	return nil
}

// maybeCompact rewrites the log with only the live points when most of it
// is dead: written to a new file, fsynced, renamed over the old one. The
// change that triggered it is durable already, so a failed rewrite is not
// the caller's error: the old log stays, and the next change tries again.
func (ix *embIndex) maybeCompact() error {
	if ix.garbage < compactMin || ix.garbage <= len(ix.pts) {
		return nil
	}
	return ix.compact()
}

func (ix *embIndex) compact() error {
	p := filepath.Join(ix.dir, logFile)
	tmp := p + ".compact"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("index: compacting: %w", err)
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("index: compacting: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var size int64
	dim := ix.schema.Dim
	const batch = 1024
	chunk := make([]Point, 0, batch)
	for s := 0; s < len(ix.pts); s += batch {
		chunk = chunk[:0]
		for i := s; i < min(s+batch, len(ix.pts)); i++ {
			q := ix.pts[i]
			q.Vector = ix.vecs[i*dim : (i+1)*dim]
			chunk = append(chunk, q)
		}
		rec := encodeUpsert(chunk)
		if _, err := w.Write(rec); err != nil {
			return fail(err)
		}
		size += int64(len(rec))
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fail(err)
	}
	// f's offset is at its end: new records follow the rewritten ones.
	ix.f.Close()
	ix.f, ix.logSize, ix.garbage = f, size, 0
	return durable.SyncDir(ix.dir)
}

func (ix *embIndex) close() error {
	if ix.f == nil {
		return nil
	}
	err := ix.f.Close()
	ix.f = nil
	if ix.quit != nil {
		close(ix.quit)
	}
	return err
}

type cand struct {
	score float32
	slot  int32
}

// worse orders candidates: lower score first, equal scores by content id
// (the larger id is worse), so results are deterministic.
func (ix *embIndex) worse(a, b cand) bool {
	if a.score != b.score {
		return a.score < b.score
	}
	return ix.pts[a.slot].ContentID > ix.pts[b.slot].ContentID
}

func (ix *embIndex) search(ctx context.Context, q []float32, k int, keep func(*Point) bool) ([]Hit, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.f == nil {
		return nil, fmt.Errorf("index: %w", ErrNoIndex)
	}
	qn := norm(q)
	if x := ix.ann; x != nil && len(ix.pts) >= ix.cfg.min && k <= calibK && x.useful(k) {
		all, _, ok, err := ix.annSearch(ctx, x, q, qn, k, keep)
		if err != nil {
			return nil, err
		}
		if ok {
			return ix.hits(all, k), nil
		}
	}
	all, err := ix.exact(ctx, q, qn, k, keep)
	if err != nil {
		return nil, err
	}
	return ix.hits(all, k), nil
}

// exact scans every slot, split over GOMAXPROCS goroutines (each at least
// scanChunk slots), each with its own top-k heap.
func (ix *embIndex) exact(ctx context.Context, q []float32, qn float32, k int, keep func(*Point) bool) ([]cand, error) {
	n := len(ix.pts)
	workers := min(runtime.GOMAXPROCS(0), (n+scanChunk-1)/scanChunk)
	if workers < 1 {
		workers = 1
	}
	per := (n + workers - 1) / workers
	tops := make([][]cand, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			tops[w], errs[w] = ix.scan(ctx, q, qn, w*per, min(n, (w+1)*per), k, keep)
		}(w)
	}
	wg.Wait()
	var all []cand
	for w := range tops {
		if errs[w] != nil {
			return nil, errs[w]
		}
		all = append(all, tops[w]...)
	}
	return all, nil
}

// hits sorts the merged candidates and returns the k best as copies.
func (ix *embIndex) hits(all []cand, k int) []Hit {
	sort.Slice(all, func(i, j int) bool { return ix.worse(all[j], all[i]) })
	if len(all) > k {
		all = all[:k]
	}
	hits := make([]Hit, len(all))
	for i, c := range all {
		p := ix.pts[c.slot]
		p.Vector = append([]float32(nil), ix.vec(int(c.slot))...)
		if p.Labels != nil {
			l := make(map[string]string, len(p.Labels))
			for k, v := range p.Labels {
				l[k] = v
			}
			p.Labels = l
		}
		hits[i] = Hit{Point: p, Score: c.score}
	}
	return hits
}

// vec is slot s's vector (not a copy).
func (ix *embIndex) vec(s int) []float32 {
	d := ix.schema.Dim
	return ix.vecs[s*d : (s+1)*d : (s+1)*d]
}

// score is the index's score of slot s for q (qn = |q|).
func (ix *embIndex) score(q []float32, qn float32, s int) float32 {
	return ix.scoreVec(q, qn, ix.vec(s), ix.norms[s])
}

// scoreVec is the index's score of vector v (norm vn) for q.
func (ix *embIndex) scoreVec(q []float32, qn float32, v []float32, vn float32) float32 {
	switch ix.schema.Distance {
	case Dot:
		return dot(q, v)
	case Cosine:
		if d := qn * vn; d > 0 {
			return dot(q, v) / d
		}
		return 0
	default:
		return -dist(q, v)
	}
}

// scan keeps the k best accepted candidates of slots [from, to).
func (ix *embIndex) scan(ctx context.Context, q []float32, qn float32, from, to, k int, keep func(*Point) bool) ([]cand, error) {
	t := &topk{ix: ix, q: q, qn: qn, k: k, keep: keep, h: make([]cand, 0, k)}
	for s := from; s < to; s++ {
		if (s-from)%scanChunk == scanChunk-1 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		t.offer(s)
	}
	return t.h, nil
}

func (ix *embIndex) up(h []cand, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !ix.worse(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (ix *embIndex) down(h []cand, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && ix.worse(h[r], h[l]) {
			m = r
		}
		if !ix.worse(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// dot and dist use vek's AVX2 kernels when the CPU has them (Go assembly,
// no cgo), its pure-Go loops otherwise.
func dot(a, b []float32) float32 { return vek32.Dot(a, b) }

func dist(a, b []float32) float32 { return vek32.Distance(a, b) }

func norm(v []float32) float32 { return float32(math.Sqrt(float64(dot(v, v)))) }

type encoder struct{ b []byte }

func (e *encoder) byte(c byte)  { e.b = append(e.b, c) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) str(s string) { e.u32(uint32(len(s))); e.b = append(e.b, s...) }

// frame fills in the header reserved at the start of b.
func (e *encoder) frame() []byte {
	payload := e.b[8:]
	binary.LittleEndian.PutUint32(e.b[:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(e.b[4:8], crc32.Checksum(payload, crcTable))
	return e.b
}

type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("record too short")

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.err = errShort
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) u32() uint32 {
	if d.err != nil || len(d.b) < 4 {
		d.err = errShort
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) str() string {
	n := d.u32()
	if d.err != nil || uint32(len(d.b)) < n {
		d.err = errShort
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) floats(n int) []float32 {
	if d.err != nil || len(d.b) < 4*n {
		d.err = errShort
		return nil
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(d.b[4*i:]))
	}
	d.b = d.b[4*n:]
	return v
}
