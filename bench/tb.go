package main

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
)

// runner lets the benchmark reuse test/harness (real processes, free
// loopback ports, polling with deadlines), which is written against
// testing.TB. Embedding the interface satisfies its unexported method; only
// the methods below are ever called by the harness.
type runner struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	dirs     []string
	failed   bool
}

// fatal is the panic value of runner.Fatal; runSuite recovers it.
type fatal struct{ msg string }

func (r *runner) Helper() {}

func (r *runner) Logf(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }
func (r *runner) Log(args ...any)                 { slog.Info(fmt.Sprint(args...)) }

func (r *runner) Fatalf(format string, args ...any) {
	r.failed = true
	panic(fatal{fmt.Sprintf(format, args...)})
}
func (r *runner) Fatal(args ...any) { r.failed = true; panic(fatal{fmt.Sprint(args...)}) }
func (r *runner) Errorf(format string, args ...any) {
	r.failed = true
	slog.Error(fmt.Sprintf(format, args...))
}
func (r *runner) Failed() bool { return r.failed }
func (r *runner) Name() string { return "bench" }

func (r *runner) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *runner) TempDir() string {
	d, err := os.MkdirTemp(benchTmp(), "bench-")
	if err != nil {
		r.Fatal(err)
	}
	r.mu.Lock()
	r.dirs = append(r.dirs, d)
	r.mu.Unlock()
	return d
}

// close runs cleanups in reverse order (processes are killed) and removes
// temporary directories.
func (r *runner) close() {
	r.mu.Lock()
	cs, ds := r.cleanups, r.dirs
	r.cleanups, r.dirs = nil, nil
	r.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
	for _, d := range ds {
		os.RemoveAll(d)
	}
}

// benchTmp is where data directories go: the same disk for ours and etcd's.
func benchTmp() string {
	if d := os.Getenv("BENCH_TMPDIR"); d != "" {
		return d
	}
	return os.TempDir()
}
