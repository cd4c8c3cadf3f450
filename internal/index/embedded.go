package index

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/indexify-go/indexify/internal/dirlock"
	"github.com/indexify-go/indexify/internal/durable"
)

// Embedded is the Store kept in files under one directory: vectors held in
// memory, searched exactly up to 20 000 points per index and through an
// inverted-file approximate index (rebuilt in the background) above that;
// every change appended to a per-index log and fsynced before it becomes
// visible. See DESIGN.md.
type Embedded struct {
	dir  string
	lock *dirlock.Lock // one process per directory (dirlock.LockFile)

	mu      sync.RWMutex
	indexes map[key]*embIndex
	closed  bool
}

type key struct{ ns, name string }

// meta is an index's identity, written once by EnsureIndex.
type meta struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Dim       int    `json:"dim"`
	Distance  string `json:"distance"`
}

const (
	metaFile    = "meta.json"
	logFile     = "points.log"
	droppedMark = ".dropped-"
)

// OpenEmbedded opens (or creates) the embedded store in dir, reloading
// every index written there before.
//
// The directory is locked while the store is open: a second process (a
// replacement API server pod started while the old one still shuts down)
// gets an error wrapping dirlock.ErrHeld instead of writing the same files.
func OpenEmbedded(dir string) (_ *Embedded, err error) {
	lock, err := dirlock.TryAcquire(dir, dirlock.LockFile)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	e := &Embedded{dir: dir, lock: lock, indexes: map[key]*embIndex{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	for _, ent := range ents {
		if !ent.IsDir() {
			continue
		}
		p := filepath.Join(dir, ent.Name())
		if strings.Contains(ent.Name(), droppedMark) {
			// A drop that crashed after its rename: finish it.
			if err := os.RemoveAll(p); err != nil {
				return nil, fmt.Errorf("index: removing dropped %s: %w", p, err)
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(p, metaFile))
		if errors.Is(err, os.ErrNotExist) {
			// EnsureIndex crashed before its meta file was renamed into
			// place: the index was never created.
			if err := os.RemoveAll(p); err != nil {
				return nil, fmt.Errorf("index: %w", err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
		var m meta
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("index: %s: %w", p, err)
		}
		ix, err := openIndex(p, m)
		if err != nil {
			e.closeAll()
			return nil, err
		}
		e.indexes[key{m.Namespace, m.Name}] = ix
	}
	return e, nil
}

func validSchema(s Schema) error {
	if s.Dim <= 0 {
		return fmt.Errorf("index: dimension must be positive, got %d", s.Dim)
	}
	switch s.Distance {
	case Cosine, Dot, Euclidean:
		return nil
	}
	return fmt.Errorf("index: unknown distance %q (want %s, %s or %s)", s.Distance, Cosine, Dot, Euclidean)
}

// dirName is the directory of an index: a hash, because namespace and
// index names may hold any character; the real names are in meta.json.
func dirName(ns, name string) string {
	h := sha256.Sum256([]byte(ns + "\x00" + name))
	return hex.EncodeToString(h[:16])
}

// EnsureIndex implements Store.
func (e *Embedded) EnsureIndex(_ context.Context, ns, name string, s Schema) error {
	if err := validSchema(s); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed
	}
	if ix, ok := e.indexes[key{ns, name}]; ok {
		if ix.schema != s {
			return fmt.Errorf("index %q in namespace %q exists with dim %d distance %s, not dim %d distance %s",
				name, ns, ix.schema.Dim, ix.schema.Distance, s.Dim, s.Distance)
		}
		return nil
	}
	p := filepath.Join(e.dir, dirName(ns, name))
	if err := os.RemoveAll(p); err != nil { // leftovers of a crashed EnsureIndex
		return fmt.Errorf("index: %w", err)
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	m := meta{Namespace: ns, Name: name, Dim: s.Dim, Distance: s.Distance}
	b, _ := json.Marshal(m)
	if err := writeFileSync(filepath.Join(p, metaFile), b); err != nil {
		return err
	}
	if err := durable.SyncDir(e.dir); err != nil {
		return err
	}
	ix, err := openIndex(p, m)
	if err != nil {
		return err
	}
	e.indexes[key{ns, name}] = ix
	return nil
}

// DropIndex implements Store.
func (e *Embedded) DropIndex(_ context.Context, ns, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed
	}
	ix, ok := e.indexes[key{ns, name}]
	if !ok {
		return nil
	}
	ix.mu.Lock()
	ix.close()
	ix.mu.Unlock()
	ix.bg.Wait() // a background build sees the close and stops
	delete(e.indexes, key{ns, name})
	// Rename first, so a crash mid-removal never leaves a half index that
	// reopens as a live one.
	gone := fmt.Sprintf("%s%s%d", ix.dir, droppedMark, time.Now().UnixNano())
	if err := os.Rename(ix.dir, gone); err != nil {
		return fmt.Errorf("index: dropping %s: %w", name, err)
	}
	if err := durable.SyncDir(e.dir); err != nil {
		return err
	}
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("index: dropping %s: %w", name, err)
	}
	return nil
}

func (e *Embedded) get(ns, name string) (*embIndex, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, errClosed
	}
	ix, ok := e.indexes[key{ns, name}]
	if !ok {
		return nil, fmt.Errorf("index %q in namespace %q: %w", name, ns, ErrNoIndex)
	}
	return ix, nil
}

// Upsert implements Store.
func (e *Embedded) Upsert(_ context.Context, ns, name string, pts []Point) error {
	ix, err := e.get(ns, name)
	if err != nil {
		return err
	}
	if err := checkPoints(name, ix.schema, pts); err != nil {
		return err
	}
	if len(pts) == 0 {
		return nil
	}
	return ix.upsert(pts)
}

// Delete implements Store.
func (e *Embedded) Delete(_ context.Context, ns string, contentIDs []string) error {
	if len(contentIDs) == 0 {
		return nil
	}
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return errClosed
	}
	var in []*embIndex
	for k, ix := range e.indexes {
		if k.ns == ns {
			in = append(in, ix)
		}
	}
	e.mu.RUnlock()
	for _, ix := range in {
		if err := ix.delete(contentIDs); err != nil {
			return err
		}
	}
	return nil
}

// Search implements Store. keep may be called from several goroutines at
// once (the scan is split over the CPUs), and only for candidates whose
// score could still enter the top k.
func (e *Embedded) Search(ctx context.Context, ns, name string, q []float32, k int, keep func(*Point) bool) ([]Hit, error) {
	ix, err := e.get(ns, name)
	if err != nil {
		return nil, err
	}
	if len(q) != ix.schema.Dim {
		return nil, fmt.Errorf("index %q: query has %d dimensions, want %d: %w", name, len(q), ix.schema.Dim, ErrDim)
	}
	if k <= 0 {
		return nil, nil
	}
	return ix.search(ctx, q, k, keep)
}

// Close implements Store: it closes the log files; the data stays.
func (e *Embedded) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	err := e.closeAll()
	e.lock.Release()
	return err
}

func (e *Embedded) closeAll() error {
	var first error
	for _, ix := range e.indexes {
		ix.mu.Lock()
		if err := ix.close(); err != nil && first == nil {
			first = err
		}
		ix.mu.Unlock()
	}
	for _, ix := range e.indexes {
		ix.bg.Wait() // a background build sees the close and stops
	}
	return first
}

var errClosed = errors.New("index: store is closed")

func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("index: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("index: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return durable.SyncDir(filepath.Dir(path))
}
