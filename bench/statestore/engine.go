package main

// The two candidate engines behind one small interface: an atomic write
// batch, point reads, prefix scans, a consistent checkpoint, close.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	bolt "go.etcd.io/bbolt"

	"github.com/indexify-go/indexify/internal/state/layout"
)

type engine interface {
	// apply runs fn on one write batch and commits it atomically.
	apply(fn func(w layout.Writer) error) error
	get(k []byte) ([]byte, bool, error)
	// scan calls fn for keys with the prefix, ascending, until fn returns false.
	scan(prefix []byte, fn func(k, v []byte) bool) error
	// scanFrom is scan starting at the first key >= start inside prefix.
	scanFrom(prefix, start []byte, fn func(k, v []byte) bool) error
	// checkpoint writes a consistent copy into dir (created) and returns its bytes.
	checkpoint(dir string) (int64, error)
	close() error
}

// ---- pebble

type pebbleEngine struct {
	db    *pebble.DB
	cache interface{ Unref() }
	sync  bool
}

func openPebble(dir string, cacheBytes int64, sync bool) (*pebbleEngine, error) {
	c := pebble.NewCache(cacheBytes)
	opts := &pebble.Options{Cache: c, Logger: quietLogger{}}
	// Bloom filters on every level, as CockroachDB configures pebble: a
	// point read by id then skips the sstables that cannot hold the key.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		c.Unref()
		return nil, err
	}
	return &pebbleEngine{db: db, cache: c, sync: sync}, nil
}

// quietLogger drops pebble's informational lines (WAL replay notes) and
// keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}
func (quietLogger) Errorf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
	os.Exit(1)
}

type pebbleWriter struct{ b *pebble.Batch }

func (w pebbleWriter) Set(k, v []byte) error { return w.b.Set(k, v, nil) }
func (w pebbleWriter) Delete(k []byte) error { return w.b.Delete(k, nil) }

func (e *pebbleEngine) apply(fn func(w layout.Writer) error) error {
	b := e.db.NewBatch()
	defer b.Close()
	if err := fn(pebbleWriter{b}); err != nil {
		return err
	}
	opt := pebble.NoSync
	if e.sync {
		opt = pebble.Sync
	}
	return b.Commit(opt)
}

func (e *pebbleEngine) get(k []byte) ([]byte, bool, error) {
	v, c, err := e.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte(nil), v...)
	return out, true, c.Close()
}

func (e *pebbleEngine) scan(prefix []byte, fn func(k, v []byte) bool) error {
	return e.scanFrom(prefix, prefix, fn)
}

func (e *pebbleEngine) scanFrom(prefix, start []byte, fn func(k, v []byte) bool) error {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: layout.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if !fn(it.Key(), it.Value()) {
			break
		}
	}
	return it.Close()
}

func (e *pebbleEngine) checkpoint(dir string) (int64, error) {
	if err := e.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return 0, err
	}
	return dirBytes(dir)
}

func (e *pebbleEngine) close() error {
	err := e.db.Close()
	e.cache.Unref()
	return err
}

// ---- bbolt: one bucket holding the same keys, so both engines store the
// same layout.

var boltBucket = []byte("state")

type boltEngine struct{ db *bolt.DB }

func openBolt(dir string, sync bool) (*boltEngine, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, "state.db"), 0o600, &bolt.Options{
		NoSync:         !sync,
		NoFreelistSync: true, // as etcd: the freelist is rebuilt at open, not written per commit
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	}); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &boltEngine{db: db}, nil
}

type boltWriter struct{ b *bolt.Bucket }

func (w boltWriter) Set(k, v []byte) error {
	if v == nil {
		v = []byte{}
	}
	return w.b.Put(k, v)
}
func (w boltWriter) Delete(k []byte) error { return w.b.Delete(k) }

func (e *boltEngine) apply(fn func(w layout.Writer) error) error {
	return e.db.Update(func(tx *bolt.Tx) error { return fn(boltWriter{tx.Bucket(boltBucket)}) })
}

func (e *boltEngine) get(k []byte) ([]byte, bool, error) {
	var out []byte
	err := e.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(boltBucket).Get(k); v != nil {
			out = append([]byte{}, v...)
		}
		return nil
	})
	return out, out != nil, err
}

func (e *boltEngine) scan(prefix []byte, fn func(k, v []byte) bool) error {
	return e.scanFrom(prefix, prefix, fn)
}

func (e *boltEngine) scanFrom(prefix, start []byte, fn func(k, v []byte) bool) error {
	end := layout.PrefixEnd(prefix)
	return e.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltBucket).Cursor()
		for k, v := c.Seek(start); k != nil && (end == nil || string(k) < string(end)); k, v = c.Next() {
			if !fn(k, v) {
				break
			}
		}
		return nil
	})
}

func (e *boltEngine) checkpoint(dir string) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	f, err := os.Create(filepath.Join(dir, "state.db"))
	if err != nil {
		return 0, err
	}
	var n int64
	err = e.db.View(func(tx *bolt.Tx) error {
		var werr error
		n, werr = tx.WriteTo(f)
		return werr
	})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func (e *boltEngine) close() error { return e.db.Close() }

func openEngine(kind, dir string, cacheBytes int64, sync bool) (engine, error) {
	switch kind {
	case "pebble":
		return openPebble(dir, cacheBytes, sync)
	case "bbolt":
		return openBolt(dir, sync)
	}
	return nil, fmt.Errorf("unknown engine %q (pebble or bbolt)", kind)
}

// dirBytes is the apparent size of the files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n, err
}
