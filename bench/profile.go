package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
)

// startCPUProfile profiles this process until the returned function is
// called, which returns `go tool pprof -top` output.
func startCPUProfile(r *runner) func() string {
	path := filepath.Join(r.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		return func() string { return err.Error() }
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() string { return err.Error() }
	}
	return func() string {
		pprof.StopCPUProfile()
		f.Close()
		return pprofTop(path, 32)
	}
}

// heapProfileTop writes a heap profile (after GC) and returns its top
// entries by live bytes.
func heapProfileTop(r *runner) string {
	runtime.GC()
	path := filepath.Join(r.TempDir(), "heap.pprof")
	f, err := os.Create(path)
	if err != nil {
		return err.Error()
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err.Error()
	}
	f.Close()
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", "-sample_index=inuse_space", path).CombinedOutput()
	if err != nil {
		return "pprof failed: " + err.Error()
	}
	l := strings.Split(string(out), "\n")
	return strings.Join(l[:min(len(l), 32)], "\n")
}
