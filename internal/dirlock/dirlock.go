// Package dirlock gives one process at a time the use of a directory whose
// files must never have two writers: an embedded vector index, SQLite
// files, an executor's state. It holds an advisory lock (flock) on a file
// inside the directory for as long as the directory is open; the kernel
// drops it when the process exits, however it exits, so a crash never
// leaves a stale lock behind.
//
// Where it matters: on Kubernetes a Deployment starts the replacement of a
// deleted pod while the old one is still terminating, and on one node both
// can mount the same ReadWriteOnce volume; without the lock the new API
// server would open the embedded stores the old one is still writing.
package dirlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/indexify-go/indexify/internal/retry"
)

// LockFile is the lock file's name in the stores' directories.
const LockFile = ".lock"

// ErrHeld is returned (wrapped) when another process holds the lock.
var ErrHeld = errors.New("in use by another process")

// Lock is a held directory lock.
type Lock struct{ f *os.File }

// TryAcquire locks the file name in dir (creating both if needed) without
// waiting; it fails with an error wrapping ErrHeld if the lock is taken.
func TryAcquire(dir, name string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrHeld)
		}
		return nil, fmt.Errorf("%s: lock: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Wait calls open until it returns an error that does not wrap ErrHeld, or
// ctx ends; waiting is called once, when the first try finds the lock held
// (to say why start-up pauses). It is for a process that replaces another
// one that is still shutting down.
func Wait[T any](ctx context.Context, open func() (T, error), waiting func(error)) (T, error) {
	var out T
	var openErr error
	told := false
	err := retry.Poll(ctx, 250*time.Millisecond, func() error {
		v, err := open()
		if errors.Is(err, ErrHeld) {
			if !told && waiting != nil {
				waiting(err)
				told = true
			}
			return err
		}
		out, openErr = v, err
		return nil
	})
	if err != nil {
		return out, err
	}
	return out, openErr
}
