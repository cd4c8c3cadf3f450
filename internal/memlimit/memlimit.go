// Package memlimit gives the Go runtime the memory limit of the container
// the process runs in, so the garbage collector works harder as the heap
// nears the limit instead of the kernel killing the pod (OOMKilled) with
// garbage still on the heap.
//
// Go's collector knows nothing of cgroups: with its defaults (GOGC=100, no
// GOMEMLIMIT) a heap of live size L may grow to 2L before a collection, so a
// coordinator holding 600 MiB of state in a 1 GiB pod is killed during a
// burst although it never needed more than the limit. Kubernetes puts the
// container's memory limit in the cgroup (memory.max, cgroup v2, or
// memory.limit_in_bytes, v1); Apply sets the runtime's soft limit to a
// share of it (Share, 90%: the rest covers memory the runtime does not
// count, such as thread stacks outside the heap and page cache charged to
// the cgroup).
//
// An explicit GOMEMLIMIT always wins, and nothing changes where no limit is
// set (a laptop running `indexify dev`, a pod without limits).
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Share is the part of the cgroup limit given to the Go runtime.
const Share = 0.9

// cgroup files holding the memory limit, v2 first.
var limitFiles = []string{"memory.max", "memory/memory.limit_in_bytes"}

// noLimit: cgroup v1 reports "no limit" as a huge number (the page-rounded
// max int64); anything at or above 1 PiB is treated as unlimited.
const noLimit = 1 << 50

// Limit reads the memory limit of the cgroup mounted at root (normally
// /sys/fs/cgroup). ok is false when there is none.
func Limit(root string) (limit int64, ok bool, err error) {
	for _, name := range limitFiles {
		b, err := os.ReadFile(filepath.Join(root, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("memlimit: %w", err)
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return 0, false, fmt.Errorf("memlimit: %s holds %q, not a byte count", name, s)
		}
		if n >= noLimit {
			return 0, false, nil
		}
		return n, true, nil
	}
	return 0, false, nil
}

// Apply sets the runtime's memory limit from the cgroup at root unless
// GOMEMLIMIT is set, and logs what it did. It returns the limit set (0 for
// none). A cgroup that cannot be read is logged and ignored: the process
// runs with Go's defaults, as before.
func Apply(root string, logger *slog.Logger) int64 {
	if v, set := os.LookupEnv("GOMEMLIMIT"); set {
		logger.Debug("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return 0
	}
	limit, ok, err := Limit(root)
	if err != nil {
		logger.Warn("container memory limit not read; the Go runtime has none", "err", err)
		return 0
	}
	if !ok {
		return 0
	}
	soft := int64(float64(limit) * Share)
	debug.SetMemoryLimit(soft)
	logger.Info("Go memory limit set from the container's", "container_limit_bytes", limit, "go_limit_bytes", soft)
	return soft
}
