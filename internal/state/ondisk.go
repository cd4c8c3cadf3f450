package state

// The store's state in the on-disk layout (internal/state/layout, issue 15).
// WriteLayout writes what a data dir written by the in-memory store holds
// (its snapshot, once restored) as the records and index keys of the layout:
// the conversion the first start on a disk-backed state machine runs once.
// ReadLayout is its inverse, so a test can check that the layout holds every
// field of the state: Store -> layout -> Store gives the same Dump, and
// writing the reloaded store again gives the same bytes.
//
// One difference is the layout's on purpose: a task is stored without its
// content copy and joined with the stored version it names on read. The
// in-memory store keeps whatever message the task was created with, which
// differs from the stored version after a label update or once that version
// is purged; ReadLayout gives the stored version (or none).

import (
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/indexify-go/indexify/internal/state/layout"
	"github.com/indexify-go/indexify/internal/state/statedb"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// LayoutWriter receives the layout's writes. Flush is called every
// LayoutFlushEvery writes so that the caller can commit a batch of bounded
// size (a million items are about a gigabyte of writes).
type LayoutWriter interface {
	layout.Writer
	Flush() error
}

// LayoutFlushEvery is how many writes go between two Flush calls.
const LayoutFlushEvery = 4096

// LayoutReader is what ReadLayout scans (statedb's DB and View fit).
type LayoutReader interface {
	Scan(prefix []byte, fn func(k, v []byte) bool) error
}

// countingWriter flushes the underlying writer every LayoutFlushEvery writes
// and keeps the first error.
type countingWriter struct {
	w   LayoutWriter
	n   int
	err error
}

func (c *countingWriter) Set(k, v []byte) error {
	if c.err == nil {
		c.err = c.w.Set(k, v)
		c.tick()
	}
	return c.err
}

func (c *countingWriter) Delete(k []byte) error {
	if c.err == nil {
		c.err = c.w.Delete(k)
		c.tick()
	}
	return c.err
}

func (c *countingWriter) tick() {
	if c.n++; c.err == nil && c.n%LayoutFlushEvery == 0 {
		c.err = c.w.Flush()
	}
}

func (c *countingWriter) record(k []byte, m proto.Message) {
	v, err := layout.EncodeRecord(m)
	if err != nil && c.err == nil {
		c.err = err
	}
	_ = c.Set(k, v)
}

// WriteLayout writes the whole state into w in the layout, except the
// applied index (the caller commits the last batch with it: statedb's
// Batch.Commit records it) and ends with a Flush. It holds the store's read
// lock throughout: it is for the one-off conversion and for tools, not for a
// store that serves traffic. It returns the number of writes.
func (s *Store) WriteLayout(w LayoutWriter) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.d
	c := &countingWriter{w: w}
	_ = c.Set(layout.MetaKey(layout.MetaChangeSeq), layout.EncodeUint(d.changeSeq))
	_ = c.Set(layout.MetaKey(layout.MetaOffsetSeq), layout.EncodeUint(d.offsetSeq))
	_ = c.Set(layout.MetaKey(layout.MetaRequestSq), layout.EncodeUint(uint64(len(d.requestOrder))))
	for _, n := range d.namespaces {
		c.record(layout.NamespaceKey(n.Name), n)
	}
	for _, m := range d.graphs {
		for _, g := range m {
			c.record(layout.GraphKey(g.Namespace, g.Name), g)
		}
	}
	for _, ls := range d.links {
		for _, l := range ls {
			c.record(layout.LinkKey(l.Namespace, l.GraphName, l.ContentSource, l.LinkedGraphName), l)
		}
	}
	for _, e := range d.executors {
		c.record(layout.ExecutorKey(e.Id), e)
	}
	for _, n := range d.nodes {
		c.record(layout.NodeKey(n.Id), n)
	}
	for _, m := range d.content {
		for _, v := range m {
			if c.err == nil {
				c.err = layout.PutContent(c, v)
			}
		}
	}
	for k, olds := range d.old {
		for _, v := range olds {
			c.record(layout.OldVersionKey(v.Namespace, v.Id, v.Version), v)
		}
		// The children index follows the highest stored version; PutContent
		// wrote it for ids with a latest version.
		if d.content[k.ns][k.id] == nil {
			if p := olds[len(olds)-1].ParentId; p != "" {
				_ = c.Set(layout.ChildKey(k.ns, p, k.id), nil)
			}
		}
	}
	for _, t := range d.tasks {
		if c.err == nil {
			c.err = layout.PutTask(c, nil, t)
		}
	}
	for k, st := range d.stats {
		_ = c.Set(layout.PolicyStatsKey(k.ns, k.graph, k.policy),
			layout.EncodeStats(layout.PolicyStats{Pending: st.pending, Success: st.success, Failure: st.failure}))
	}
	d.changes.each(func(ch *pb.StateChange) bool {
		if c.err == nil {
			c.err = layout.PutChange(c, ch, IsContentChange(ch.Type))
		}
		return c.err == nil
	})
	for _, g := range d.gcTasks {
		c.record(layout.GCTaskKey(g.Id), g)
	}
	for i, id := range d.requestOrder {
		c.record(layout.RequestKey(id), d.requests[id])
		_ = c.Set(layout.RequestOrderKey(uint64(i+1)), []byte(id))
	}
	if c.err == nil {
		c.err = w.Flush()
	}
	if c.err != nil {
		return c.n, fmt.Errorf("state: write layout: %w", c.err)
	}
	return c.n, nil
}

// WriteStateDB writes the whole state into db (which should be empty) in
// batches of LayoutFlushEvery writes; the last batch records the store's
// applied index. Until that last commit the database says applied index 0
// with part of the state in it, so a conversion that can be interrupted
// runs inside statedb.Build (ConvertSnapshot), which fills a directory of
// its own and renames it into place once this returns.
func (s *Store) WriteStateDB(db *statedb.DB) (int, error) {
	w := &batchWriter{db: db, b: db.NewBatch()}
	n, err := s.WriteLayout(w)
	if err != nil {
		w.b.Discard()
		return n, err
	}
	if err := w.b.Commit(s.AppliedIndex()); err != nil {
		return n, err
	}
	return n, db.Sync()
}

// ConvertSnapshot makes the state database under o from a format-1
// snapshot (the record stream an in-memory store writes; the snapshot of a
// data dir written before the state moved to disk): it restores the
// snapshot into a private store, the restore's cost paid once, and writes
// it with WriteStateDB through statedb.Build, so a crash or an error
// midway leaves no database and the next start converts again from the
// same snapshot. It returns the open database and the number of writes.
func ConvertSnapshot(r io.Reader, o statedb.Options) (*statedb.DB, int, error) {
	s := NewStore()
	if err := s.Restore(r); err != nil {
		return nil, 0, fmt.Errorf("state: convert snapshot: %w", err)
	}
	var n int
	db, err := statedb.Build(o, func(db *statedb.DB) error {
		var err error
		n, err = s.WriteStateDB(db)
		return err
	})
	if err != nil {
		return nil, n, fmt.Errorf("state: convert snapshot: %w", err)
	}
	return db, n, nil
}

// batchWriter commits a statedb batch at every Flush.
type batchWriter struct {
	db *statedb.DB
	b  *statedb.Batch
}

func (w *batchWriter) Set(k, v []byte) error { return w.b.Set(k, v) }
func (w *batchWriter) Delete(k []byte) error { return w.b.Delete(k) }
func (w *batchWriter) Flush() error {
	if w.b.Empty() {
		return nil
	}
	if err := w.b.Commit(0); err != nil {
		return err
	}
	w.b = w.db.NewBatch()
	return nil
}

// ReadLayout replaces the whole store with the state r holds in the layout,
// at applied index applied (statedb's DB.Applied). It reads the records and
// rebuilds every in-memory index from them, the way Restore does from a
// snapshot; the layout's own index keys are not read (WriteLayout of the
// result writes them again, so a test compares the two). On error the store
// is left unchanged.
func (s *Store) ReadLayout(r LayoutReader, applied uint64) error {
	d, err := readLayout(r)
	if err != nil {
		return fmt.Errorf("state: read layout: %w", err)
	}
	d.applied = applied
	s.mu.Lock()
	defer s.mu.Unlock()
	d.recordTasks = s.d.recordTasks
	s.d = d
	s.tellObserversLocked(true)
	s.notifyLocked()
	return nil
}

// scanRecords decodes every value under the table tag into a new message
// made by mk and passes it to fn.
func scanRecords[T proto.Message](r LayoutReader, tag byte, mk func() T, fn func(T)) error {
	var derr error
	err := r.Scan([]byte{tag}, func(_, v []byte) bool {
		m := mk()
		if derr = layout.DecodeRecord(v, m); derr != nil {
			return false
		}
		fn(m)
		return true
	})
	return errors.Join(err, derr)
}

func readLayout(r LayoutReader) (*data, error) {
	d := newData()
	var errs []error
	meta := map[string]*uint64{layout.MetaChangeSeq: &d.changeSeq, layout.MetaOffsetSeq: &d.offsetSeq}
	for name, p := range meta {
		err := r.Scan(layout.MetaKey(name), func(_, v []byte) bool {
			n, err := layout.DecodeUint(v)
			*p, errs = n, append(errs, err)
			return true
		})
		errs = append(errs, err)
	}
	errs = append(errs,
		scanRecords(r, layout.TagNamespace, func() *pb.Namespace { return &pb.Namespace{} },
			func(m *pb.Namespace) { d.namespaces[m.Name] = m }),
		scanRecords(r, layout.TagGraph, func() *pb.ExtractionGraph { return &pb.ExtractionGraph{} },
			func(m *pb.ExtractionGraph) {
				if d.graphs[m.Namespace] == nil {
					d.graphs[m.Namespace] = map[string]*pb.ExtractionGraph{}
				}
				d.graphs[m.Namespace][m.Name] = m
			}),
		scanRecords(r, layout.TagLink, func() *pb.GraphLink { return &pb.GraphLink{} },
			func(m *pb.GraphLink) { d.links[m.Namespace] = append(d.links[m.Namespace], m) }),
		scanRecords(r, layout.TagExecutor, func() *pb.Executor { return &pb.Executor{} },
			func(m *pb.Executor) { d.executors[m.Id] = m }),
		scanRecords(r, layout.TagNode, func() *pb.NodeInfo { return &pb.NodeInfo{} },
			func(m *pb.NodeInfo) { d.nodes[m.Id] = m }),
		scanRecords(r, layout.TagContent, func() *pb.Content { return &pb.Content{} },
			func(c *pb.Content) {
				internContent(c)
				if d.content[c.Namespace] == nil {
					d.content[c.Namespace] = map[string]*pb.Content{}
				}
				d.content[c.Namespace][c.Id] = c
			}),
		// Keys of one id are in ascending version order.
		scanRecords(r, layout.TagOldVersion, func() *pb.Content { return &pb.Content{} },
			func(c *pb.Content) {
				internContent(c)
				k := ckey{c.Namespace, c.Id}
				d.old[k] = append(d.old[k], c)
			}),
		scanRecords(r, layout.TagChange, func() *pb.StateChange { return &pb.StateChange{} },
			func(m *pb.StateChange) { d.insertChange(m) }),
		scanRecords(r, layout.TagGCTask, func() *pb.GCTask { return &pb.GCTask{} },
			func(m *pb.GCTask) { d.gcTasks[m.Id] = m }),
	)
	// Tasks last among the records; finishLoad joins each with the content
	// version it names.
	var tasks []*pb.Task
	errs = append(errs, scanRecords(r, layout.TagTask, func() *pb.Task { return &pb.Task{} },
		func(t *pb.Task) {
			d.putTask(t)
			tasks = append(tasks, t)
		}))
	results := map[string]*pb.CommandResult{}
	errs = append(errs, r.Scan([]byte{layout.TagRequest}, func(k, v []byte) bool {
		id, _, err := layout.ReadString(k[1:])
		res := &pb.CommandResult{}
		if err == nil {
			err = layout.DecodeRecord(v, res)
		}
		if err != nil {
			errs = append(errs, err)
			return false
		}
		results[id] = res
		return true
	}))
	errs = append(errs, r.Scan([]byte{layout.TagRequestOrder}, func(_, v []byte) bool {
		id := string(v)
		res, ok := results[id]
		if !ok {
			errs = append(errs, fmt.Errorf("request order names %q, which has no result", id))
			return false
		}
		d.requests[id] = res
		d.requestOrder = append(d.requestOrder, id)
		return true
	}))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(d.requests) != len(results) {
		return nil, fmt.Errorf("%d request results, %d in the request order", len(results), len(d.requests))
	}
	d.finishLoad(tasks)
	return d, nil
}
