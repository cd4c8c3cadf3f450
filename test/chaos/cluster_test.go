package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/test/harness"
)

// Every host namespace uses the same well-known ports, as pods would.
const (
	grpcPort   = "8950"
	healthPort = "8960"
	raftPort   = "8970"
	// The proxied coordinator's Raft listener hides behind the delaying
	// proxy, which owns raftPort in that namespace.
	hiddenRaft = "127.0.0.1:8969"
	apiPort    = "8900"
)

type coord struct {
	id      string
	ns      string
	ip      string
	dataDir string
	logPath string
	proxied bool // Raft traffic to this node passes the delaying proxy
	p       *proc
}

// env is one campaign's world: namespaces, processes and files.
type env struct {
	t        testing.TB
	net      *netns
	dir      string // artifacts of this run
	bin      string // the indexify binary
	self     string // this test binary, re-executed as client/proxy/helper
	coords   []*coord
	apiNS    string
	apiIP    string
	execs    []*proc
	clientNS string
	proxy    *proc
	delay    string // file holding the proxy's delay in ms
	nextIP   int
	initial  string // coordinator gRPC targets given to API server and executors
	// apiTimeout is the API server's --request-timeout (default 8s).
	apiTimeout time.Duration
}

func newEnv(t testing.TB, n int, dir string) *env {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, bin: harness.Binary(t), self: self, nextIP: 10, apiTimeout: 8 * time.Second}
	e.net = newNetns(t)
	for _, d := range []string{"logs", "data"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		c := &coord{id: fmt.Sprintf("coordinator-%d", i), ip: fmt.Sprintf("10.77.1.%d", 10+i), proxied: i == 0}
		c.ns = e.net.host(fmt.Sprintf("c%d", i), c.ip)
		c.dataDir = filepath.Join(dir, "data", c.id)
		c.logPath = filepath.Join(dir, "logs", c.id+".log")
		e.coords = append(e.coords, c)
	}
	e.apiIP = "10.77.3.1"
	e.apiNS = e.net.host("api", e.apiIP)
	e.clientNS = e.net.host("cl", "10.77.5.1")
	e.initial = e.targets()

	// The delaying proxy in front of coordinator-0's Raft port; delay 0
	// until the slow-link fault sets it.
	e.delay = filepath.Join(dir, "proxy-delay-ms")
	if err := os.WriteFile(e.delay, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.proxy = e.helper("proxy", e.coords[0].ns, filepath.Join(dir, "logs", "proxy.log"),
		proxyConfig{Listen: ":" + raftPort, Target: hiddenRaft, DelayFile: e.delay})
	return e
}

// helper starts this test binary in mode inside ns with cfg as its config.
func (e *env) helper(mode, ns, logPath string, cfg any) *proc {
	e.t.Helper()
	path, err := e.writeConfig(mode, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return startIn(e.t, mode, ns, logPath, []string{"CHAOS_MODE=" + mode, "CHAOS_CONFIG_FILE=" + path}, e.self)
}

// writeConfig stores a helper's config as JSON in a fresh file.
func (e *env) writeConfig(mode string, cfg any) (string, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(e.dir, mode+"-config-*.json")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.Write(b)
	return f.Name(), err
}

// runHelper runs a one-shot helper inside the clients' namespace and decodes
// its stdout (JSON) into out.
func (e *env) runHelper(mode string, cfg, out any, timeout time.Duration) error {
	path, err := e.writeConfig(mode, cfg)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	cmd := exec.Command("ip", "netns", "exec", e.clientNS, e.self)
	cmd.Env = append(os.Environ(), "CHAOS_MODE="+mode, "CHAOS_CONFIG_FILE="+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s helper timed out after %s: %s", mode, timeout, stderr.String())
	}
	if err != nil {
		return fmt.Errorf("%s helper: %v: %s", mode, err, stderr.String())
	}
	return json.Unmarshal(stdout.Bytes(), out)
}

func (e *env) grpcAddr(c *coord) string { return c.ip + ":" + grpcPort }

// joinList is the static peer list with every node's current address.
func (e *env) joinList() string {
	var parts []string
	for _, c := range e.coords {
		parts = append(parts, c.id+"="+e.grpcAddr(c))
	}
	return strings.Join(parts, ",")
}

func (e *env) targets() string {
	var parts []string
	for _, c := range e.coords {
		parts = append(parts, e.grpcAddr(c))
	}
	return strings.Join(parts, ",")
}

// startCoord (re)starts coordinator c with its current address.
func (e *env) startCoord(c *coord) {
	e.t.Helper()
	raftBind := c.ip + ":" + raftPort
	if c.proxied {
		raftBind = hiddenRaft
	}
	c.p = startIn(e.t, c.id, c.ns, c.logPath, nil, e.bin, "coordinator",
		"--node-id", c.id,
		"--data-dir", c.dataDir,
		"--raft-addr", raftBind,
		"--advertise", c.ip+":"+raftPort,
		"--coordinator-addr", e.grpcAddr(c),
		"--coordinator-http-addr", c.ip+":"+healthPort,
		"--bootstrap-expect", fmt.Sprint(len(e.coords)),
		"--join", e.joinList(),
		"--autopilot-stabilization", "1s",
	)
}

func (e *env) apiURL() string { return "http://" + e.apiIP + ":" + apiPort }

// startServices starts the API server and the executors (each executor in
// its own namespace). They get the coordinators' initial addresses.
func (e *env) startServices(executors int) {
	e.t.Helper()
	startIn(e.t, "api-server", e.apiNS, filepath.Join(e.dir, "logs", "api-server.log"), nil, e.bin, "server",
		"--coordinator-addr", e.initial,
		"--api-addr", e.apiIP+":"+apiPort,
		"--data-dir", filepath.Join(e.dir, "data", "api"),
		"--request-timeout", e.apiTimeout.String(),
	)
	for i := 0; i < executors; i++ {
		id := fmt.Sprintf("executor-%d", i)
		ns := e.net.host(fmt.Sprintf("x%d", i), fmt.Sprintf("10.77.4.%d", i+1))
		e.execs = append(e.execs, startIn(e.t, id, ns, filepath.Join(e.dir, "logs", id+".log"), nil, e.bin, "executor",
			"--executor-id", id,
			"--coordinator-addr", e.initial,
			"--api-server", e.apiURL(),
			"--concurrency", "2",
		))
	}
}

// newIP hands out a fresh coordinator address (restart with a new IP).
func (e *env) newIP() string {
	e.nextIP++
	return fmt.Sprintf("10.77.2.%d", e.nextIP)
}

// statusView is what the status helper reports for one coordinator.
type statusView struct {
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Err    string `json:"err,omitempty"`
	State  string `json:"state"`
	Leader string `json:"leader"`
	Term   uint64 `json:"term"`
	Voters int    `json:"voters"`
	// HealthyVoters counts the voters this node reports healthy.
	HealthyVoters int    `json:"healthy_voters"`
	ClusterID     string `json:"cluster_id"`
}

// status asks every running coordinator (from the clients' namespace).
func (e *env) status() []statusView {
	var addrs []string
	for _, c := range e.coords {
		if c.p != nil && !c.p.exited() {
			addrs = append(addrs, e.grpcAddr(c))
		}
	}
	var out []statusView
	if err := e.runHelper("status", statusConfig{Addrs: addrs}, &out, 20*time.Second); err != nil {
		e.t.Logf("status helper: %v", err)
	}
	return out
}

// wholeLeader is like leader, but also requires that the leader counts every
// coordinator as a healthy voter: no node is a non-voter catching up after a
// wipe, or otherwise behind. Wiping a disk is only within Raft's fault model
// in such a cluster: wiping a voter while another is still a non-voter
// loses the data of a majority of the voters (the cluster then rightly
// stays unavailable: the wiped node withholds its vote). nil if not so
// within timeout.
func (e *env) wholeLeader(timeout time.Duration) *coord {
	var whole *coord
	retry.PollUntil(timeout, 200*time.Millisecond, func() bool {
		if l := e.leader(time.Second); l != nil {
			for _, s := range e.status() {
				if s.ID == l.id && s.State == "Leader" && s.Voters == len(e.coords) && s.HealthyVoters == len(e.coords) {
					whole = l
					return true
				}
			}
		}
		return false
	})
	return whole
}

// leader returns the coordinator that a majority of all nodes names as
// leader and that says so itself, polling until timeout; nil if none.
func (e *env) leader(timeout time.Duration) *coord {
	var leader *coord
	retry.PollUntil(timeout, 200*time.Millisecond, func() bool {
		votes := map[string]int{}
		self := map[string]bool{}
		for _, s := range e.status() {
			if s.Leader != "" {
				votes[s.Leader]++
			}
			if s.State == "Leader" {
				self[s.ID] = true
			}
		}
		for _, c := range e.coords {
			if self[c.id] && votes[c.id] > len(e.coords)/2 {
				leader = c
				return true
			}
		}
		return false
	})
	return leader
}
