package index

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/indexify-go/indexify/internal/dirlock"
)

func openEmbedded(t *testing.T, dir string) *Embedded {
	t.Helper()
	e, err := OpenEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestEmbeddedConformance(t *testing.T) {
	conformance(t, func(t *testing.T) (Store, func() Store) {
		dir := t.TempDir()
		return openEmbedded(t, dir), func() Store { return openEmbedded(t, dir) }
	})
}

// A crash in the middle of writing a record leaves a torn tail: reopening
// drops it (the upsert was never acknowledged) and keeps everything before.
func TestEmbeddedTornTail(t *testing.T) {
	dir := t.TempDir()
	e := openEmbedded(t, dir)
	ns := "ns"
	mustEnsure(t, e, ns, "i", Schema{Dim: 2, Distance: Dot})
	mustUpsert(t, e, ns, "i", Point{ContentID: "a", Vector: []float32{1, 0}})
	e.Close()

	log := filepath.Join(dir, dirName(ns, "i"), logFile)
	good, err := os.Stat(log)
	if err != nil {
		t.Fatal(err)
	}
	// Half of a second record.
	rec := encodeUpsert([]Point{{ContentID: "b", Vector: []float32{0, 1}}})
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(rec[:len(rec)/2])
	f.Close()

	e2 := openEmbedded(t, dir)
	if ids := idsOf(mustSearch(t, e2, ns, "i", []float32{1, 1}, 10, nil)); fmt.Sprint(ids) != "[a]" {
		t.Fatalf("after a torn tail the index holds %v, want [a]", ids)
	}
	if st, _ := os.Stat(log); st.Size() != good.Size() {
		t.Fatalf("torn tail not cut: log is %d bytes, want %d", st.Size(), good.Size())
	}
	mustUpsert(t, e2, ns, "i", Point{ContentID: "c", Vector: []float32{0, 1}})
	e2.Close()
	e3 := openEmbedded(t, dir)
	if ids := idsOf(mustSearch(t, e3, ns, "i", []float32{1, 1}, 10, nil)); fmt.Sprint(ids) != "[a c]" {
		t.Fatalf("after writing past a cut tail and reopening: %v, want [a c]", ids)
	}
}

// Replacing points over and over rewrites the log once most of it is dead,
// so it stays proportional to the live points; the data survives it.
func TestEmbeddedCompaction(t *testing.T) {
	dir := t.TempDir()
	e := openEmbedded(t, dir)
	ns := "ns"
	mustEnsure(t, e, ns, "i", Schema{Dim: 4, Distance: Cosine})
	rng := rand.New(rand.NewSource(1))
	const live = 100
	var last []Point
	for round := 0; round < 3*compactMin/live; round++ {
		last = last[:0]
		for i := 0; i < live; i++ {
			last = append(last, Point{ContentID: fmt.Sprintf("c%d", i), Text: fmt.Sprint(round), Vector: randVec(rng, 4)})
		}
		mustUpsert(t, e, ns, "i", last...)
	}
	if err := e.Delete(context.Background(), ns, []string{"c0"}); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, dirName(ns, "i"), logFile)
	st, err := os.Stat(log)
	if err != nil {
		t.Fatal(err)
	}
	one := int64(len(encodeUpsert(last[:1])))
	if st.Size() > int64(compactMin+live)*one {
		t.Fatalf("log is %d bytes after %d replacements of %d points: never compacted", st.Size(), 3*compactMin, live)
	}
	q := randVec(rng, 4)
	before := mustSearch(t, e, ns, "i", q, 1000, nil)
	if len(before) != live-1 {
		t.Fatalf("%d points, want %d", len(before), live-1)
	}
	e.Close()
	e2 := openEmbedded(t, dir)
	after := mustSearch(t, e2, ns, "i", q, 1000, nil)
	checkHits(t, "after compaction and reopen", after, before)
	for _, h := range after {
		if h.Text != fmt.Sprint(3*compactMin/live-1) {
			t.Fatalf("%s has text %q, an old version", h.ContentID, h.Text)
		}
	}
}

// Leftovers of crashed EnsureIndex/DropIndex calls are cleaned at open and
// never show up as indexes.
func TestEmbeddedCrashLeftovers(t *testing.T) {
	dir := t.TempDir()
	e := openEmbedded(t, dir)
	mustEnsure(t, e, "ns", "i", Schema{Dim: 2, Distance: Dot})
	e.Close()
	half := filepath.Join(dir, dirName("ns", "half"))
	gone := filepath.Join(dir, dirName("ns", "gone")+droppedMark+"1")
	for _, d := range []string{half, gone} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(gone, metaFile), []byte(`{"namespace":"ns","name":"gone","dim":2,"distance":"dot"}`), 0o644)
	e2 := openEmbedded(t, dir)
	for _, n := range []string{"half", "gone"} {
		if _, err := e2.Search(context.Background(), "ns", n, []float32{1, 0}, 1, nil); err == nil {
			t.Fatalf("leftover %s opened as an index", n)
		}
	}
	for _, d := range []string{half, gone} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("leftover %s not removed: %v", d, err)
		}
	}
	mustSearch(t, e2, "ns", "i", []float32{1, 0}, 1, nil)
}

// A record whose checksum matches but does not decode is corruption, not a
// torn write: opening fails loudly instead of dropping data after it.
func TestEmbeddedCorruptRecordFailsOpen(t *testing.T) {
	dir := t.TempDir()
	e := openEmbedded(t, dir)
	mustEnsure(t, e, "ns", "i", Schema{Dim: 2, Distance: Dot})
	e.Close()
	var enc encoder
	enc.b = make([]byte, 8)
	enc.byte(9) // unknown op
	log := filepath.Join(dir, dirName("ns", "i"), logFile)
	if err := os.WriteFile(log, enc.frame(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenEmbedded(dir); err == nil {
		t.Fatal("opened a log with a corrupt record")
	}
}

// One process at a time: a second open of the same directory (a
// replacement API server pod started while the old one still shuts down,
// on the same volume) is refused with dirlock.ErrHeld until the first
// closes, instead of both writing the same index files.
func TestEmbeddedDirectoryHasOneOpener(t *testing.T) {
	dir := t.TempDir()
	first, err := OpenEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenEmbedded(dir); !errors.Is(err, dirlock.ErrHeld) {
		t.Fatalf("second open: %v, want dirlock.ErrHeld", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	openEmbedded(t, dir)
}
