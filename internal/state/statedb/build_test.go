package statedb

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/indexify-go/indexify/internal/state/layout"
)

// fill commits n keys in batches of 7 as a conversion would: every batch
// but the last at applied index 0, the last at applied.
func fill(t *testing.T, n int, applied uint64) func(*DB) error {
	return func(d *DB) error {
		for from := 0; from < n; from += 7 {
			to := min(from+7, n)
			b := d.NewBatch()
			for i := from; i < to; i++ {
				commitKey(t, b, i)
			}
			idx := uint64(0)
			if to == n {
				idx = applied
			}
			if err := b.Commit(idx); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestBuildThenOpen(t *testing.T) {
	dir := t.TempDir()
	if ok, err := Exists(Options{Dir: dir}); ok || err != nil {
		t.Fatalf("Exists on an empty dir: %v %v", ok, err)
	}
	d, err := Build(Options{Dir: dir}, fill(t, 30, 99))
	if err != nil {
		t.Fatal(err)
	}
	if d.Applied() != 99 || count(t, d) != 30 {
		t.Fatalf("built: applied %d, %d keys", d.Applied(), count(t, d))
	}
	d.Close()
	if ok, err := Exists(Options{Dir: dir}); !ok || err != nil {
		t.Fatalf("Exists after Build: %v %v", ok, err)
	}
	if _, err := Build(Options{Dir: dir}, fill(t, 1, 1)); !errors.Is(err, ErrExists) {
		t.Fatalf("Build over a database: %v, want ErrExists", err)
	}
	d = open(t, Options{Dir: dir})
	defer d.Close()
	if d.Applied() != 99 || count(t, d) != 30 {
		t.Fatalf("reopened: applied %d, %d keys", d.Applied(), count(t, d))
	}
}

// A fill that fails leaves no database, and Build can run again.
func TestBuildThatFailsLeavesNothing(t *testing.T) {
	fs := vfs.NewMem()
	o := Options{Dir: "/data", FS: fs}
	boom := errors.New("boom")
	if _, err := Build(o, func(d *DB) error {
		if err := fill(t, 20, 0)(d); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Build: %v", err)
	}
	if ok, _ := Exists(o); ok {
		t.Fatal("a failed Build left a database")
	}
	if _, err := fs.Stat("/data/" + buildName); err == nil {
		t.Fatal("a failed Build left its directory")
	}
	d, err := Build(o, fill(t, 14, 5))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Applied() != 5 || count(t, d) != 14 {
		t.Fatalf("second Build: applied %d, %d keys", d.Applied(), count(t, d))
	}
}

// A power loss during the fill, with any part of the unsynced data on disk,
// leaves no live database: the next start sees none (and redoes the
// conversion) instead of a database that holds part of the state. A power
// loss right after Build returned keeps all of it.
func TestBuildSurvivesACrash(t *testing.T) {
	for seed := int64(0); seed < 10; seed++ {
		fs := vfs.NewCrashableMem()
		o := Options{Dir: "/data", FS: fs}
		var crashed *vfs.MemFS
		d, err := Build(o, func(d *DB) error {
			if err := fill(t, 28, 0)(d); err != nil {
				return err
			}
			if err := d.Sync(); err != nil { // even a synced part must not count
				return err
			}
			crashed = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: newRand(seed)})
			return fill(t, 35, 40)(d)
		})
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
		after := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: newRand(seed)})

		co := Options{Dir: "/data", FS: crashed}
		if ok, err := Exists(co); ok || err != nil {
			t.Fatalf("seed %d: crash during Build: Exists %v %v", seed, ok, err)
		}
		d2 := open(t, co)
		if d2.Applied() != 0 || count(t, d2) != 0 {
			t.Fatalf("seed %d: crash during Build left applied %d, %d keys", seed, d2.Applied(), count(t, d2))
		}
		d2.Close()
		if _, err := crashed.Stat("/data/" + buildName); err == nil {
			t.Fatalf("seed %d: Open left the unfinished build", seed)
		}

		d3 := open(t, Options{Dir: "/data", FS: after})
		if d3.Applied() != 40 || count(t, d3) != 35 {
			t.Fatalf("seed %d: crash after Build: applied %d, %d keys", seed, d3.Applied(), count(t, d3))
		}
		d3.Close()
	}
}

func commitKey(t *testing.T, b *Batch, i int) {
	t.Helper()
	if err := b.Set(layout.NamespaceKey(fmt.Sprintf("k%06d", i)), []byte(fmt.Sprintf("v%d", i))); err != nil {
		t.Fatal(err)
	}
}
