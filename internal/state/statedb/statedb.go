// Package statedb is the embedded database that holds the coordinator's
// replicated state on disk (issue 15): pebble, opened on a data directory or
// on pebble's in-memory file system, with the protocol the FSM needs around
// it and nothing about what the keys mean (that is internal/state/layout).
//
//   - A batch of applied log entries is one pebble batch that also records
//     the applied index (Commit), committed without an fsync: the Raft log
//     is the durable record, so after a crash the state and its applied index
//     roll back together to some earlier batch and Raft replays the rest.
//   - Before Raft may drop log entries (a snapshot), Sync makes every
//     committed batch durable, so the store never falls behind the log's
//     first index.
//   - A snapshot is a checkpoint (hard links to immutable files) streamed as
//     snapshot format 2 (internal/state/checkpoint); Install swaps a received
//     one in for the live directory without decoding a record.
//   - Digest hashes an ordered scan of every key and value: replicas that
//     applied the same log to the same index agree byte for byte although
//     their files differ.
//
// See internal/state/DESIGN.md, "On-disk state".
package statedb

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/indexify-go/indexify/internal/state/checkpoint"
	"github.com/indexify-go/indexify/internal/state/layout"
)

// DefaultCacheBytes is the block cache when Options.CacheBytes is 0.
const DefaultCacheBytes = 64 << 20

// Options configure Open.
type Options struct {
	// Dir is the directory the database lives under (created if missing).
	// "" keeps everything in memory: a throwaway store for tests and tools.
	Dir string
	// FS overrides the file system (tests use a crashable in-memory one);
	// nil means the operating system's for a Dir, memory otherwise.
	FS vfs.FS
	// CacheBytes bounds pebble's block cache (0 = DefaultCacheBytes).
	CacheBytes int64
	// Logger receives pebble's errors; nil discards them.
	Logger *slog.Logger
}

// Names inside Options.Dir.
const (
	liveName        = "db"          // the open database
	nextName        = "db.next"     // a received checkpoint waiting to be swapped in
	buildName       = "db.build"    // a database Build is filling
	checkpointsName = "checkpoints" // checkpoints being streamed to a snapshot
)

// ErrNewerFormat is returned by Open for a database written by a newer
// release's layout: it is refused, never guessed at.
var ErrNewerFormat = errors.New("statedb: the state was written by a newer release (layout format above this binary's)")

// DB is an open state database. Batches are written by one goroutine (the
// FSM's); reads may come from any goroutine.
type DB struct {
	fs    vfs.FS
	root  string
	live  string // the directory under root that is open: liveName, or buildName in Build
	opts  Options
	cache *pebble.Cache

	// commitMu orders Commit, Checkpoint and Install, so a checkpoint
	// holds exactly the applied index it is named after.
	commitMu sync.Mutex
	seq      uint64 // checkpoint names, under commitMu

	mu      sync.RWMutex // guards db (Install swaps it) and applied
	db      *pebble.DB
	applied uint64
}

// Open opens (or creates) the database under o.Dir, finishing or undoing a
// snapshot install a crash interrupted.
func Open(o Options) (*DB, error) {
	return openDir(resolve(o), liveName)
}

// resolve fills in Options' defaults, so that reopening with the result
// finds the same file system (a new in-memory one would be empty).
func resolve(o Options) Options {
	if o.FS == nil {
		if o.Dir == "" {
			o.FS = vfs.NewMem()
		} else {
			o.FS = vfs.Default
		}
	}
	if o.Dir == "" {
		o.Dir = "/state"
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	return o
}

// openDir opens the database directory name under o.Dir (resolved): the live
// one, or Build's side directory.
func openDir(o Options, name string) (*DB, error) {
	fs, root := o.FS, o.Dir
	if err := fs.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("statedb: %w", err)
	}
	// A directory made here must survive a crash like the files in it.
	if err := checkpoint.SyncDir(fs, fs.PathDir(root)); err != nil {
		return nil, err
	}
	d := &DB{fs: fs, root: root, live: name, opts: o, cache: pebble.NewCache(o.CacheBytes)}
	if err := d.recover(); err != nil {
		d.cache.Unref()
		return nil, err
	}
	if err := d.openLive(); err != nil {
		d.cache.Unref()
		return nil, err
	}
	return d, nil
}

// recover clears what a crash can leave under the root: an interrupted
// install is finished or undone, an unfinished Build is deleted (it is
// redone from its source), and checkpoints are only ever streamed by a
// running process.
func (d *DB) recover() error {
	if d.live != liveName {
		return nil // Build's side directory: Build cleared the root
	}
	if err := checkpoint.Recover(d.fs, d.path(nextName), d.path(liveName)); err != nil {
		return err
	}
	for _, name := range []string{buildName, checkpointsName} {
		if err := d.fs.RemoveAll(d.path(name)); err != nil {
			return fmt.Errorf("statedb: %w", err)
		}
	}
	return nil
}

func (d *DB) path(name string) string { return d.fs.PathJoin(d.root, name) }

// openLive opens the live directory and reads its applied index; the
// caller holds mu for writing (or is Open).
func (d *DB) openLive() error {
	db, err := pebble.Open(d.path(d.live), d.pebbleOptions())
	if err != nil {
		return fmt.Errorf("statedb: open: %w", err)
	}
	applied, err := checkFormat(db)
	if err != nil {
		db.Close()
		return err
	}
	d.db, d.applied = db, applied
	return nil
}

func (d *DB) pebbleOptions() *pebble.Options {
	o := &pebble.Options{FS: d.fs, Cache: d.cache, Logger: pebbleLogger{d.opts.Logger}}
	// Bloom filters on every level: a point read by id (a task, a content
	// item) then skips the files that cannot hold the key.
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	o.EnsureDefaults()
	return o
}

// checkFormat stamps a new database with layout.FormatVersion and refuses
// one from a newer release; it returns the stored applied index.
func checkFormat(db *pebble.DB) (uint64, error) {
	format, ok, err := getUint(db, layout.MetaKey(layout.MetaFormat))
	if err != nil {
		return 0, err
	}
	if !ok {
		empty, err := isEmpty(db)
		if err != nil {
			return 0, err
		}
		if !empty {
			return 0, errors.New("statedb: the database has data but no layout format (not written by indexify)")
		}
		if err := db.Set(layout.MetaKey(layout.MetaFormat), layout.EncodeUint(layout.FormatVersion), pebble.Sync); err != nil {
			return 0, fmt.Errorf("statedb: %w", err)
		}
		return 0, nil
	}
	if format > layout.FormatVersion {
		return 0, fmt.Errorf("%w: format %d, this binary knows %d", ErrNewerFormat, format, layout.FormatVersion)
	}
	applied, _, err := getUint(db, layout.MetaKey(layout.MetaApplied))
	return applied, err
}

func isEmpty(db *pebble.DB) (bool, error) {
	it, err := db.NewIter(nil)
	if err != nil {
		return false, fmt.Errorf("statedb: %w", err)
	}
	empty := !it.First()
	return empty, it.Close()
}

type getter interface {
	Get(k []byte) ([]byte, io.Closer, error)
}

func getUint(g getter, k []byte) (uint64, bool, error) {
	v, ok, err := get(g, k)
	if err != nil || !ok {
		return 0, false, err
	}
	n, err := layout.DecodeUint(v)
	if err != nil {
		return 0, false, fmt.Errorf("statedb: %s: %w", k, err)
	}
	return n, true, nil
}

// get returns a copy of the value (pebble's is only valid until Close).
func get(g getter, k []byte) ([]byte, bool, error) {
	v, c, err := g.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("statedb: get: %w", err)
	}
	out := append([]byte(nil), v...)
	return out, true, c.Close()
}

// Applied is the Raft index of the last committed batch.
func (d *DB) Applied() uint64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.applied
}

// Get reads one committed value.
func (d *DB) Get(k []byte) ([]byte, bool, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return get(d.db, k)
}

// Scan calls fn for every committed key with the prefix, ascending, until
// fn returns false. Key and value are only valid during the call.
func (d *DB) Scan(prefix []byte, fn func(k, v []byte) bool) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return scan(d.db, prefix, nil, fn)
}

type iterable interface {
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

func scan(r iterable, prefix, start []byte, fn func(k, v []byte) bool) error {
	o := &pebble.IterOptions{LowerBound: prefix, UpperBound: layout.PrefixEnd(prefix)}
	if len(start) > 0 {
		o.LowerBound = start
	}
	it, err := r.NewIter(o)
	if err != nil {
		return fmt.Errorf("statedb: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("statedb: %w", err)
		}
		if !fn(it.Key(), v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("statedb: %w", err)
	}
	return nil
}

// View is a consistent read-only view of the committed state: later
// batches are not visible through it. Close it when done.
type View struct {
	s       *pebble.Snapshot
	applied uint64
}

// View returns a view of the state as of the last committed batch.
func (d *DB) View() *View {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return &View{s: d.db.NewSnapshot(), applied: d.applied}
}

// Applied is the applied index the view holds.
func (v *View) Applied() uint64 { return v.applied }

// Get reads one value of the view.
func (v *View) Get(k []byte) ([]byte, bool, error) { return get(v.s, k) }

// Scan is DB.Scan on the view.
func (v *View) Scan(prefix []byte, fn func(k, v []byte) bool) error {
	return scan(v.s, prefix, nil, fn)
}

// ScanFrom is Scan starting at the first key >= start inside prefix.
func (v *View) ScanFrom(prefix, start []byte, fn func(k, v []byte) bool) error {
	return scan(v.s, prefix, start, fn)
}

// Close releases the view.
func (v *View) Close() error { return v.s.Close() }

// Batch collects the writes of one batch of applied entries. Reads through
// it see its own writes first, then the committed state, so a later entry
// of the batch sees what an earlier one wrote.
type Batch struct {
	d *DB
	b *pebble.Batch
}

// NewBatch starts a batch. Only one batch is written at a time (the FSM's).
func (d *DB) NewBatch() *Batch {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return &Batch{d: d, b: d.db.NewIndexedBatch()}
}

// Set writes k = v (both copied). It implements layout.Writer.
func (b *Batch) Set(k, v []byte) error { return b.b.Set(k, v, nil) }

// Delete removes k. It implements layout.Writer.
func (b *Batch) Delete(k []byte) error { return b.b.Delete(k, nil) }

// Get reads through the batch.
func (b *Batch) Get(k []byte) ([]byte, bool, error) { return get(b.b, k) }

// Scan is DB.Scan through the batch.
func (b *Batch) Scan(prefix []byte, fn func(k, v []byte) bool) error {
	return scan(b.b, prefix, nil, fn)
}

// Empty reports whether the batch holds no write.
func (b *Batch) Empty() bool { return b.b.Empty() }

// Commit records applied as the applied index in the batch and commits it
// atomically without an fsync (see the package comment). The batch is
// released either way.
func (b *Batch) Commit(applied uint64) error {
	defer b.b.Close()
	if err := layout.PutApplied(b, applied); err != nil {
		return err
	}
	d := b.d
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	if err := b.b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("statedb: commit: %w", err)
	}
	d.mu.Lock()
	d.applied = applied
	d.mu.Unlock()
	return nil
}

// Discard drops a batch without committing it.
func (b *Batch) Discard() { b.b.Close() }

// Sync makes every committed batch durable.
func (d *DB) Sync() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("statedb: sync: %w", err)
	}
	return nil
}

// Flush writes the memtables out as (compressed) table files and waits for
// them: the disk then holds the state as it will in steady state, not as a
// write-ahead log. A large one-off write (the conversion on first start)
// flushes before it is measured or checkpointed.
func (d *DB) Flush() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.db.Flush(); err != nil {
		return fmt.Errorf("statedb: flush: %w", err)
	}
	return nil
}

// Checkpoint is a consistent copy of the database at one applied index,
// ready to stream as a snapshot.
type Checkpoint struct {
	fs      vfs.FS
	dir     string
	Applied uint64
}

// Checkpoint takes a checkpoint of the committed state. It is cheap (hard
// links on a real disk) and does not block batches; it is durable when it
// returns, and so is every batch committed before it.
func (d *DB) Checkpoint() (*Checkpoint, error) {
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	d.seq++
	applied := d.Applied()
	name := d.fs.PathJoin(d.path(checkpointsName), strconv.FormatUint(applied, 10)+"-"+strconv.FormatUint(d.seq, 10))
	if err := d.fs.MkdirAll(d.path(checkpointsName), 0o700); err != nil {
		return nil, fmt.Errorf("statedb: %w", err)
	}
	// WithFlushedWAL syncs the WAL first, so every batch committed so far
	// is durable too.
	d.mu.RLock()
	err := d.db.Checkpoint(name, pebble.WithFlushedWAL())
	d.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("statedb: checkpoint: %w", err)
	}
	return &Checkpoint{fs: d.fs, dir: name, Applied: applied}, nil
}

// Stream writes the checkpoint to w as a format-2 snapshot.
func (c *Checkpoint) Stream(w io.Writer) error {
	return checkpoint.Write(w, c.fs, c.dir, c.Applied)
}

// Release deletes the checkpoint's files.
func (c *Checkpoint) Release() error { return c.fs.RemoveAll(c.dir) }

// Install replaces the whole state with the snapshot streamed by r (made by
// Checkpoint.Stream): the files go to a side directory, are synced and
// verified, the received database is opened once to check its applied
// index, and only then swapped in for the live one. On any error before
// the swap the live state is unchanged. It returns the new applied index.
// No batch may be open during Install.
func (d *DB) Install(r io.Reader) (uint64, error) {
	next := d.path(nextName)
	if err := d.fs.RemoveAll(next); err != nil {
		return 0, fmt.Errorf("statedb: %w", err)
	}
	applied, err := checkpoint.Read(r, d.fs, next)
	if err != nil {
		return 0, err
	}
	if err := d.verify(next, applied); err != nil {
		d.fs.RemoveAll(next)
		return 0, err
	}
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.db.Close(); err != nil {
		return 0, fmt.Errorf("statedb: close for install: %w", err)
	}
	if err := checkpoint.Install(d.fs, next, d.path(liveName)); err != nil {
		return 0, err
	}
	if err := d.openLive(); err != nil {
		return 0, err
	}
	return d.applied, nil
}

// verify opens a received database and checks that it holds the applied
// index its stream's header named.
func (d *DB) verify(dir string, applied uint64) error {
	o := d.pebbleOptions()
	o.ReadOnly = true
	db, err := pebble.Open(dir, o)
	if err != nil {
		return fmt.Errorf("statedb: received snapshot does not open: %w", err)
	}
	defer db.Close()
	got, err := checkFormat(db)
	if err != nil {
		return err
	}
	if got != applied {
		return fmt.Errorf("statedb: received snapshot holds applied index %d, its header says %d", got, applied)
	}
	return nil
}

// Digest returns the state digest (layout.Digest over every key and value
// in order) and the applied index it was taken at.
func (d *DB) Digest() ([32]byte, uint64, error) {
	v := d.View()
	defer v.Close()
	dg := layout.NewDigest()
	if err := scan(v.s, nil, nil, func(k, val []byte) bool {
		dg.Add(k, val)
		return true
	}); err != nil {
		return [32]byte{}, 0, err
	}
	return dg.Sum(), v.applied, nil
}

// Close closes the database.
func (d *DB) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.db.Close()
	d.cache.Unref()
	if err != nil {
		return fmt.Errorf("statedb: close: %w", err)
	}
	return nil
}

// pebbleLogger sends pebble's errors to slog and drops its informational
// lines (WAL replay notes, compaction reports).
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(string, ...interface{}) {}
func (p pebbleLogger) Errorf(format string, args ...interface{}) {
	if p.l != nil {
		p.l.Error("pebble: " + fmt.Sprintf(format, args...))
	}
}
func (p pebbleLogger) Fatalf(format string, args ...interface{}) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	if p.l != nil {
		p.l.Error(msg)
	}
	panic(msg)
}
