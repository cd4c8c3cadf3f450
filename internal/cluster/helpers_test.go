package cluster

import (
	"context"
	"errors"
	"fmt"
	"github.com/indexify-go/indexify/internal/freeport"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"google.golang.org/grpc"
)

// testET is the election timeout used by tests: short enough for a fast
// suite, long enough for -race on a busy 2-core machine.
const testET = 400 * time.Millisecond

// waitTimeout bounds every "eventually" assertion.
const waitTimeout = 20 * time.Second

// testLogger logs to the test's output; level via CLUSTER_TEST_LOG
// (debug|info|warn), default warn.
func testLogger(t testing.TB, name string) *slog.Logger {
	lv := slog.LevelWarn
	switch os.Getenv("CLUSTER_TEST_LOG") {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(&tWriter{t: t}, &slog.HandlerOptions{Level: lv})).With("t", name)
}

type tWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		func() {
			defer func() {
				if recover() != nil { // logging after the test ended
					w.done = true
				}
			}()
			w.t.Log(strings.TrimRight(string(p), "\n"))
		}()
	}
	return len(p), nil
}

// spec is a node's fixed identity and addresses, kept across restarts.
type spec struct {
	id       string
	ip       string
	dir      string
	raftAddr string
	grpcAddr string
	grpcLis  net.Listener // pre-bound so the address is known before start
	// serverOpts are extra gRPC server options (TLS credentials).
	serverOpts []grpc.ServerOption
}

// freeRaftPort returns a TCP port that is currently free on every ip. Static
// mode requires one Raft port for all nodes, so tests give each node its own
// loopback IP (127.0.0.x) and share the port.
func freeRaftPort(t testing.TB, ips []string) int {
	t.Helper()
	return freeport.Take(t, ips...)
}

// newSpecs makes k node specs on 127.0.0.1..k sharing one Raft port.
func newSpecs(t testing.TB, k int) []*spec { return newSpecsAt(t, k, 1) }

// newSpecsAt makes k node specs n1..nk on 127.0.0.first.. sharing one Raft
// port.
func newSpecsAt(t testing.TB, k, first int) []*spec {
	t.Helper()
	var ips []string
	for i := first; i < first+k; i++ {
		ips = append(ips, fmt.Sprintf("127.0.0.%d", i))
	}
	port := freeRaftPort(t, ips)
	base := t.TempDir()
	var out []*spec
	for i, ip := range ips {
		s := &spec{
			id:       fmt.Sprintf("n%d", i+1),
			ip:       ip,
			dir:      filepath.Join(base, fmt.Sprintf("n%d", i+1)),
			raftAddr: fmt.Sprintf("%s:%d", ip, port),
		}
		s.listenGRPC(t)
		out = append(out, s)
	}
	return out
}

func (s *spec) listenGRPC(t testing.TB) {
	t.Helper()
	addr := s.ip + ":0"
	if s.grpcAddr != "" {
		addr = s.grpcAddr
	}
	var lis net.Listener
	// The port may still be held by the previous server.
	err := retry.PollFor(5*time.Second, 20*time.Millisecond, func() (err error) {
		lis, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.grpcLis = lis
	s.grpcAddr = lis.Addr().String()
}

// staticJoin is the static-mode Join list of specs: "ID=IP:GRPCPORT".
func staticJoin(specs []*spec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.id+"="+s.grpcAddr)
	}
	return out
}

type testNode struct {
	t      testing.TB
	spec   *spec
	cfg    Config
	node   *Node
	fsm    *state.FSM
	srv    *grpc.Server
	cancel context.CancelFunc
	once   sync.Once
}

// startNode creates, serves and starts a node. mod adjusts the config and
// may register leadership hooks before Start.
func startNode(t testing.TB, s *spec, mod func(*Config), before func(*Node)) *testNode {
	t.Helper()
	if s.grpcLis == nil {
		s.listenGRPC(t)
	}
	cfg := Config{
		NodeID:              s.id,
		DataDir:             s.dir,
		RaftBind:            s.raftAddr,
		RaftAdvertise:       s.raftAddr,
		GRPCAdvertise:       s.grpcAddr,
		HTTPAdvertise:       s.ip + ":8900",
		ElectionTimeout:     testET,
		StabilizationTime:   time.Second,
		Logger:              testLogger(t, s.id),
		DeadServerThreshold: -1,
	}
	if mod != nil {
		mod(&cfg)
	}
	fsm := state.NewFSM(state.NewStore(), nil)
	var node *Node
	var err error
	for range 20 { // the shared Raft port may be briefly taken by another process
		if node, err = New(cfg, fsm); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("New(%s): %v", s.id, err)
	}
	srv := grpc.NewServer(append(node.GRPCServerOptions(), s.serverOpts...)...)
	node.RegisterGRPC(srv)
	lis := s.grpcLis
	s.grpcLis = nil
	go srv.Serve(lis)
	if before != nil {
		before(node)
	}
	ctx, cancel := context.WithCancel(context.Background())
	node.Start(ctx)
	tn := &testNode{t: t, spec: s, cfg: cfg, node: node, fsm: fsm, srv: srv, cancel: cancel}
	t.Cleanup(tn.stop)
	return tn
}

func (tn *testNode) stop() {
	tn.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tn.node.Shutdown(ctx); err != nil {
			tn.t.Errorf("shutdown %s: %v", tn.spec.id, err)
		}
		tn.cancel()
		tn.srv.Stop()
	})
}

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	if err := retry.PollFor(waitTimeout, 20*time.Millisecond, func() error {
		if ok, msg := cond(); !ok {
			return errors.New(msg)
		}
		return nil
	}); err != nil {
		t.Fatalf("timed out waiting for %s: %v", what, err)
	}
}

// waitLeader waits until exactly one running node is leader and every other
// running node knows it; returns the leader.
func waitLeader(t testing.TB, nodes ...*testNode) *testNode {
	t.Helper()
	var leader *testNode
	waitFor(t, "a leader known to all", func() (bool, string) {
		leader = nil
		var views []string
		for _, tn := range nodes {
			if tn.node.IsLeader() {
				if leader != nil {
					return false, "two leaders"
				}
				leader = tn
			}
			id, _ := tn.node.Leader()
			views = append(views, tn.spec.id+"->"+id)
		}
		if leader == nil {
			return false, fmt.Sprint(views)
		}
		for _, tn := range nodes {
			if id, _ := tn.node.Leader(); id != leader.spec.id {
				return false, fmt.Sprint(views)
			}
		}
		// Leader hooks (barrier, own NodeInfo) done: forwarding works.
		if _, ok := leader.fsm.Store().Node(leader.spec.id); !ok {
			return false, "leader NodeInfo not stored yet"
		}
		// Every node knows the cluster id (a new cluster's first leader
		// names it through the log; followers have it once they applied it).
		for _, tn := range nodes {
			if cid := tn.node.ClusterID(); cid == "" || cid != leader.node.ClusterID() {
				return false, fmt.Sprintf("%s has cluster id %q, leader %q", tn.spec.id, cid, leader.node.ClusterID())
			}
		}
		return true, ""
	})
	return leader
}

// members returns sorted voter and non-voter ids of n's configuration.
func members(n *Node) (voters, nonvoters []string) {
	cfg, _ := n.configuration()
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		} else {
			nonvoters = append(nonvoters, string(s.ID))
		}
	}
	sort.Strings(voters)
	sort.Strings(nonvoters)
	return voters, nonvoters
}

// waitVoters waits until every node's configuration has exactly these voters
// and no non-voters.
func waitVoters(t testing.TB, want []string, nodes ...*testNode) {
	t.Helper()
	waitFor(t, fmt.Sprintf("voters %v on all nodes", want), func() (bool, string) {
		for _, tn := range nodes {
			v, nv := members(tn.node)
			if fmt.Sprint(v) != fmt.Sprint(want) || len(nv) != 0 {
				return false, fmt.Sprintf("%s: voters %v nonvoters %v", tn.spec.id, v, nv)
			}
		}
		return true, ""
	})
}

func createNamespace(ctx context.Context, n *Node, name string) (*pb.CommandResult, error) {
	return n.Apply(ctx, &pb.Command{
		RequestId: "ns-" + name,
		Op:        &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: name}},
	})
}

// mustCreateNamespace applies a write and checks the FSM accepted it.
func mustCreateNamespace(t testing.TB, n *Node, name string) *pb.CommandResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := createNamespace(ctx, n, name)
	if err != nil {
		t.Fatalf("create namespace %s via %s: %v", name, n.ID(), err)
	}
	if res.ErrorCode != pb.ErrorCode_ERROR_CODE_OK || res.Index == 0 {
		t.Fatalf("create namespace %s: result %v", name, res)
	}
	return res
}

// waitNamespace waits until n's store has the namespace.
func waitNamespace(t testing.TB, tn *testNode, name string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("namespace %s on %s", name, tn.spec.id), func() (bool, string) {
		_, ok := tn.fsm.Store().Namespace(name)
		return ok, fmt.Sprintf("applied %d", tn.fsm.Store().AppliedIndex())
	})
}

// clusterClient dials a node's ClusterService.
func clusterClient(t testing.TB, addr string) pb.ClusterServiceClient {
	t.Helper()
	p := newPeerClients(nil)
	t.Cleanup(p.close)
	cl, err := p.client(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// readSnapshot collects a Snapshot stream.
func readSnapshot(ctx context.Context, cl pb.ClusterServiceClient) ([]byte, error) {
	st, err := cl.Snapshot(ctx, &pb.SnapshotRequest{})
	if err != nil {
		return nil, err
	}
	var out []byte
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c.Data...)
	}
}
