package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/indexify-go/indexify/internal/dirlock"
)

// StateDir is an executor's state directory. It keeps the executor's id
// across restarts (file executor-id), so a restarted executor registers
// under its previous id: its registration replaces the old one at once,
// and the coordinator pushes it the tasks still assigned to that id,
// instead of listing a second executor until the old one is removed (its
// stream's grace period, or the executor timeout when the coordinators
// restarted too).
//
// The directory is locked (file executor.lock) while open, because two
// running executors with one id would both receive that id's tasks.
type StateDir struct {
	// ID is the executor id kept in the directory.
	ID   string
	lock *dirlock.Lock
}

// StateIDFile and StateLockFile are the names of the files in a state
// directory.
const (
	StateIDFile   = "executor-id"
	StateLockFile = "executor.lock"
)

// OpenStateDir locks dir (creating it if needed) and returns the id kept
// there, choosing one the first time. It fails if another process holds
// the directory. Close releases it.
func OpenStateDir(dir string) (*StateDir, error) {
	lock, err := dirlock.TryAcquire(dir, StateLockFile)
	if errors.Is(err, dirlock.ErrHeld) {
		return nil, fmt.Errorf("executor state dir %s is in use by another executor: each executor needs its own", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("executor state dir: %w", err)
	}
	id, err := persistentID(filepath.Join(dir, StateIDFile))
	if err != nil {
		lock.Release()
		return nil, err
	}
	return &StateDir{ID: id, lock: lock}, nil
}

// Close releases the directory's lock.
func (s *StateDir) Close() error { return s.lock.Release() }

// persistentID returns the id kept in the file at path, choosing one (as
// the default id: host name plus a random suffix) and writing it there the
// first time.
func persistentID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("executor id: %w", err)
	}
	id := defaultID()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("executor id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("executor id: %w", err)
	}
	return id, nil
}
