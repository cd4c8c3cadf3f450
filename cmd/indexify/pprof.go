package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// INDEXIFY_PPROF_DIR=DIR serves Go's profiler on the unix socket
// DIR/<node-id>.sock (the pid when no --node-id is given). It exists for
// the benchmark tool (go run ./bench writes --profile), which profiles a
// live leader; a unix socket opens no network port, and without the
// variable nothing is served.
func init() {
	dir := os.Getenv("INDEXIFY_PPROF_DIR")
	if dir == "" {
		return
	}
	name := strconv.Itoa(os.Getpid())
	for i, a := range os.Args {
		if v, ok := strings.CutPrefix(a, "--node-id="); ok {
			name = v
		} else if a == "--node-id" && i+1 < len(os.Args) {
			name = os.Args[i+1]
		}
	}
	l, err := net.Listen("unix", filepath.Join(dir, name+".sock"))
	if err != nil {
		slog.Warn("pprof socket not served", "err", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go http.Serve(l, mux)
}
