package state

// Snapshot format (version 1): a stream of records, each
//
//	uvarint(len(payload)) payload
//
// where payload = one kind byte + a protobuf message. The first record is
// the header (kind 1: format version, applied index, counters, encoded with
// protowire since it has no generated message); the last is the end marker
// (kind 255: number of records before it), so a truncated file is detected
// instead of silently restoring part of the state. Records are written one
// at a time through a buffered writer, so a snapshot of millions of items
// never exists as one buffer.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

const snapshotFormat = 1

const (
	recHeader     byte = 1
	recNamespace  byte = 2
	recGraph      byte = 3
	recLink       byte = 4
	recExecutor   byte = 5
	recNode       byte = 6
	recContent    byte = 7
	recTask       byte = 8 // task with its own content copy
	recTaskShared byte = 9 // task whose content is the stored version it names
	recChange     byte = 10
	recGCTask     byte = 11
	recRequest    byte = 12 // request id + result, in FIFO order
	recEnd        byte = 255
)

// maxRecord guards Restore against absurd lengths from a corrupt stream.
const maxRecord = 256 << 20

// storeSnapshot is a point-in-time view: pointers to immutable messages,
// collected under the read lock, serialised later without any lock.
type storeSnapshot struct {
	applied, changeSeq, offsetSeq uint64
	namespaces                    []*pb.Namespace
	graphs                        []*pb.ExtractionGraph
	links                         []*pb.GraphLink
	executors                     []*pb.Executor
	nodes                         []*pb.NodeInfo
	contents                      []*pb.Content
	tasks                         []*pb.Task
	sharedContent                 []bool // per task: Content is the stored version
	changes                       []*pb.StateChange
	gcTasks                       []*pb.GCTask
	requestIDs                    []string
	requests                      []*pb.CommandResult
}

func (s *Store) snapshot() *storeSnapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.d
	ss := &storeSnapshot{applied: d.applied, changeSeq: d.changeSeq, offsetSeq: d.offsetSeq}
	for _, n := range d.namespaces {
		ss.namespaces = append(ss.namespaces, n)
	}
	for _, m := range d.graphs {
		for _, g := range m {
			ss.graphs = append(ss.graphs, g)
		}
	}
	for _, ls := range d.links {
		ss.links = append(ss.links, ls...)
	}
	for _, e := range d.executors {
		ss.executors = append(ss.executors, e)
	}
	for _, n := range d.nodes {
		ss.nodes = append(ss.nodes, n)
	}
	n := 0
	for _, m := range d.content {
		n += len(m)
	}
	ss.contents = make([]*pb.Content, 0, n+len(d.old))
	for _, olds := range d.old {
		ss.contents = append(ss.contents, olds...)
	}
	for _, m := range d.content {
		for _, c := range m {
			ss.contents = append(ss.contents, c)
		}
	}
	ss.tasks = make([]*pb.Task, 0, len(d.tasks))
	ss.sharedContent = make([]bool, 0, len(d.tasks))
	for _, t := range d.tasks {
		ss.tasks = append(ss.tasks, t)
		shared := t.Content != nil && t.Content == d.version(t.Namespace, t.ContentId, t.ContentVersion)
		ss.sharedContent = append(ss.sharedContent, shared)
	}
	ss.changes = make([]*pb.StateChange, 0, d.changes.len())
	d.changes.each(func(c *pb.StateChange) bool {
		ss.changes = append(ss.changes, c)
		return true
	})
	for _, g := range d.gcTasks {
		ss.gcTasks = append(ss.gcTasks, g)
	}
	ss.requestIDs = append([]string(nil), d.requestOrder...)
	for _, id := range ss.requestIDs {
		ss.requests = append(ss.requests, d.requests[id])
	}
	return ss
}

// Persist implements raft.FSMSnapshot.
func (ss *storeSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := ss.write(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (ss *storeSnapshot) Release() {}

type recWriter struct {
	w       *bufio.Writer
	buf     []byte
	records uint64
	err     error
}

func (rw *recWriter) raw(kind byte, payload []byte) {
	if rw.err != nil {
		return
	}
	var lenbuf [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(lenbuf[:], uint64(len(payload)+1))
	if _, rw.err = rw.w.Write(lenbuf[:n]); rw.err != nil {
		return
	}
	if rw.err = rw.w.WriteByte(kind); rw.err != nil {
		return
	}
	_, rw.err = rw.w.Write(payload)
	rw.records++
}

func (rw *recWriter) msg(kind byte, m proto.Message) {
	if rw.err != nil {
		return
	}
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(rw.buf[:0], m)
	if err != nil {
		rw.err = err
		return
	}
	rw.buf = b
	rw.raw(kind, b)
}

func (ss *storeSnapshot) write(w io.Writer) error {
	rw := &recWriter{w: bufio.NewWriterSize(w, 1<<20)}
	var h []byte
	h = protowire.AppendTag(h, 1, protowire.VarintType)
	h = protowire.AppendVarint(h, snapshotFormat)
	h = protowire.AppendTag(h, 2, protowire.VarintType)
	h = protowire.AppendVarint(h, ss.applied)
	h = protowire.AppendTag(h, 3, protowire.VarintType)
	h = protowire.AppendVarint(h, ss.changeSeq)
	h = protowire.AppendTag(h, 4, protowire.VarintType)
	h = protowire.AppendVarint(h, ss.offsetSeq)
	rw.raw(recHeader, h)
	for _, m := range ss.namespaces {
		rw.msg(recNamespace, m)
	}
	for _, m := range ss.graphs {
		rw.msg(recGraph, m)
	}
	for _, m := range ss.links {
		rw.msg(recLink, m)
	}
	for _, m := range ss.executors {
		rw.msg(recExecutor, m)
	}
	for _, m := range ss.nodes {
		rw.msg(recNode, m)
	}
	for _, m := range ss.contents {
		rw.msg(recContent, m)
	}
	for i, t := range ss.tasks {
		if ss.sharedContent[i] {
			// Written without the content copy; Restore points it at the
			// stored version again, keeping one message per version.
			slim := cloneTask(t)
			slim.Content = nil
			rw.msg(recTaskShared, slim)
			continue
		}
		rw.msg(recTask, t)
	}
	for _, m := range ss.changes {
		rw.msg(recChange, m)
	}
	for _, m := range ss.gcTasks {
		rw.msg(recGCTask, m)
	}
	for i, id := range ss.requestIDs {
		rb, err := proto.MarshalOptions{Deterministic: true}.Marshal(ss.requests[i])
		if err != nil {
			return err
		}
		var p []byte
		p = protowire.AppendTag(p, 1, protowire.BytesType)
		p = protowire.AppendString(p, id)
		p = protowire.AppendTag(p, 2, protowire.BytesType)
		p = protowire.AppendBytes(p, rb)
		rw.raw(recRequest, p)
	}
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.VarintType)
	e = protowire.AppendVarint(e, rw.records)
	rw.raw(recEnd, e)
	if rw.err != nil {
		return fmt.Errorf("write snapshot: %w", rw.err)
	}
	if err := rw.w.Flush(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return nil
}

// WriteSnapshot writes a consistent snapshot of the store to w (the same
// bytes the Raft snapshot holds); used for backups and tests.
func (s *Store) WriteSnapshot(w io.Writer) error {
	return s.snapshot().write(w)
}

// Restore replaces the whole store with a snapshot read from r. On error
// the store is left unchanged.
func (s *Store) Restore(r io.Reader) error {
	d, err := readSnapshot(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d.recordTasks = s.d.recordTasks
	s.d = d
	s.tellObserversLocked(true)
	s.notifyLocked()
	return nil
}

// varints decodes a protowire message made only of varint fields.
func varints(b []byte) (map[protowire.Number]uint64, error) {
	out := map[protowire.Number]uint64{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType {
			return nil, errors.New("bad varint record")
		}
		b = b[n:]
		v, m := protowire.ConsumeVarint(b)
		if m < 0 {
			return nil, errors.New("bad varint record")
		}
		b = b[m:]
		out[num] = v
	}
	return out, nil
}

func readSnapshot(r io.Reader) (*data, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	d := newData()
	var records uint64
	var pendingShared []*pb.Task
	var buf []byte
	sawHeader := false
	for {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, fmt.Errorf("restore: truncated snapshot (no end record): %w", err)
		}
		if n == 0 || n > maxRecord {
			return nil, fmt.Errorf("restore: bad record length %d", n)
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, fmt.Errorf("restore: truncated record: %w", err)
		}
		kind, payload := buf[0], buf[1:]
		if !sawHeader && kind != recHeader {
			return nil, errors.New("restore: snapshot does not start with a header")
		}
		if kind == recEnd {
			f, err := varints(payload)
			if err != nil {
				return nil, fmt.Errorf("restore: end record: %w", err)
			}
			if f[1] != records {
				return nil, fmt.Errorf("restore: end record counts %d records, read %d", f[1], records)
			}
			break
		}
		records++
		if err := d.load(kind, payload, &pendingShared); err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		sawHeader = true
	}
	d.finishLoad(pendingShared)
	return d, nil
}

func unmarshalInto[T proto.Message](payload []byte, m T) (T, error) {
	// Copy: the payload buffer is reused for the next record and proto
	// strings must not alias it.
	err := proto.Unmarshal(payload, m)
	return m, err
}

// load adds one record to d. Indexes are rebuilt by finishLoad.
func (d *data) load(kind byte, payload []byte, shared *[]*pb.Task) error {
	switch kind {
	case recHeader:
		f, err := varints(payload)
		if err != nil {
			return err
		}
		if f[1] != snapshotFormat {
			return fmt.Errorf("unsupported snapshot format %d", f[1])
		}
		d.applied, d.changeSeq, d.offsetSeq = f[2], f[3], f[4]
	case recNamespace:
		m, err := unmarshalInto(payload, &pb.Namespace{})
		if err != nil {
			return err
		}
		d.namespaces[m.Name] = m
	case recGraph:
		m, err := unmarshalInto(payload, &pb.ExtractionGraph{})
		if err != nil {
			return err
		}
		if d.graphs[m.Namespace] == nil {
			d.graphs[m.Namespace] = map[string]*pb.ExtractionGraph{}
		}
		d.graphs[m.Namespace][m.Name] = m
	case recLink:
		m, err := unmarshalInto(payload, &pb.GraphLink{})
		if err != nil {
			return err
		}
		d.links[m.Namespace] = append(d.links[m.Namespace], m)
	case recExecutor:
		m, err := unmarshalInto(payload, &pb.Executor{})
		if err != nil {
			return err
		}
		d.executors[m.Id] = m
	case recNode:
		m, err := unmarshalInto(payload, &pb.NodeInfo{})
		if err != nil {
			return err
		}
		d.nodes[m.Id] = m
	case recContent:
		c, err := unmarshalInto(payload, &pb.Content{})
		if err != nil {
			return err
		}
		internContent(c)
		if c.Latest {
			if d.content[c.Namespace] == nil {
				d.content[c.Namespace] = map[string]*pb.Content{}
			}
			d.content[c.Namespace][c.Id] = c
		} else {
			k := ckey{c.Namespace, c.Id}
			d.old[k] = append(d.old[k], c)
		}
	case recTask, recTaskShared:
		t, err := unmarshalInto(payload, &pb.Task{})
		if err != nil {
			return err
		}
		if kind == recTaskShared {
			*shared = append(*shared, t)
		}
		d.putTask(t)
	case recChange:
		m, err := unmarshalInto(payload, &pb.StateChange{})
		if err != nil {
			return err
		}
		d.insertChange(m)
	case recGCTask:
		m, err := unmarshalInto(payload, &pb.GCTask{})
		if err != nil {
			return err
		}
		d.gcTasks[m.Id] = m
	case recRequest:
		var id string
		var res []byte
		b := payload
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 || typ != protowire.BytesType {
				return errors.New("bad request record")
			}
			b = b[n:]
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errors.New("bad request record")
			}
			b = b[m:]
			switch num {
			case 1:
				id = string(v)
			case 2:
				res = v
			}
		}
		r, err := unmarshalInto(res, &pb.CommandResult{})
		if err != nil {
			return err
		}
		d.requests[id] = r
		d.requestOrder = append(d.requestOrder, id)
	default:
		return fmt.Errorf("unknown record kind %d", kind)
	}
	return nil
}

// finishLoad rebuilds the derived indexes after all records are in.
func (d *data) finishLoad(shared []*pb.Task) {
	for k, olds := range d.old {
		sort.Slice(olds, func(i, j int) bool { return olds[i].Version < olds[j].Version })
		d.old[k] = olds
	}
	for ns, m := range d.content {
		for id := range m {
			d.relinkParent(ns, id, nil, d.maxStored(ns, id))
		}
		d.rebuildOffsets(ns)
	}
	for k := range d.old {
		if d.content[k.ns][k.id] == nil {
			d.relinkParent(k.ns, k.id, nil, d.maxStored(k.ns, k.id))
		}
	}
	for _, t := range shared {
		t.Content = d.version(t.Namespace, t.ContentId, t.ContentVersion)
	}
	for _, t := range d.tasks {
		internTask(t)
	}
	d.rebuildExtractors()
}
