package state

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/indexify-go/indexify/internal/state/layout"
	"github.com/indexify-go/indexify/internal/state/statedb"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// memLayout is a LayoutWriter and LayoutReader over a map, for tests.
type memLayout struct {
	kv      map[string][]byte
	flushes int
}

func newMemLayout() *memLayout { return &memLayout{kv: map[string][]byte{}} }

func (m *memLayout) Set(k, v []byte) error { m.kv[string(k)] = bytes.Clone(v); return nil }
func (m *memLayout) Delete(k []byte) error { delete(m.kv, string(k)); return nil }
func (m *memLayout) Flush() error          { m.flushes++; return nil }

func (m *memLayout) Scan(prefix []byte, fn func(k, v []byte) bool) error {
	keys := slices.Sorted(maps.Keys(m.kv))
	for _, k := range keys {
		if strings.HasPrefix(k, string(prefix)) && !fn([]byte(k), m.kv[k]) {
			break
		}
	}
	return nil
}

// joinedDump is Dump with every task's content replaced by the stored
// version it names (nil once purged): what the layout keeps, where the
// in-memory store keeps the message the task was created with.
func joinedDump(s *Store) string {
	ss := s.snapshot()
	s.mu.RLock()
	for i, t := range ss.tasks {
		j := cloneTask(t)
		j.Content = s.d.version(t.Namespace, t.ContentId, t.ContentVersion)
		ss.tasks[i] = j
	}
	s.mu.RUnlock()
	return ss.dump(textItem)
}

// randomStore applies a random history (random_test.go's universe) and
// returns the store.
func randomStore(t *testing.T, seed int64, steps int) *Store {
	t.Helper()
	return randomHistory(t, seed, steps, nil)
}

// randomHistory is randomStore calling after (when not nil) with the store
// after every step.
func randomHistory(t *testing.T, seed int64, steps int, after func(step int, s *Store)) *Store {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	h := newHarness(t)
	h.ok(nsCmd("ns"))
	h.ok(registerCmd("ex1", "chunk", "embed"))
	h.ok(graphCmd("ns", "g", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	for i := 1; i <= steps; i++ {
		h.apply(randomCommand(r, h.store()))
		if after != nil {
			after(i, h.store())
		}
	}
	return h.store()
}

// backlogStore is a store holding n items, each with its pending task of
// extractor "chunk", created by one scheduler update.
func backlogStore(t *testing.T, n int) *Store {
	t.Helper()
	h := newHarness(t)
	h.setup()
	var cs []*pb.Content
	u := &pb.SchedulerUpdateCmd{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("c%05d", i)
		cs = append(cs, content("ns", id, fmt.Sprintf("h%d", i), "g"))
		u.NewTasks = append(u.NewTasks, h.newTask("ns", "g", "chunker", "chunk", id, 1))
	}
	h.ok(contentCmd(cs...))
	h.ok(schedCmd(u))
	return h.store()
}

// Store -> layout -> Store keeps the state (with tasks joined to their
// stored content), rebuilds the same in-memory indexes, and writing the
// reloaded store gives the same keys and values: the layout holds every
// field and every index key follows from the records.
func TestLayoutRoundTripKeepsTheState(t *testing.T) {
	differs := 0
	for seed := int64(1); seed <= 12; seed++ {
		s := randomStore(t, seed, 300)
		first := newMemLayout()
		n, err := s.WriteLayout(first)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(first.kv) {
			t.Fatalf("seed %d: %d writes reported, %d keys written", seed, n, len(first.kv))
		}
		if first.flushes != n/LayoutFlushEvery+1 {
			t.Fatalf("seed %d: %d flushes for %d writes", seed, first.flushes, n)
		}
		back := NewStore()
		if err := back.ReadLayout(first, s.AppliedIndex()); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		want := joinedDump(s)
		if want != s.Dump() {
			differs++
		}
		if got := back.Dump(); got != want {
			t.Fatalf("seed %d: reloaded state differs:\n%s\n----\n%s", seed, want, got)
		}
		if err := verifyIndexes(back); err != nil {
			t.Fatalf("seed %d: reloaded indexes: %v", seed, err)
		}
		if err := sameIndexKeys(s, first); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		again := newMemLayout()
		if _, err := back.WriteLayout(again); err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(first.kv, again.kv, bytes.Equal) {
			t.Fatalf("seed %d: writing the reloaded store gives other keys or values (%d vs %d keys)",
				seed, len(first.kv), len(again.kv))
		}
	}
	// The join is exercised: some histories hold a task whose message is
	// not its stored version's (relabelled or purged content).
	if differs == 0 {
		t.Fatal("no history had a task whose content differs from the stored version; the join is untested")
	}
}

// The same round trip through pebble (statedb in memory), in batches of
// LayoutFlushEvery writes, with more writes than one batch.
func TestLayoutRoundTripThroughStateDB(t *testing.T) {
	s := backlogStore(t, LayoutFlushEvery/3)
	db, err := statedb.Open(statedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n, err := s.WriteStateDB(db)
	if err != nil {
		t.Fatal(err)
	}
	if n <= LayoutFlushEvery {
		t.Fatalf("only %d writes: the test must span batches", n)
	}
	if db.Applied() != s.AppliedIndex() {
		t.Fatalf("applied %d, want %d", db.Applied(), s.AppliedIndex())
	}
	back := NewStore()
	if err := back.ReadLayout(db, db.Applied()); err != nil {
		t.Fatal(err)
	}
	if got, want := back.Dump(), joinedDump(s); got != want {
		t.Fatalf("reloaded state differs:\n%s\n----\n%s", want, got)
	}
	if got, want := len(back.PendingTasks()), len(s.PendingTasks()); got != want || want == 0 {
		t.Fatalf("pending tasks %d, want %d (> 0)", got, want)
	}
}

// A broken record is an error and leaves the store as it was.
func TestReadLayoutRefusesBrokenRecords(t *testing.T) {
	s := randomStore(t, 3, 200)
	for _, tc := range []struct {
		name   string
		break_ func(m *memLayout)
	}{
		{"record version", func(m *memLayout) {
			for k, v := range m.kv {
				if k[0] == layout.TagTask {
					m.kv[k] = append([]byte{0x7f}, v[1:]...)
					return
				}
			}
		}},
		{"protobuf", func(m *memLayout) {
			for k := range m.kv {
				if k[0] == layout.TagContent {
					m.kv[k] = []byte{layout.RecordVersion, 0xff, 0xff}
					return
				}
			}
		}},
		{"counter", func(m *memLayout) { m.kv[string(layout.MetaKey(layout.MetaChangeSeq))] = []byte{1} }},
		{"request order", func(m *memLayout) { m.kv[string(layout.RequestOrderKey(1))] = []byte("no such request") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemLayout()
			if _, err := s.WriteLayout(m); err != nil {
				t.Fatal(err)
			}
			tc.break_(m)
			target := randomStore(t, 4, 50)
			before := target.Dump()
			if err := target.ReadLayout(m, 99); err == nil {
				t.Fatal("a broken layout was read without an error")
			}
			if target.Dump() != before {
				t.Fatal("a failed ReadLayout changed the store")
			}
		})
	}
}

// indexTags are the layout's tables that only index records.
var indexTags = []byte{layout.TagChild, layout.TagOffset, layout.TagTaskByContent, layout.TagPending,
	layout.TagAssigned, layout.TagPolicyStats, layout.TagChangedCont}

// sameIndexKeys checks the layout's index tables against the store's
// in-memory indexes: the same entries (stale offset refs excluded), and the
// pending queue of each extractor in the same order.
func sameIndexKeys(s *Store, m *memLayout) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.d
	want := map[string][]byte{}
	for k, kids := range d.children {
		for _, id := range kids {
			want[string(layout.ChildKey(k.ns, k.id, id))] = nil
		}
	}
	for ns, refs := range d.offsets {
		for _, r := range refs {
			if c := d.content[ns][r.id]; c != nil && c.ChangeOffset == r.offset {
				want[string(layout.OffsetKey(ns, r.offset))] = []byte(r.id)
			}
		}
	}
	for k, ids := range d.tasksByContent {
		for _, id := range ids {
			want[string(layout.TaskByContentKey(k.ns, k.id, id))] = nil
		}
	}
	for x, l := range d.pendingIdx {
		// In memory the queue is in TaskOrder, in the layout in key order:
		// the same FIFO, so the keys come out ascending.
		var queue []string
		l.each(func(t *pb.Task) bool {
			k := string(layout.PendingKey(x, t.CreatedAt, t.Id))
			want[k] = taskRecord(t)
			queue = append(queue, k)
			return true
		})
		if !slices.IsSorted(queue) {
			return fmt.Errorf("the pending queue of %q is not in key order", x)
		}
	}
	for e, set := range d.tasksByExec {
		for id := range set {
			want[string(layout.AssignedKey(e, d.tasks[id].CreatedAt, id))] = taskRecord(d.tasks[id])
		}
	}
	for k, st := range d.stats {
		want[string(layout.PolicyStatsKey(k.ns, k.graph, k.policy))] =
			layout.EncodeStats(layout.PolicyStats{Pending: st.pending, Success: st.success, Failure: st.failure})
	}
	d.changes.each(func(c *pb.StateChange) bool {
		if IsContentChange(c.Type) {
			want[string(layout.ChangedContentKey(c.Namespace, c.ObjectId, c.Id))] = nil
		}
		return true
	})
	got := map[string][]byte{}
	for _, tag := range indexTags {
		_ = m.Scan([]byte{tag}, func(k, v []byte) bool {
			got[string(k)] = v
			return true
		})
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || !bytes.Equal(g, v) {
			return fmt.Errorf("index key %q (tag %#x): layout has %q (present %v), memory %q", k, k[0], g, ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			return fmt.Errorf("index key %q (tag %#x) is in the layout, not in memory", k, k[0])
		}
	}
	return nil
}

// taskRecord is the stored record of t, which its queue entry holds too.
func taskRecord(t *pb.Task) []byte {
	b, err := layout.EncodeTask(t)
	if err != nil {
		panic(err)
	}
	return b
}

// A format-1 snapshot (what a data dir of the current release holds)
// converts into a state database that reads back as the same state, at
// the snapshot's applied index; a damaged snapshot leaves no database, so
// the next start converts again instead of opening part of the state.
func TestConvertSnapshotIntoStateDB(t *testing.T) {
	for seed := int64(20); seed < 24; seed++ {
		s := randomStore(t, seed, 300)
		var snap bytes.Buffer
		if err := s.WriteSnapshot(&snap); err != nil {
			t.Fatal(err)
		}
		o := statedb.Options{Dir: t.TempDir()}

		cut := bytes.NewReader(snap.Bytes()[:snap.Len()*2/3])
		if _, _, err := ConvertSnapshot(cut, o); err == nil {
			t.Fatalf("seed %d: a truncated snapshot converted", seed)
		}
		if ok, err := statedb.Exists(o); ok || err != nil {
			t.Fatalf("seed %d: a failed conversion left a database (%v, %v)", seed, ok, err)
		}

		db, n, err := ConvertSnapshot(bytes.NewReader(snap.Bytes()), o)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if n == 0 || db.Applied() != s.AppliedIndex() {
			t.Fatalf("seed %d: %d writes, applied %d, want %d", seed, n, db.Applied(), s.AppliedIndex())
		}
		back := NewStore()
		err = back.ReadLayout(db, db.Applied())
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := back.Dump(), joinedDump(s); got != want {
			t.Fatalf("seed %d: converted state differs:\n%s\n----\n%s", seed, want, got)
		}
		if _, _, err := ConvertSnapshot(bytes.NewReader(snap.Bytes()), o); !errors.Is(err, statedb.ErrExists) {
			t.Fatalf("seed %d: converting over a database: %v, want ErrExists", seed, err)
		}
	}
}
