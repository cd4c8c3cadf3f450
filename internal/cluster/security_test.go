package cluster

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/tlsutil"
	"github.com/indexify-go/indexify/internal/tlsutil/tlstest"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

var testSecret = []byte("the-cluster-secret-of-this-test")

func TestRaftHandshake(t *testing.T) {
	run := func(serverSecret, clientSecret []byte) (serverErr, clientErr error) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		done := make(chan error, 1)
		go func() {
			c := &authConn{Conn: a, secret: serverSecret}
			done <- c.handshake()
		}()
		b.SetDeadline(time.Now().Add(5 * time.Second))
		clientErr = clientHandshake(b, clientSecret)
		b.Close()
		return <-done, clientErr
	}
	if s, c := run(testSecret, testSecret); s != nil || c != nil {
		t.Fatalf("same secret: server %v, client %v", s, c)
	}
	if s, _ := run(testSecret, []byte("a-wrong-secret-of-enough-length")); s == nil {
		t.Fatal("server accepted a client with the wrong secret")
	}
	// An impostor accepting connections on a member's address cannot prove
	// the secret, so the member never sends it log entries.
	if _, c := run([]byte("a-wrong-secret-of-enough-length"), testSecret); c == nil {
		t.Fatal("client accepted a server with the wrong secret")
	}
}

// memberView is what must not change when a rogue node tries its luck.
func memberView(n *Node) string {
	cfg, _ := n.configuration()
	var out []string
	for _, s := range cfg.Servers {
		out = append(out, fmt.Sprintf("%s@%s/%v", s.ID, s.Address, s.Suffrage))
	}
	sort.Strings(out)
	return n.ClusterID() + " " + strings.Join(out, ",")
}

const rogueTerm = 1 << 40

// rogueRaftRPCs sends RequestVote and AppendEntries (with a huge term, which
// a member would have to adopt if it read them) to addr through sl.
func rogueRaftRPCs(t *testing.T, sl *streamLayer, id raft.ServerID, addr raft.ServerAddress) {
	t.Helper()
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: sl, MaxPool: 1, Timeout: 3 * time.Second, Logger: newHCLogger(testLogger(t, "rogue-raft")),
	})
	defer trans.Close()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: []byte(sl.Addr().String())}
	var vr raft.RequestVoteResponse
	err := trans.RequestVote(id, addr, &raft.RequestVoteRequest{
		RPCHeader: hdr, Term: rogueTerm, LastLogIndex: rogueTerm, LastLogTerm: rogueTerm,
	}, &vr)
	if err == nil {
		t.Fatalf("RequestVote to %s answered: %+v", id, vr)
	}
	var ar raft.AppendEntriesResponse
	err = trans.AppendEntries(id, addr, &raft.AppendEntriesRequest{
		RPCHeader: hdr, Term: rogueTerm, PrevLogEntry: 0, PrevLogTerm: 0, LeaderCommitIndex: rogueTerm,
		Entries: []*raft.Log{{Index: 1 << 30, Term: rogueTerm, Type: raft.LogCommand, Data: []byte("pwned")}},
	}, &ar)
	if err == nil {
		t.Fatalf("AppendEntries to %s answered: %+v", id, ar)
	}
}

// rogueGRPC calls every membership-relevant ClusterService method with opts.
func rogueGRPC(t *testing.T, addr string, want codes.Code, opts ...grpc.DialOption) {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cl := pb.NewClusterServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(what string, err error) {
		t.Helper()
		if status.Code(err) != want {
			t.Fatalf("%s at %s: %v, want %s", what, addr, err, want)
		}
	}
	_, err = cl.Join(ctx, &pb.JoinRequest{NodeId: "rogue", RaftAddr: "127.0.0.9:1", GrpcAddr: "127.0.0.9:2"})
	check("Join", err)
	_, err = cl.Probe(ctx, &pb.ProbeRequest{})
	check("Probe", err)
	_, err = cl.Status(ctx, &pb.StatusRequest{})
	check("Status", err)
	_, err = cl.RemovePeer(ctx, &pb.RemovePeerRequest{NodeId: "n1"})
	check("RemovePeer", err)
	_, err = cl.TransferLeader(ctx, &pb.TransferLeaderRequest{})
	check("TransferLeader", err)
	_, err = cl.Apply(ctx, &pb.ApplyRequest{Command: &pb.Command{RequestId: "rogue",
		Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: "pwned"}}}})
	check("Apply", err)
	st, err := cl.Snapshot(ctx, &pb.SnapshotRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	check("Snapshot", err)
}

// securedCluster starts three static-mode members with mod applied to each
// config, writes one namespace and returns the nodes.
func securedCluster(t *testing.T, specs []*spec, mod func(*spec, *Config)) []*testNode {
	t.Helper()
	join := staticJoin(specs)
	var nodes []*testNode
	for _, s := range specs {
		nodes = append(nodes, startNode(t, s, func(c *Config) {
			c.BootstrapExpect = 3
			c.Join = join
			mod(s, c)
		}, nil))
	}
	leader := waitLeader(t, nodes...)
	// Wait for every member to be a voter in every node's configuration so
	// the "before" view does not move by itself.
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.id)
	}
	waitVoters(t, ids, nodes...)
	mustCreateNamespace(t, leader.node, "tenant-a")
	// Settled: every member's NodeInfo upsert applied everywhere, so the
	// "before" view does not move by itself.
	waitFor(t, "identical replicas with every NodeInfo", func() (bool, string) {
		want := leader.fsm.Store().Dump()
		for _, tn := range nodes {
			if _, ok := tn.fsm.Store().Namespace("tenant-a"); !ok {
				return false, tn.spec.id + " lacks the namespace"
			}
			for _, s := range specs {
				if _, ok := tn.fsm.Store().Node(s.id); !ok {
					return false, tn.spec.id + " lacks NodeInfo of " + s.id
				}
			}
			if tn.fsm.Store().Dump() != want {
				return false, tn.spec.id + " differs from the leader"
			}
		}
		return true, ""
	})
	return nodes
}

type clusterView struct{ members, dump []string }

func viewOf(nodes []*testNode) clusterView {
	var v clusterView
	for _, tn := range nodes {
		v.members = append(v.members, memberView(tn.node))
		v.dump = append(v.dump, tn.fsm.Store().Dump())
	}
	return v
}

// assertUnchanged compares before and after, and checks that no member
// adopted the rogue's term.
func assertUnchanged(t *testing.T, nodes []*testNode, before clusterView) {
	t.Helper()
	after := viewOf(nodes)
	for i, tn := range nodes {
		if after.members[i] != before.members[i] {
			t.Errorf("%s: configuration changed:\n before %s\n after  %s", tn.spec.id, before.members[i], after.members[i])
		}
		if after.dump[i] != before.dump[i] {
			t.Errorf("%s: data changed:\n before %s\n after  %s", tn.spec.id, before.dump[i], after.dump[i])
		}
		if term := tn.node.raft.CurrentTerm(); term >= rogueTerm {
			t.Errorf("%s adopted the rogue's term %d", tn.spec.id, term)
		}
		if _, ok := tn.fsm.Store().Namespace("pwned"); ok {
			t.Errorf("%s has the rogue's namespace", tn.spec.id)
		}
	}
}

func TestRogueNodeWithoutClusterSecretIsRefused(t *testing.T) {
	specs := newSpecs(t, 4)
	members, rogueSpec := specs[:3], specs[3]
	nodes := securedCluster(t, members, func(_ *spec, c *Config) { c.ClusterSecret = testSecret })
	before := viewOf(nodes)

	// A full rogue node that knows every address and tries to join, once
	// with a wrong secret.
	rogue := startNode(t, rogueSpec, func(c *Config) {
		c.Join = staticJoin(members)
		c.ClusterSecret = []byte("not-the-secret-but-long-enough")
	}, nil)
	waitFor(t, "rogue discovery rounds", func() (bool, string) {
		r := rogue.node.discoverRounds.Load()
		return r >= 3, fmt.Sprintf("%d rounds", r)
	})
	if rogue.node.hasState() {
		t.Fatal("rogue received raft state")
	}

	for _, m := range members {
		// gRPC without any token, and with a token of another secret.
		rogueGRPC(t, m.grpcAddr, codes.Unauthenticated)
		rogueGRPC(t, m.grpcAddr, codes.Unauthenticated, AuthDialOptions([]byte("not-the-secret-but-long-enough"))...)
	}
	for _, secret := range [][]byte{nil, []byte("not-the-secret-but-long-enough")} {
		sl, err := newStreamLayer("127.0.0.5:0", "")
		if err != nil {
			t.Fatal(err)
		}
		sl.secret = secret
		for _, m := range members {
			rogueRaftRPCs(t, sl, raft.ServerID(m.id), raft.ServerAddress(m.raftAddr))
		}
		sl.Close()
	}
	rogue.stop()
	assertUnchanged(t, nodes, before)

	// The members still work together (and a member with the secret still
	// gets answers).
	mustCreateNamespace(t, nodes[0].node, "tenant-b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := grpc.NewClient(members[1].grpcAddr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, AuthDialOptions(testSecret)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := pb.NewClusterServiceClient(cc).Probe(ctx, &pb.ProbeRequest{}); err != nil {
		t.Fatalf("probe with the secret: %v", err)
	}
}

func TestMutualTLSClusterRefusesForeignCertificates(t *testing.T) {
	specs := newSpecs(t, 3)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	foreign := tlstest.NewCA(t, dir, "foreign")
	tlsOf := func(name string, ca *tlstest.CA) *tlsutil.Reloader {
		cert, key := ca.Issue(t, name, "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4").Write(t, dir, name)
		r, err := tlsutil.New(tlsutil.Files{Cert: cert, Key: key, CA: ca.CAFile, ClientAuth: tlsutil.ClientAuthRequire}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	nodes := securedCluster(t, specs, func(s *spec, c *Config) {
		r := tlsOf(s.id, ca)
		c.RaftTLS = &TransportTLS{Server: r.ServerConfig(), Client: r.ClientConfig}
		c.DialOptions = []grpc.DialOption{r.DialOption()}
		s.serverOpts = []grpc.ServerOption{grpc.Creds(r.ServerCredentials())}
	})
	before := viewOf(nodes)

	// A rogue with a certificate from another CA (it trusts the cluster's
	// CA, so only the members' verification of its certificate stops it).
	rcert, rkey := foreign.Issue(t, "rogue", "127.0.0.4").Write(t, dir, "rogue")
	rogueTLS, err := tlsutil.New(tlsutil.Files{Cert: rcert, Key: rkey, CA: ca.CAFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := newStreamLayer("127.0.0.4:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	sl.tls = &TransportTLS{Server: rogueTLS.ServerConfig(), Client: rogueTLS.ClientConfig}
	for _, m := range specs {
		rogueRaftRPCs(t, sl, raft.ServerID(m.id), raft.ServerAddress(m.raftAddr))
		rogueGRPCOverTLS(t, m.grpcAddr, rogueTLS)
	}
	assertUnchanged(t, nodes, before)
	mustCreateNamespace(t, nodes[1].node, "tenant-b")
}

// rogueGRPCOverTLS: with a foreign certificate the TLS handshake fails, so
// no call reaches ClusterService.
func rogueGRPCOverTLS(t *testing.T, addr string, r *tlsutil.Reloader) {
	t.Helper()
	cc, err := grpc.NewClient(addr, r.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pb.NewClusterServiceClient(cc).Join(ctx, &pb.JoinRequest{NodeId: "rogue", RaftAddr: "127.0.0.4:1"})
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Fatalf("Join with a foreign certificate: %v, want a failed connection", err)
	}
}
