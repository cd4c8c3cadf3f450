package memlimit

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func cgroup(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
		ok    bool
		err   bool
	}{
		{"v2 limit", map[string]string{"memory.max": "1073741824\n"}, 1 << 30, true, false},
		{"v2 unlimited", map[string]string{"memory.max": "max\n"}, 0, false, false},
		{"v1 limit", map[string]string{"memory/memory.limit_in_bytes": "536870912\n"}, 512 << 20, true, false},
		{"v1 unlimited", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false, false},
		{"no cgroup", nil, 0, false, false},
		{"garbage", map[string]string{"memory.max": "lots\n"}, 0, false, true},
	} {
		got, ok, err := Limit(cgroup(t, c.files))
		if got != c.want || ok != c.ok || (err != nil) != c.err {
			t.Errorf("%s: Limit = %d, %v, %v; want %d, %v, error %v", c.name, got, ok, err, c.want, c.ok, c.err)
		}
	}
}

func TestApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	t.Setenv("GOMEMLIMIT", "") // restored after the test
	os.Unsetenv("GOMEMLIMIT")
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))

	got := Apply(cgroup(t, map[string]string{"memory.max": "1000000000"}), logger)
	if got != 900_000_000 || debug.SetMemoryLimit(-1) != 900_000_000 {
		t.Fatalf("Apply set %d, runtime holds %d; want 900000000", got, debug.SetMemoryLimit(-1))
	}
	if !strings.Contains(log.String(), "go_limit_bytes=900000000") {
		t.Fatalf("log: %s", log.String())
	}

	// No limit: the runtime's is left alone.
	debug.SetMemoryLimit(math.MaxInt64)
	if got := Apply(cgroup(t, map[string]string{"memory.max": "max"}), logger); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("unlimited cgroup: Apply %d, runtime %d", got, debug.SetMemoryLimit(-1))
	}

	// An explicit GOMEMLIMIT wins.
	t.Setenv("GOMEMLIMIT", "123MiB")
	if got := Apply(cgroup(t, map[string]string{"memory.max": "1000000000"}), logger); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("with GOMEMLIMIT: Apply %d, runtime %d", got, debug.SetMemoryLimit(-1))
	}
}
