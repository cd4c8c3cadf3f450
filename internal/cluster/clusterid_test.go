package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// syncBuf collects log output of a node for assertions.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// teeLogger logs to the test and into buf (warn and above).
func teeLogger(t *testing.T, name string, buf io.Writer) *slog.Logger {
	w := io.MultiWriter(&tWriter{t: t}, buf)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})).With("t", name)
}

func namespaces(tn *testNode) []string {
	var out []string
	for _, ns := range []string{"xonly", "yonly", "yafter"} {
		if _, ok := tn.fsm.Store().Namespace(ns); ok {
			out = append(out, ns)
		}
	}
	return out
}

// The sequence of issue 13: three nodes form cluster X and take a write; all
// stop; nodes 2 and 3 lose their data and start while node 1 stays down, so
// they bootstrap a new cluster Y from the same static list and take a write;
// then node 1 comes back with X's data. Y must have another cluster id, and
// node 1 must refuse Y (never follow its leader, never truncate its log),
// keep exactly X's state, say so in an ERROR line naming both ids, in Status
// and in Ready; nodes 2 and 3 keep exactly Y's state.
func TestSeparatelyBootstrappedClustersNeverMerge(t *testing.T) {
	// Both clusters may well share the cluster secret (same deployment
	// values); the id check does not depend on it.
	t.Run("no-secret", func(t *testing.T) { testClustersNeverMerge(t, nil) })
	t.Run("same-secret", func(t *testing.T) { testClustersNeverMerge(t, testSecret) })
}

func testClustersNeverMerge(t *testing.T, secret []byte) {
	specs := newSpecs(t, 3)
	static := staticMode(specs)
	mode := func(c *Config) {
		static(c)
		c.ClusterSecret = secret
	}
	var nodes []*testNode
	for _, s := range specs {
		nodes = append(nodes, startNode(t, s, mode, nil))
	}
	leader := waitLeader(t, nodes...)
	mustCreateNamespace(t, leader.node, "xonly")
	xid := leader.node.ClusterID()
	for _, tn := range nodes {
		waitNamespace(t, tn, "xonly")
		waitFor(t, "cluster id X on "+tn.spec.id, func() (bool, string) {
			return tn.node.ClusterID() == xid, tn.node.ClusterID()
		})
	}
	// A snapshot on node 1, so that its restarted FSM shows X's state
	// without a leader (log entries after a snapshot are applied only once
	// a leader names them committed).
	if err := nodes[0].node.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for _, tn := range nodes {
		tn.stop()
	}
	for _, s := range specs[1:] {
		if err := os.RemoveAll(s.dir); err != nil {
			t.Fatal(err)
		}
	}

	y2 := startNode(t, specs[1], mode, nil)
	y3 := startNode(t, specs[2], mode, nil)
	yLeader := waitLeader(t, y2, y3)
	mustCreateNamespace(t, yLeader.node, "yonly")
	yid := yLeader.node.ClusterID()
	if yid == "" || yid == xid {
		t.Fatalf("second bootstrap of the same member list got cluster id %q (first: %q)", yid, xid)
	}
	for _, tn := range []*testNode{y2, y3} {
		waitNamespace(t, tn, "yonly")
		waitFor(t, "cluster id Y on "+tn.spec.id, func() (bool, string) {
			return tn.node.ClusterID() == yid, tn.node.ClusterID()
		})
	}

	var logs syncBuf
	x1 := startNode(t, specs[0], func(c *Config) {
		mode(c)
		c.Logger = teeLogger(t, specs[0].id, &logs)
	}, nil)
	startIndex := x1.node.raft.LastIndex()
	if x1.node.ClusterID() != xid {
		t.Fatalf("node 1 restarted with cluster id %q, want %q", x1.node.ClusterID(), xid)
	}
	// Refusal is visible: the ERROR line names both ids, Status carries
	// the conflict, and /readyz (Ready) is false with the reason.
	waitFor(t, "node 1 refuses cluster Y and says so", func() (bool, string) {
		l := logs.String()
		errLine := ""
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(line, "level=ERROR") && strings.Contains(line, "ours="+xid) && strings.Contains(line, "theirs="+yid) {
				errLine = line
			}
		}
		st := x1.node.Status()
		ok, why := x1.node.Ready()
		done := errLine != "" && strings.Contains(st.Conflict, xid) && strings.Contains(st.Conflict, yid) &&
			!ok && strings.Contains(why, yid)
		return done, fmt.Sprintf("error line %q; status conflict %q; ready %v %q", errLine, st.Conflict, ok, why)
	})

	// Y keeps working, and its traffic keeps being refused by node 1.
	mustCreateNamespace(t, y2.node, "yafter")
	for _, tn := range []*testNode{y2, y3} {
		waitNamespace(t, tn, "yafter")
	}
	// Give Y's leader heartbeats and node 1's elections time to do harm:
	// poll node 1 for several election timeouts and require that it never
	// sees Y's entries, never follows Y's leader and never loses its log.
	deadline := time.Now().Add(10 * testET)
	for time.Now().Before(deadline) {
		if got := namespaces(x1); fmt.Sprint(got) != "[xonly]" {
			t.Fatalf("node 1's state lists %v, want only X's write [xonly]", got)
		}
		if id, _ := x1.node.Leader(); id == y2.spec.id || id == y3.spec.id {
			t.Fatalf("node 1 follows cluster Y's leader %s", id)
		}
		if li := x1.node.raft.LastIndex(); li < startIndex {
			t.Fatalf("node 1's log was truncated: last index %d, was %d", li, startIndex)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tn := range []*testNode{y2, y3} {
		if got := namespaces(tn); fmt.Sprint(got) != "[yonly yafter]" {
			t.Fatalf("%s's state lists %v, want only Y's writes", tn.spec.id, got)
		}
		if tn.node.ClusterID() != yid {
			t.Fatalf("%s changed cluster id to %q", tn.spec.id, tn.node.ClusterID())
		}
	}
	waitFor(t, "cluster Y ready despite the stray node", func() (bool, string) {
		ok2, why2 := y2.node.Ready()
		ok3, why3 := y3.node.Ready()
		return ok2 && ok3, why2 + " / " + why3
	})

	// Cluster RPCs from node 1 (cluster X) are refused by Y, with or without
	// the cluster secret (the secret is checked by another interceptor).
	pcs := newPeerClients(AuthDialOptions(secret))
	t.Cleanup(pcs.close)
	cl, err := pcs.client(context.Background(), y2.spec.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	xctx := metadata.AppendToOutgoingContext(ctx, clusterIDMetaKey, xid)
	if _, err := cl.Status(xctx, &pb.StatusRequest{}); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), xid) || !strings.Contains(err.Error(), yid) {
		t.Fatalf("status call from cluster X: %v", err)
	}
	if _, err := cl.Apply(xctx, &pb.ApplyRequest{Command: &pb.Command{
		Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: "fromx"}},
	}}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("apply from cluster X: %v", err)
	}
	// Operator calls without an id are served.
	if st, err := cl.Status(ctx, &pb.StatusRequest{}); err != nil || st.ClusterId != yid {
		t.Fatalf("operator status: %v %v", st, err)
	}
}

func TestPeerVerdict(t *testing.T) {
	x, y := "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	for _, c := range []struct {
		local, remote idHello
		ok, adopt     bool
	}{
		{idHello{id: x, hasState: true}, idHello{id: x, hasState: true}, true, false},
		{idHello{id: x, hasState: true}, idHello{id: y, hasState: true}, false, false},  // the two clusters
		{idHello{id: x, hasState: true}, idHello{id: y, hasState: false}, true, false},  // a wiped node with a stale id: it learns ours
		{idHello{id: x, hasState: true}, idHello{id: "", hasState: false}, true, false}, // a fresh joiner
		{idHello{id: x, hasState: true}, idHello{id: "", hasState: true}, true, false},  // a new cluster not named yet
		{idHello{id: "", hasState: true}, idHello{id: y, hasState: true}, true, false},
		{idHello{id: "", hasState: false}, idHello{id: y, hasState: true}, true, true}, // no state: learn the feeder's id
		{idHello{id: x, hasState: false}, idHello{id: y, hasState: true}, true, true},  // no state, stale id: replaced
		{idHello{id: "", hasState: false}, idHello{id: "", hasState: true}, true, false},
	} {
		ok, adopt := peerVerdict(c.local, c.remote)
		if ok != c.ok || adopt != c.adopt {
			t.Errorf("local %+v remote %+v: ok %v adopt %v, want %v %v", c.local, c.remote, ok, adopt, c.ok, c.adopt)
		}
	}
}

// The hello on the wire: both ends refuse a peer of another cluster, and
// pass bytes through unchanged when the ids agree.
func TestHelloOverConnection(t *testing.T) {
	guard := func(h idHello) *idGuard {
		return &idGuard{hello: func() (idHello, bool) { return h, true }, check: func(r idHello, _ string) error {
			if ok, _ := peerVerdict(h, r); !ok {
				return errForeignCluster
			}
			return nil
		}}
	}
	run := func(server, client idHello) (serr, cerr error) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		done := make(chan error, 1)
		go func() {
			c := &idConn{Conn: a, g: guard(server)}
			buf := make([]byte, 4)
			_, err := io.ReadFull(c, buf)
			if err == nil && string(buf) != "ping" {
				err = fmt.Errorf("got %q", buf)
			}
			done <- err
		}()
		cerr = guard(client).dialHello(b, "pipe", time.Second)
		if cerr == nil {
			_, cerr = b.Write([]byte("ping"))
		} else {
			b.Close()
		}
		return <-done, cerr
	}
	var buf bytes.Buffer
	h := idHello{id: "0123456789abcdef", hasState: true, node: "coordinator-2"}
	if err := writeHello(&buf, h); err != nil {
		t.Fatal(err)
	}
	if got, err := readHello(&buf); err != nil || got != h {
		t.Fatalf("hello round trip: %+v %v, want %+v", got, err, h)
	}
	if _, err := readHello(strings.NewReader("\x00\x00\x00\x01raft bytes")); err == nil {
		t.Fatal("raft bytes taken for a hello")
	}
	if s, c := run(idHello{id: "x", hasState: true}, idHello{id: "x", hasState: true}); s != nil || c != nil {
		t.Fatalf("same cluster: server %v, client %v", s, c)
	}
	if s, c := run(idHello{id: "x", hasState: true}, idHello{id: "y", hasState: true}); s == nil || c == nil {
		t.Fatalf("other cluster: server %v, client %v", s, c)
	}
	if s, c := run(idHello{id: "", hasState: false}, idHello{id: "y", hasState: true}); s != nil || c != nil {
		t.Fatalf("empty node fed by a leader: server %v, client %v", s, c)
	}
}

// All members adopt the first id entry in the log; a later one (another
// leader's proposal) changes nothing.
func TestLaterClusterIDEntryLoses(t *testing.T) {
	specs := newSpecs(t, 3)
	mode := staticMode(specs)
	var nodes []*testNode
	for _, s := range specs {
		nodes = append(nodes, startNode(t, s, mode, nil))
	}
	leader := waitLeader(t, nodes...)
	cid := leader.node.ClusterID()
	data, err := state.EncodeCommand(leader.node.stampedSelfCmd())
	if err != nil {
		t.Fatal(err)
	}
	f := leader.node.raft.ApplyLog(raft.Log{Data: data, Extensions: []byte(clusterIDExt + "ffffffffffffffff")}, waitTimeout)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, tn := range nodes {
		waitFor(t, "second id entry applied on "+tn.spec.id, func() (bool, string) {
			return tn.node.raft.AppliedIndex() >= f.Index(), fmt.Sprint(tn.node.raft.AppliedIndex())
		})
		if got := tn.node.ClusterID(); got != cid {
			t.Fatalf("%s: cluster id %q, want the first %q", tn.spec.id, got, cid)
		}
	}
}

// Upgrade: data dirs of the earlier version carry the hash-derived id in
// node.json (written before bootstrap) and no id entry in the log. Nodes
// keep that id, and no leader proposes a new one.
func TestStoredClusterIDKept(t *testing.T) {
	specs := newSpecs(t, 3)
	mode := staticMode(specs)
	const old = "0123456789abcdef"
	writeIDs := func(blankFirst bool) {
		for i, s := range specs {
			id := old
			if i == 0 && blankFirst {
				id = ""
			}
			if err := os.MkdirAll(s.dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := writeIdentity(filepath.Join(s.dir, "node.json"), identity{NodeID: s.id, ClusterID: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// As the earlier version did: the id is on disk before the bootstrap.
	writeIDs(false)
	var nodes []*testNode
	for _, s := range specs {
		nodes = append(nodes, startNode(t, s, mode, nil))
	}
	leader := waitLeader(t, nodes...)
	mustCreateNamespace(t, leader.node, "before")
	// Every node holds the entry before any stops: a follower that trails
	// could not get it once the other two are down.
	for _, tn := range nodes {
		waitNamespace(t, tn, "before")
	}
	for _, tn := range nodes {
		tn.stop()
	}
	// n1 is a node that never learned the id (it got its state by
	// replication): it must learn the stored one, from the leader it
	// follows or, when it wins the election itself, from its followers.
	writeIDs(true)
	nodes = nodes[:0]
	for _, s := range specs {
		nodes = append(nodes, startNode(t, s, mode, nil))
	}
	leader = waitLeader(t, nodes...)
	mustCreateNamespace(t, leader.node, "after")
	for _, tn := range nodes {
		waitNamespace(t, tn, "after")
		waitFor(t, tn.spec.id+" ready", func() (bool, string) { return tn.node.Ready() })
	}
	for _, tn := range nodes {
		if got := tn.node.ClusterID(); got != old {
			t.Fatalf("%s: cluster id %q, want the stored %q", tn.spec.id, got, old)
		}
	}
}

// Rolling upgrade: nodes of the previous version speak no hello. Their
// connections are accepted unchecked (Raft gets every byte), and a dialler
// that meets one connects again without the hello.
func TestHelloWithPeersOfTheOlderVersion(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	legacySeen := make(chan string, 4)
	g := &idGuard{
		hello:  func() (idHello, bool) { return idHello{id: "x", hasState: true, node: "n1"}, true },
		check:  func(idHello, string) error { return nil },
		legacy: func(p string) { legacySeen <- p },
	}

	// An old dialler: its first bytes are a Raft RPC, handed through intact.
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		ic := &idConn{Conn: c, g: g}
		buf := make([]byte, len("\x00raft-rpc-bytes"))
		_, err = io.ReadFull(ic, buf)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("\x00raft-rpc-bytes")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "\x00raft-rpc-bytes" {
		t.Fatalf("old dialler's bytes: %q", s)
	}
	select {
	case <-legacySeen:
	default:
		t.Fatal("old dialler not noted")
	}

	// Neither a hello nor a Raft RPC type (an HTTP client): closed, Raft
	// reads io.EOF and none of its bytes, and it is not taken for an old
	// node.
	strays := make(chan string, 1)
	g.stray = func(p string) { strays <- p }
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		n, err := (&idConn{Conn: c, g: g}).Read(make([]byte, 64))
		got <- fmt.Sprint(n, err)
	}()
	cs, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "0 EOF" {
		t.Fatalf("stray client: Raft read %s, want 0 EOF", s)
	}
	select {
	case p := <-strays:
		if p != cs.LocalAddr().String() {
			t.Fatalf("stray noted as %q, want %q", p, cs.LocalAddr())
		}
	default:
		t.Fatal("stray client not noted")
	}
	select {
	case <-legacySeen:
		t.Fatal("stray client taken for a node of the older version")
	default:
	}

	// An old acceptor: it reads the hello as an unknown RPC and hangs up.
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.ReadFull(c, make([]byte, 1))
		c.Close()
	}()
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := g.dialHello(c2, "old", time.Second); !errors.Is(err, errLegacyPeer) {
		t.Fatalf("old acceptor: %v, want errLegacyPeer", err)
	}

	// A new acceptor that cannot talk yet says so: not taken for an old one.
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		starting := &idGuard{hello: func() (idHello, bool) { return idHello{}, false }, check: g.check}
		(&idConn{Conn: c, g: starting}).Read(make([]byte, 1))
	}()
	c3, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := g.dialHello(c3, "starting", time.Second); err == nil || errors.Is(err, errLegacyPeer) {
		t.Fatalf("starting acceptor: %v", err)
	}
}
