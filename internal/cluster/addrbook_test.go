package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Every node of a 3-node cluster stops and comes back with a new IP, same
// id and data. The Raft configurations hold only the old addresses, so
// without the address book no candidate could reach anyone (the Consul
// wedge). With it, the probe answers of the Join list lead the candidates to
// each other, a leader is elected, Join rewrites the configuration to the
// new addresses, and all data is intact.
func TestFullClusterRestartWithNewIPs(t *testing.T) {
	old := newSpecsAt(t, 3, 21)
	static := staticMode(old)
	var nodes []*testNode
	for _, s := range old {
		nodes = append(nodes, startNode(t, s, static, nil))
	}
	leader := waitLeader(t, nodes...)
	waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
	for i := range 3 {
		mustCreateNamespace(t, leader.node, fmt.Sprint("keep-", i))
	}
	for _, tn := range nodes {
		waitNamespace(t, tn, "keep-2")
	}
	// Followers first, so the leader does not hand leadership to a node that
	// is about to stop.
	for _, tn := range followersOf(leader, nodes) {
		tn.stop()
	}
	leader.stop()

	moved := newSpecsAt(t, 3, 31)
	for i, s := range moved {
		s.dir = old[i].dir // same id (n1..n3) and state, new IPs
	}
	static = staticMode(moved) // operators point the Join list at the new gRPC addresses
	nodes = nil
	for _, s := range moved {
		nodes = append(nodes, startNode(t, s, static, nil))
	}
	leader = waitLeader(t, nodes...)
	waitFor(t, "the new addresses in every configuration", func() (bool, string) {
		for _, tn := range nodes {
			cfg, _ := tn.node.configuration()
			for _, s := range moved {
				srv, ok := findServer(cfg, s.id)
				if !ok || string(srv.Address) != s.raftAddr {
					return false, fmt.Sprintf("%s sees %s at %q, want %s", tn.spec.id, s.id, srv.Address, s.raftAddr)
				}
			}
		}
		return true, ""
	})
	waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
	for _, tn := range nodes {
		for i := range 3 {
			waitNamespace(t, tn, fmt.Sprint("keep-", i))
		}
	}
	// Status (what `indexify cluster snapshot restore` uses to find the
	// leader) names the leader with its new gRPC address.
	waitFor(t, "status names the leader's new gRPC address", func() (bool, string) {
		st := followersOf(leader, nodes)[0].node.Status()
		for _, m := range st.Members {
			if m.Leader {
				return m.Id == leader.spec.id && m.GrpcAddr == leader.spec.grpcAddr, fmt.Sprint(m)
			}
		}
		return false, "no member marked leader"
	})
	follower := followersOf(leader, nodes)[0]
	mustCreateNamespace(t, follower.node, "after-move")
	for _, tn := range nodes {
		waitNamespace(t, tn, "after-move")
	}
}

// A probe answer from another cluster never enters the address book; one
// from our cluster overrides the configuration's address.
func TestAddressBookSources(t *testing.T) {
	tn := startNode(t, newSpecs(t, 1)[0], nil, nil)
	waitLeader(t, tn)
	n := tn.node
	book := n.book
	if a, err := book.ServerAddr("n1"); err != nil || string(a) != n.RaftAddr() {
		t.Fatalf("self: %q %v", a, err)
	}
	if _, err := book.ServerAddr("ghost"); err == nil {
		t.Fatal("unknown server got an address")
	}
	book.learnProbe(&pb.ProbeResponse{NodeId: "x", RaftAddr: "127.0.0.9:1", ClusterId: "other", HasState: true}, "127.0.0.9:2")
	if _, err := book.ServerAddr("x"); err == nil {
		t.Fatal("probe answer of a foreign cluster was used")
	}
	book.learnProbe(&pb.ProbeResponse{NodeId: "x", RaftAddr: "127.0.0.9:1", ClusterId: n.ClusterID(), HasState: true}, "127.0.0.9:2")
	if a, err := book.ServerAddr("x"); err != nil || a != "127.0.0.9:1" {
		t.Fatalf("probe answer not used: %q %v", a, err)
	}
	if g := n.grpcAddrOf("x"); g != "127.0.0.9:2" {
		t.Fatalf("grpc address %q", g)
	}

	// A configured server: the probe answer beats the configuration until
	// the configuration changes after it (a Join the leader accepted).
	addNonvoter := func(addr string) {
		t.Helper()
		if err := n.raft.AddNonvoter("y", raft.ServerAddress(addr), 0, time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	addNonvoter("127.0.0.9:3")
	book.learnProbe(&pb.ProbeResponse{NodeId: "y", RaftAddr: "127.0.0.9:4", ClusterId: n.ClusterID(), HasState: true}, "127.0.0.9:5")
	if a, _ := book.ServerAddr("y"); a != "127.0.0.9:4" {
		t.Fatalf("probe answer not preferred over the configuration: %q", a)
	}
	addNonvoter("127.0.0.9:6")
	if a, _ := book.ServerAddr("y"); a != "127.0.0.9:6" {
		t.Fatalf("newer configuration not preferred over an older probe answer: %q", a)
	}
	if err := n.raft.RemoveServer("y", 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
}

// A node with no leader still learns a moved member's address from its Join,
// so it can dial that member for votes and a leader can be elected again.
func TestJoinTeachesAddressWithoutLeader(t *testing.T) {
	specs := newSpecs(t, 3)
	join := staticJoin(specs)
	var nodes []*testNode
	for _, s := range specs {
		nodes = append(nodes, startNode(t, s, func(c *Config) { c.BootstrapExpect = 3; c.Join = join }, nil))
	}
	waitLeader(t, nodes...)
	survivor := nodes[0]
	waitFor(t, "cluster id known", func() (bool, string) { return survivor.node.ClusterID() != "", "" })
	nodes[1].stop()
	nodes[2].stop()
	waitFor(t, "survivor has no leader", func() (bool, string) {
		_, id := survivor.node.raft.LeaderWithID()
		return id == "", string(id)
	})

	moved := "127.0.0.99:4242"
	cl := clusterClient(t, survivor.spec.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := cl.Join(ctx, &pb.JoinRequest{NodeId: "n2", RaftAddr: moved, GrpcAddr: "127.0.0.99:4243",
		ClusterId: survivor.node.ClusterID()})
	if err == nil {
		t.Fatal("Join succeeded without a leader")
	}
	if a, _ := survivor.node.book.ServerAddr("n2"); string(a) != moved {
		t.Fatalf("survivor dials n2 at %q, want the address from its Join %q", a, moved)
	}
	// A Join naming another cluster teaches nothing.
	_, _ = cl.Join(ctx, &pb.JoinRequest{NodeId: "n3", RaftAddr: "127.0.0.98:1", ClusterId: "someone-else"})
	if a, _ := survivor.node.book.ServerAddr("n3"); string(a) == "127.0.0.98:1" {
		t.Fatal("a Join from another cluster changed the address book")
	}
}
