package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Coord is one coordinator process of a Cluster. Distinct loopback addresses
// (127.0.0.x) stand in for hosts; every node uses the same ports, as pods do.
type Coord struct {
	*Proc
	ID      string
	IP      string
	DataDir string
}

// Cluster runs coordinator processes with the same command line shape on
// every node, the way a StatefulSet would.
type Cluster struct {
	t        testing.TB
	Nodes    []*Coord
	GRPCPort int
	HTTPPort int
	RaftPort int
	Extra    []string // flags added to every node's command line
	// Expect is --bootstrap-expect (default: the number of nodes).
	Expect int
	// JoinIdx lists the nodes named in --join (default: all nodes).
	JoinIdx []int
	base    string
}

// NewCluster prepares n nodes on 127.0.<subnet>.1.. with free ports; it
// starts none of them.
func NewCluster(t testing.TB, n int, subnet int, extra ...string) *Cluster {
	t.Helper()
	// Autopilot promotes a rejoining server after it was healthy this long;
	// short here so tests need not wait the production 10 s.
	extra = append([]string{"--autopilot-stabilization", "1s"}, extra...)
	c := &Cluster{t: t, base: t.TempDir(), Extra: extra}
	for i := 0; i < n; i++ {
		c.Nodes = append(c.Nodes, &Coord{
			ID:      fmt.Sprintf("coordinator-%d", i),
			IP:      fmt.Sprintf("127.0.%d.%d", subnet, i+1),
			DataDir: filepath.Join(c.base, fmt.Sprintf("node-%d", i)),
		})
	}
	c.GRPCPort = c.commonFreePort()
	c.HTTPPort = c.commonFreePort()
	c.RaftPort = c.commonFreePort()
	return c
}

// commonFreePort finds a port free on every node's address.
func (c *Cluster) commonFreePort() int {
	for attempt := 0; attempt < 50; attempt++ {
		p := FreePort(c.t, c.Nodes[0].IP)
		ok := true
		for _, n := range c.Nodes[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(n.IP, strconv.Itoa(p)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p
		}
	}
	c.t.Fatal("no port free on every node address")
	return 0
}

// GRPCAddr is node i's coordinator gRPC address.
func (c *Cluster) GRPCAddr(i int) string {
	return net.JoinHostPort(c.Nodes[i].IP, strconv.Itoa(c.GRPCPort))
}

// HTTPAddr is node i's health address.
func (c *Cluster) HTTPAddr(i int) string {
	return net.JoinHostPort(c.Nodes[i].IP, strconv.Itoa(c.HTTPPort))
}

// JoinList is the static peer list every node gets: ID=HOST:GRPC-PORT.
func (c *Cluster) JoinList() string {
	idx := c.JoinIdx
	if idx == nil {
		for i := range c.Nodes {
			idx = append(idx, i)
		}
	}
	var parts []string
	for _, i := range idx {
		parts = append(parts, c.Nodes[i].ID+"="+c.GRPCAddr(i))
	}
	return strings.Join(parts, ",")
}

// Targets is the comma list clients use.
func (c *Cluster) Targets() string {
	var parts []string
	for i := range c.Nodes {
		parts = append(parts, c.GRPCAddr(i))
	}
	return strings.Join(parts, ",")
}

// Start starts node i (again) with the shared command line.
func (c *Cluster) Start(i int) *Coord {
	c.t.Helper()
	n := c.Nodes[i]
	args := append([]string{"coordinator",
		"--node-id", n.ID,
		"--data-dir", n.DataDir,
		"--raft-addr", net.JoinHostPort(n.IP, strconv.Itoa(c.RaftPort)),
		"--advertise", net.JoinHostPort(n.IP, strconv.Itoa(c.RaftPort)),
		"--coordinator-addr", c.GRPCAddr(i),
		"--coordinator-http-addr", c.HTTPAddr(i),
		"--bootstrap-expect", strconv.Itoa(c.expect()),
		"--join", c.JoinList(),
	}, c.Extra...)
	n.Proc = Start(c.t, n.ID, args...)
	return n
}

func (c *Cluster) expect() int {
	if c.Expect > 0 {
		return c.Expect
	}
	return len(c.Nodes)
}

// RaftAddr is node i's Raft address.
func (c *Cluster) RaftAddr(i int) string {
	return net.JoinHostPort(c.Nodes[i].IP, strconv.Itoa(c.RaftPort))
}

// CLI runs an indexify command to completion and returns its output.
func (c *Cluster) CLI(args ...string) (string, error) {
	out, err := exec.Command(Binary(c.t), args...).CombinedOutput()
	return string(out), err
}

// Running reports whether node i has a live process.
func (c *Cluster) Running(i int) bool {
	return c.Nodes[i].Proc != nil && !c.Nodes[i].Proc.Exited()
}

// Wipe deletes node i's data directory (the node must be stopped).
func (c *Cluster) Wipe(i int) {
	if err := os.RemoveAll(c.Nodes[i].DataDir); err != nil {
		c.t.Fatal(err)
	}
}

// Status asks node i for its view of the cluster.
func (c *Cluster) Status(i int) (*pb.StatusResponse, error) {
	conn, err := grpc.NewClient(c.GRPCAddr(i), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return pb.NewClusterServiceClient(conn).Status(ctx, &pb.StatusRequest{})
}

// WaitLeader waits until every running node agrees on one leader that is
// itself running, and returns the leader's index.
func (c *Cluster) WaitLeader(timeout time.Duration) int {
	c.t.Helper()
	leader := -1
	Eventually(c.t, timeout, "one leader agreed by every running node", func() error {
		leader = -1
		var id string
		for i := range c.Nodes {
			if !c.Running(i) {
				continue
			}
			st, err := c.Status(i)
			if err != nil {
				return fmt.Errorf("%s: %v", c.Nodes[i].ID, err)
			}
			if st.GetLeaderId() == "" {
				return fmt.Errorf("%s knows no leader", c.Nodes[i].ID)
			}
			if id != "" && st.GetLeaderId() != id {
				return fmt.Errorf("leaders disagree: %s vs %s", id, st.GetLeaderId())
			}
			id = st.GetLeaderId()
		}
		for i, n := range c.Nodes {
			if n.ID == id && c.Running(i) {
				leader = i
				return nil
			}
		}
		return fmt.Errorf("leader %q is not a running node", id)
	})
	return leader
}

// WaitVoters waits until node i sees exactly want as the voters.
func (c *Cluster) WaitVoters(i int, want []string, timeout time.Duration) {
	c.t.Helper()
	sort.Strings(want)
	Eventually(c.t, timeout, c.Nodes[i].ID+" sees voters "+strings.Join(want, ","), func() error {
		st, err := c.Status(i)
		if err != nil {
			return err
		}
		var got []string
		for _, m := range st.GetMembers() {
			if m.GetSuffrage() == "voter" {
				got = append(got, m.GetId())
			}
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("voters %v", got)
		}
		return nil
	})
}

// IDs returns the node ids of the given indexes.
func (c *Cluster) IDs(idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, c.Nodes[i].ID)
	}
	return out
}

// WaitReady waits until node i's /readyz answers 200.
func (c *Cluster) WaitReady(i int, timeout time.Duration) {
	c.t.Helper()
	h := NewHTTP("http://" + c.HTTPAddr(i))
	Eventually(c.t, timeout, c.Nodes[i].ID+" ready", func() error {
		code, body, err := h.Do(context.Background(), "GET", "/readyz", "", nil)
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("readyz %d: %s", code, body)
		}
		return nil
	})
}

// StartServer runs an API server process (with extra flags) against the
// cluster's coordinators and waits until it answers.
func (c *Cluster) StartServer(extra ...string) (*Proc, *HTTP) {
	c.t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(FreePort(c.t, "127.0.0.1"))
	p := Start(c.t, "api-server", append([]string{"server", "--coordinator-addr", c.Targets(), "--api-addr", addr,
		"--data-dir", filepath.Join(c.base, "api")}, extra...)...)
	h := NewHTTP("http://" + addr)
	Eventually(c.t, 30*time.Second, "API server answers", func() error {
		code, _, err := h.Do(context.Background(), "GET", "/", "", nil)
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("GET / = %d", code)
		}
		return nil
	})
	return p, h
}

// Readdress moves node i to a new loopback address (the node keeps its id
// and data); restart it to take effect.
func (c *Cluster) Readdress(i int, ip string) { c.Nodes[i].IP = ip }

// RefusalLogged reports whether a coordinator's output holds the ERROR line
// of a refusal of another cluster's traffic naming both cluster ids (text or
// JSON log format): what an operator sees when two clusters share member
// names (internal/cluster/clusterid.go).
func RefusalLogged(out, ours, theirs string) bool {
	for _, l := range strings.Split(out, "\n") {
		text := strings.Contains(l, "level=ERROR") && strings.Contains(l, "ours="+ours) && strings.Contains(l, "theirs="+theirs)
		json := strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, `"ours":"`+ours+`"`) && strings.Contains(l, `"theirs":"`+theirs+`"`)
		if text || json {
			return true
		}
	}
	return false
}
