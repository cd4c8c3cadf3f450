package main

import (
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// TestRefusedConnectionNamesTheFlag (issue 16): nothing listening at the
// address: the error says which flag or variable sets it.
func TestRefusedConnectionNamesTheFlag(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(harness.FreePort(t, "127.0.0.1"))
	_, _, err := runCLI(t, "namespace", "list", "--server", "http://"+addr)
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "--server or INDEXIFY_SERVER") {
		t.Fatalf("namespace list against nothing: %v", err)
	}
	_, _, err = runCLI(t, "cluster", "status", "--coordinator", addr, "--timeout", "10s")
	if err == nil || !strings.Contains(err.Error(), "--coordinator or INDEXIFY_COORDINATOR") {
		t.Fatalf("cluster status against nothing: %v", err)
	}
	// A server error is not a connection problem: no hint.
	if e := withAddrHint(errString("boom (HTTP 500)"), "API server", "--server", addr); strings.Contains(e.Error(), "--server") {
		t.Fatalf("hint on a non-connection error: %v", e)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestVersionNamesTheCommit (issue 16): version shows the VCS revision
// stamped by go build/install, and whether the tree was modified.
func TestVersionNamesTheCommit(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionString("dev", info), "indexify dev (commit 0123456789ab, modified) go1.26.8"; got != want {
		t.Errorf("versionString = %q, want %q", got, want)
	}
	info.Settings[1].Value = "false"
	info.Main.Version = "v1.2.3"
	if got, want := versionString("dev", info), "indexify v1.2.3 (commit 0123456789ab) go1.26.8"; got != want {
		t.Errorf("versionString = %q, want %q", got, want)
	}
	if got := versionString("v9-3-gabc", &debug.BuildInfo{GoVersion: "go1.26.8"}); !strings.HasPrefix(got, "indexify v9-3-gabc (no commit") {
		t.Errorf("versionString without VCS stamp = %q", got)
	}
	out, _ := mustCLI(t, "version")
	if !strings.HasPrefix(out, "indexify ") || !strings.Contains(out, " go1.") {
		t.Errorf("version output %q", out)
	}
}

// TestNodeIDDefaultPrintedOnce (issue 16): --help shows the host-name
// default of --node-id once (cobra's "(default ...)"), not twice.
func TestNodeIDDefaultPrintedOnce(t *testing.T) {
	for _, cmd := range []string{"dev", "coordinator"} {
		out, _ := mustCLI(t, cmd, "--help")
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "--node-id") {
				line = l
			}
		}
		if strings.Count(line, "default") != 1 || strings.Count(line, "(default") != 1 {
			t.Errorf("%s --help --node-id line: %q", cmd, line)
		}
	}
}

// TestJSONLogDurations (issue 16): the JSON log writes durations as "20ms",
// not as integer nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	var buf strings.Builder
	slog.New(slog.NewJSONHandler(&buf, logOptions(slog.LevelInfo))).Info("x", "took", 20*time.Millisecond, "n", 3)
	if !strings.Contains(buf.String(), `"took":"20ms"`) || !strings.Contains(buf.String(), `"n":3`) {
		t.Fatalf("json line %s", buf.String())
	}
}
