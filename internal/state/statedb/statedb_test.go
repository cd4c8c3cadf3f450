package statedb

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/indexify-go/indexify/internal/state/checkpoint"
	"github.com/indexify-go/indexify/internal/state/layout"
)

func open(t *testing.T, o Options) *DB {
	t.Helper()
	d, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// commit writes key "k<i>" = "v<i>" for i in [from, to) in one batch
// recorded at applied index to.
func commit(t *testing.T, d *DB, from, to int) {
	t.Helper()
	b := d.NewBatch()
	for i := from; i < to; i++ {
		if err := b.Set(layout.NamespaceKey(fmt.Sprintf("k%06d", i)), []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(uint64(to)); err != nil {
		t.Fatal(err)
	}
}

// count returns how many "k" keys the state holds and checks they are
// exactly k0..k(n-1).
func count(t *testing.T, d *DB) int {
	t.Helper()
	n := 0
	err := d.Scan([]byte{layout.TagNamespace}, func(k, v []byte) bool {
		want := layout.NamespaceKey(fmt.Sprintf("k%06d", n))
		if !bytes.Equal(k, want) || string(v) != fmt.Sprintf("v%d", n) {
			t.Fatalf("key %d: %q = %q", n, k, v)
		}
		n++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCommitReopen(t *testing.T) {
	dir := t.TempDir()
	d := open(t, Options{Dir: dir})
	commit(t, d, 0, 10)
	commit(t, d, 10, 25)
	if d.Applied() != 25 {
		t.Fatalf("applied %d", d.Applied())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = open(t, Options{Dir: dir})
	defer d.Close()
	if d.Applied() != 25 || count(t, d) != 25 {
		t.Fatalf("after reopen: applied %d, %d keys", d.Applied(), count(t, d))
	}
}

// A batch reads its own writes before they are committed, and nobody else
// sees them until then.
func TestBatchSeesItsOwnWrites(t *testing.T) {
	d := open(t, Options{})
	defer d.Close()
	b := d.NewBatch()
	k := layout.TaskKey("t1")
	b.Set(k, []byte("x"))
	if v, ok, _ := b.Get(k); !ok || string(v) != "x" {
		t.Fatalf("batch get: %q %v", v, ok)
	}
	if _, ok, _ := d.Get(k); ok {
		t.Fatal("uncommitted write visible")
	}
	if err := b.Commit(1); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := d.Get(k); !ok || string(v) != "x" {
		t.Fatalf("committed get: %q %v", v, ok)
	}
}

// A crash (power loss: everything not synced is gone, or only part of it
// reached the disk) rolls the state back to a whole earlier batch, with
// the applied index of that batch, never to half a batch; everything
// before the last Sync or Checkpoint survives.
func TestCrashKeepsWholeBatches(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		fs := vfs.NewCrashableMem()
		d := open(t, Options{Dir: "/data", FS: fs})
		next := 0
		for i := 0; i < 5; i++ {
			commit(t, d, next, next+7)
			next += 7
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		synced := next
		for i := 0; i < 5; i++ {
			commit(t, d, next, next+7)
			next += 7
		}
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: newRand(seed)})
		d.Close()
		d2 := open(t, Options{Dir: "/data", FS: crashed})
		applied, n := int(d2.Applied()), count(t, d2)
		d2.Close()
		if applied != n || n < synced || n > next || n%7 != 0 {
			t.Fatalf("seed %d: after the crash applied %d with %d keys (synced %d, written %d)", seed, applied, n, synced, next)
		}
	}
}

func TestSnapshotInstall(t *testing.T) {
	for _, onDisk := range []bool{false, true} {
		t.Run(fmt.Sprintf("disk=%v", onDisk), func(t *testing.T) {
			o := func() Options {
				if onDisk {
					return Options{Dir: t.TempDir()}
				}
				return Options{}
			}
			src := open(t, o())
			defer src.Close()
			commit(t, src, 0, 100)
			ck, err := src.Checkpoint()
			if err != nil {
				t.Fatal(err)
			}
			// Writes after the checkpoint are not in it.
			commit(t, src, 100, 120)
			var stream bytes.Buffer
			if err := ck.Stream(&stream); err != nil {
				t.Fatal(err)
			}
			if err := ck.Release(); err != nil {
				t.Fatal(err)
			}

			dst := open(t, o())
			defer dst.Close()
			commit(t, dst, 0, 3) // replaced wholesale
			applied, err := dst.Install(bytes.NewReader(stream.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if applied != 100 || dst.Applied() != 100 || count(t, dst) != 100 {
				t.Fatalf("installed: applied %d/%d, %d keys", applied, dst.Applied(), count(t, dst))
			}
			// The installed state keeps taking batches.
			commit(t, dst, 100, 120)
			a, ai, _ := src.Digest()
			b, bi, _ := dst.Digest()
			if a != b || ai != bi {
				t.Fatalf("digests differ after the same writes: %x@%d %x@%d", a, ai, b, bi)
			}
		})
	}
}

// A damaged stream is refused and the live state stays as it was.
func TestInstallRefusesDamage(t *testing.T) {
	src := open(t, Options{})
	defer src.Close()
	commit(t, src, 0, 50)
	ck, err := src.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if err := ck.Stream(&stream); err != nil {
		t.Fatal(err)
	}
	good := stream.Bytes()
	bad := map[string][]byte{
		"truncated": good[:len(good)/2],
		"flipped":   append(append([]byte(nil), good[:len(good)/2]...), append([]byte{good[len(good)/2] ^ 0xff}, good[len(good)/2+1:]...)...),
		"empty":     nil,
	}
	for name, in := range bad {
		dst := open(t, Options{})
		commit(t, dst, 0, 7)
		if _, err := dst.Install(bytes.NewReader(in)); err == nil {
			t.Fatalf("%s: installed", name)
		}
		if dst.Applied() != 7 || count(t, dst) != 7 {
			t.Fatalf("%s: live state changed: applied %d, %d keys", name, dst.Applied(), count(t, dst))
		}
		dst.Close()
	}
}

// The digest depends on the state only: the same writes split into other
// batches give the same digest, one changed value another.
func TestDigest(t *testing.T) {
	a, b, c := open(t, Options{}), open(t, Options{}), open(t, Options{})
	defer a.Close()
	defer b.Close()
	defer c.Close()
	commit(t, a, 0, 30)
	commit(t, b, 0, 10)
	commit(t, b, 10, 30)
	commit(t, c, 0, 30)
	bt := c.NewBatch()
	bt.Set(layout.NamespaceKey("k000003"), []byte("other"))
	bt.Commit(30)
	da, _, _ := a.Digest()
	db, _, _ := b.Digest()
	dc, _, _ := c.Digest()
	if da != db {
		t.Fatal("same state, different digests")
	}
	if da == dc {
		t.Fatal("different state, same digest")
	}
}

func TestViewIsConsistent(t *testing.T) {
	d := open(t, Options{})
	defer d.Close()
	commit(t, d, 0, 5)
	v := d.View()
	defer v.Close()
	commit(t, d, 5, 9)
	n := 0
	v.Scan([]byte{layout.TagNamespace}, func(k, _ []byte) bool { n++; return true })
	if n != 5 || v.Applied() != 5 {
		t.Fatalf("view sees %d keys at %d", n, v.Applied())
	}
}

func TestOpenRefusesNewerFormat(t *testing.T) {
	dir := t.TempDir()
	d := open(t, Options{Dir: dir})
	d.Close()
	// Stamp the database as a newer release would.
	db, err := pebble.Open(dir+"/"+liveName, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Set(layout.MetaKey(layout.MetaFormat), layout.EncodeUint(layout.FormatVersion+1), pebble.Sync)
	db.Close()
	_, err = Open(Options{Dir: dir})
	if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "newer release") {
		t.Fatalf("open: %v", err)
	}
}

// An install a crash interrupted between its renames is finished at the
// next open.
func TestOpenFinishesInterruptedInstall(t *testing.T) {
	src := open(t, Options{})
	defer src.Close()
	commit(t, src, 0, 40)
	ck, _ := src.Checkpoint()
	var stream bytes.Buffer
	ck.Stream(&stream)

	fs := vfs.NewMem()
	dst := open(t, Options{Dir: "/data", FS: fs})
	commit(t, dst, 0, 3)
	dst.Close()
	// What Install does up to the crash: the checkpoint received, the live
	// directory moved aside, the new one not yet renamed in.
	if _, err := checkpointRead(&stream, fs, "/data/"+nextName); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rename("/data/"+liveName, "/data/"+liveName+".old"); err != nil {
		t.Fatal(err)
	}
	d := open(t, Options{Dir: "/data", FS: fs})
	defer d.Close()
	if d.Applied() != 40 || count(t, d) != 40 {
		t.Fatalf("after recovery: applied %d, %d keys", d.Applied(), count(t, d))
	}
}

func checkpointRead(r *bytes.Buffer, fs vfs.FS, dir string) (uint64, error) {
	return checkpoint.Read(r, fs, dir)
}

func newRand(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 1)) }

// Flush moves the committed state out of the write-ahead log into table
// files: afterwards the log holds nothing, and a crash that loses every
// unsynced byte still keeps all of it.
func TestFlushWritesTablesThatSurviveACrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	d := open(t, Options{Dir: "/data", FS: fs})
	commit(t, d, 0, 40)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	m := d.db.Metrics()
	if m.Levels[0].TablesCount == 0 && m.Levels[6].TablesCount == 0 {
		t.Fatalf("no table file after Flush:\n%s", m)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: newRand(1)})
	d.Close()
	d2 := open(t, Options{Dir: "/data", FS: crashed})
	defer d2.Close()
	if d2.Applied() != 40 || count(t, d2) != 40 {
		t.Fatalf("after the crash: applied %d, %d keys", d2.Applied(), count(t, d2))
	}
}
