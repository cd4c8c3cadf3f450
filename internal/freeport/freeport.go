// Package freeport hands out TCP ports for tests that start servers which
// bind their own ports (child processes, Raft transports).
//
// The obvious way, listening on port 0 and closing, returns a port from the
// kernel's ephemeral range: until the server binds it, any outgoing
// connection on the machine may take it as its source port, and another test
// process may be handed the same port. Both happened in CI ("bind: address
// already in use" from a Weaviate started by a test). So a port comes from
// outside the ephemeral range, and is reserved across every process on the
// machine by a lock file held for as long as the test runs.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Take returns a port that is free on every host (default 127.0.0.1) and
// reserved for this test until it ends.
func Take(t testing.TB, hosts ...string) int {
	t.Helper()
	port, release, err := take(hosts)
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	t.Cleanup(release)
	return port
}

var (
	rangeOnce sync.Once
	lo, hi    int // the range ports are drawn from: [lo, hi)
)

// portRange is the widest range of unprivileged ports outside the kernel's
// ephemeral range.
func portRange() (int, int) {
	rangeOnce.Do(func() {
		eLo, eHi := 32768, 60999 // Linux's default
		if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
			if f := strings.Fields(string(b)); len(f) == 2 {
				a, errA := strconv.Atoi(f[0])
				z, errZ := strconv.Atoi(f[1])
				if errA == nil && errZ == nil && a <= z {
					eLo, eHi = a, z
				}
			}
		}
		lo, hi = 10000, eLo
		if above := 65536 - (eHi + 1); above > hi-lo {
			lo, hi = eHi+1, 65536
		}
		if hi-lo < 1000 { // an odd machine: fall back to everything unprivileged
			lo, hi = 10000, 65536
		}
	})
	return lo, hi
}

func take(hosts []string) (int, func(), error) {
	lo, hi := portRange()
	return takeFrom(hosts, rand.IntN(hi-lo))
}

// takeFrom probes the range from its start-th port on.
func takeFrom(hosts []string, start int) (int, func(), error) {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	dir := filepath.Join(os.TempDir(), "indexify-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, nil, err
	}
	lo, hi := portRange()
	n := hi - lo
	for i := range min(n, 4000) {
		port := lo + (start+i*7919)%n // a stride coprime with most ranges spreads the probes
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, nil, err
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // another test (here or in another process) holds it
			continue
		}
		if !bindable(hosts, port) {
			f.Close()
			continue
		}
		return port, func() { f.Close() }, nil
	}
	return 0, nil, fmt.Errorf("no free port in [%d, %d) on %v", lo, hi, hosts)
}

func bindable(hosts []string, port int) bool {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for _, h := range hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		ls = append(ls, l)
	}
	return true
}
