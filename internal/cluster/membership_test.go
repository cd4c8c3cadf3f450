package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// A voter that joins saying it has no Raft state (wiped, or a static voter
// starting late) stays a voter: its own vote hold keeps it from voting
// until it has caught up. Demoting it instead left a 3-node cluster with two
// voters; when the leader then died, the two nodes still up were one voter
// and one non-voter and could elect no one (the autopilot that promotes
// runs only on a leader) until the dead node came back.
func TestLateStaticVoterIsNeverDemoted(t *testing.T) {
	specs := newSpecs(t, 3)
	mode := staticMode(specs)
	nodes := []*testNode{
		startNode(t, specs[0], mode, nil),
		startNode(t, specs[1], mode, nil),
		startNode(t, specs[2], mode, nil),
	}
	leader := waitLeader(t, nodes...)
	waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
	mustCreateNamespace(t, leader.node, "before")

	var late *testNode
	var rest []*testNode
	for _, tn := range nodes {
		if tn == leader {
			continue
		}
		if late == nil {
			late = tn
		}
		rest = append(rest, tn)
	}
	// What a node without Raft state sends (joinRequest: cluster_id "").
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := leader.node.handleJoin(ctx, &pb.JoinRequest{
		NodeId: late.spec.id, RaftAddr: late.spec.raftAddr, GrpcAddr: late.spec.grpcAddr,
		HttpAddr: late.spec.ip + ":8900", CommandLevel: state.CommandLevel,
	})
	if err != nil {
		t.Fatalf("join of a stateless voter: %v", err)
	}
	if v, nv := members(leader.node); fmt.Sprint(v) != "[n1 n2 n3]" || len(nv) != 0 {
		t.Fatalf("after the stateless join: voters %v, non-voters %v; want every node a voter", v, nv)
	}

	// The leader dies right away: the two left are still 2 of 3 voters.
	leader.stop()
	next := waitLeader(t, rest...)
	mustCreateNamespace(t, next.node, "after")
	for _, tn := range rest {
		waitNamespace(t, tn, "after")
	}
}

// Replication is synchronous (MaxRPCsInFlight 1): hashicorp/raft v1.8's
// pipeline can stop replicating to a follower for good after one rejected
// append (its unbuffered hand-off channels deadlock; the follower keeps
// getting heartbeats and never another entry, and the leader's Shutdown
// hangs). The transport must refuse to open a pipeline, so raft never
// takes that path.
func TestReplicationIsNotPipelined(t *testing.T) {
	tn := startNode(t, newSpecs(t, 1)[0], nil, nil)
	waitLeader(t, tn)
	p, err := tn.node.gate.AppendEntriesPipeline("peer", "127.0.0.1:1")
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		if p != nil {
			p.Close()
		}
		t.Fatalf("AppendEntriesPipeline: %v; want ErrPipelineReplicationNotSupported (pipelining off)", err)
	}
}
