package chaos

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Topology: one "switch" namespace holding a bridge, and one namespace per
// process (coordinators, API server, executors, clients), each attached to
// the bridge by a veth pair created directly inside the two namespaces. No
// interface or address ever exists in the root namespace, so nothing on the
// host (including this test process) can reach the cluster, and parallel
// runs may reuse the same addresses: each run has its own switch.
//
// All addresses live in 10.77.0.0/16 on the bridge; partitions are iptables
// DROP rules inside the coordinators' namespaces.

const subnetBits = "/16"

// netPrefix marks every namespace this package creates; the pid lets a later
// run delete what a crashed run left behind.
const netPrefix = "ixc"

type netns struct {
	t      testing.TB
	prefix string // e.g. ixc1234-a1b2c3
	sw     string
	mu     sync.Mutex
	names  []string
	ports  int
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetns creates the switch namespace. It fails the test loudly (never
// skips) when namespaces cannot be created, e.g. without root.
func newNetns(t testing.TB) *netns {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("the chaos campaign needs iproute2 (ip): %v", err)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatalf("the chaos campaign needs iptables (apt-get install -y iptables): %v", err)
	}
	removeStale()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	n := &netns{t: t, prefix: fmt.Sprintf("%s%d-%s", netPrefix, os.Getpid(), hex.EncodeToString(b))}
	n.sw = n.prefix + "-sw"
	t.Cleanup(n.destroy)
	if err := n.add(n.sw); err != nil {
		t.Fatalf("cannot create a network namespace (the chaos campaign needs root / CAP_SYS_ADMIN): %v", err)
	}
	for _, cmd := range [][]string{
		{"ip", "-n", n.sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", n.sw, "link", "set", "br0", "up"},
	} {
		if err := run(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func (n *netns) add(name string) error {
	if err := run("ip", "netns", "add", name); err != nil {
		return err
	}
	n.mu.Lock()
	n.names = append(n.names, name)
	n.mu.Unlock()
	return run("ip", "-n", name, "link", "set", "lo", "up")
}

// host creates namespace <prefix>-<role> with address ip on eth0, plugged
// into the switch.
func (n *netns) host(role, ip string) string {
	n.t.Helper()
	name := n.prefix + "-" + role
	if err := n.add(name); err != nil {
		n.t.Fatal(err)
	}
	n.mu.Lock()
	port := "p" + strconv.Itoa(n.ports)
	n.ports++
	n.mu.Unlock()
	for _, cmd := range [][]string{
		{"ip", "link", "add", "eth0", "netns", name, "type", "veth", "peer", "name", port, "netns", n.sw},
		{"ip", "-n", n.sw, "link", "set", port, "master", "br0", "up"},
		{"ip", "-n", name, "addr", "add", ip + subnetBits, "dev", "eth0"},
		{"ip", "-n", name, "link", "set", "eth0", "up"},
	} {
		if err := run(cmd...); err != nil {
			n.t.Fatal(err)
		}
	}
	return name
}

// readdress replaces the address of a host namespace (restart with a new IP).
func readdress(ns, ip string) error {
	if err := run("ip", "-n", ns, "addr", "flush", "dev", "eth0"); err != nil {
		return err
	}
	return run("ip", "-n", ns, "addr", "add", ip+subnetBits, "dev", "eth0")
}

// block drops all traffic between ns and each of the peer addresses.
func block(ns string, peers ...string) error {
	for _, p := range peers {
		if err := run("ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-s", p, "-j", "DROP"); err != nil {
			return err
		}
		if err := run("ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-d", p, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// unblock removes every rule block added in ns.
func unblock(ns string) error {
	if err := run("ip", "netns", "exec", ns, "iptables", "-F", "INPUT"); err != nil {
		return err
	}
	return run("ip", "netns", "exec", ns, "iptables", "-F", "OUTPUT")
}

// destroy deletes every namespace of this run; deleting a namespace deletes
// its veth ends, and with them the peers in the switch.
func (n *netns) destroy() {
	n.mu.Lock()
	names := append([]string(nil), n.names...)
	n.mu.Unlock()
	for i := len(names) - 1; i >= 0; i-- {
		if err := run("ip", "netns", "del", names[i]); err != nil {
			n.t.Errorf("cleanup: %v", err)
		}
	}
}

// removeStale deletes namespaces left by chaos runs whose process is gone
// (a run killed before its cleanup ran).
func removeStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], netPrefix) {
			continue
		}
		name := f[0]
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(name, netPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid == os.Getpid() || pid <= 0 {
			continue
		}
		if _, err := os.Stat("/proc/" + pidStr); err == nil {
			continue // its run is still going
		}
		_ = run("ip", "netns", "del", name)
	}
}
