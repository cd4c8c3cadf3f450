package statedb

import (
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/indexify-go/indexify/internal/state/checkpoint"
)

// ErrExists is returned by Build when a database already lives under the
// directory: Build makes a new one, it never writes into an existing state.
var ErrExists = errors.New("statedb: a state database already exists")

// Exists reports whether a database lives under o.Dir, after finishing or
// undoing what a crash interrupted (as Open would): false for a data dir
// written before the state moved to disk, and for one whose Build never
// finished.
func Exists(o Options) (bool, error) {
	o = resolve(o)
	d := &DB{fs: o.FS, root: o.Dir, live: liveName}
	if ok, err := present(o.FS, o.Dir); !ok || err != nil {
		return false, err
	}
	if err := d.recover(); err != nil {
		return false, err
	}
	return present(o.FS, d.path(liveName))
}

// present reports whether path exists; an error other than its absence
// (a permission, a failing disk) is returned, not taken for "no state".
func present(fs vfs.FS, path string) (bool, error) {
	_, err := fs.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("statedb: %w", err)
	}
}

// Build creates the database under o.Dir and fills it with fill (which
// commits batches and may stop anywhere), as one step a crash cannot leave
// half done: fill writes into a directory of its own, which is synced,
// closed and renamed into place only after fill returned nil, and an
// unfinished one is deleted by the next Open or Build. A conversion that
// commits in batches therefore never leaves a live database holding part
// of the state (its applied index says 0 until the last batch). It returns
// the new database, open; it fails with ErrExists if one is there already.
func Build(o Options, fill func(*DB) error) (*DB, error) {
	o = resolve(o)
	ok, err := Exists(o)
	if err != nil {
		return nil, err
	}
	if ok {
		return nil, ErrExists
	}
	if err := o.FS.RemoveAll(o.FS.PathJoin(o.Dir, buildName)); err != nil {
		return nil, fmt.Errorf("statedb: %w", err)
	}
	b, err := openDir(o, buildName)
	if err != nil {
		return nil, err
	}
	if err := fill(b); err != nil {
		b.Close()
		o.FS.RemoveAll(b.path(buildName))
		return nil, err
	}
	if err := b.Sync(); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.Close(); err != nil {
		return nil, err
	}
	if err := checkpoint.Install(o.FS, b.path(buildName), b.path(liveName)); err != nil {
		return nil, err
	}
	return openDir(o, liveName)
}
