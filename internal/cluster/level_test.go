package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// waitLevels waits until every node's store holds the announced command
// level want[id] of every member.
func waitLevels(t *testing.T, nodes []*testNode, want map[string]uint32) {
	t.Helper()
	waitFor(t, fmt.Sprintf("announced levels %v", want), func() (bool, string) {
		for _, tn := range nodes {
			for id, l := range want {
				info, ok := tn.fsm.Store().Node(id)
				if !ok || info.GetCommandLevel() != l {
					return false, fmt.Sprintf("%s sees %s: %v", tn.spec.id, id, info)
				}
			}
		}
		return true, ""
	})
}

func completeV2() *pb.Command {
	return &pb.Command{Op: &pb.Command_CompleteTaskV2{CompleteTaskV2: &pb.CompleteTaskCmd{
		TaskId: "t1", ExecutorId: "ex1", Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS}}}
}

// A self-feeding policy name: RulesBounded refuses it (INVALID), the
// original rules go on to look for the extractor (NOT_FOUND).
func reservedPolicy() *pb.Command {
	return &pb.Command{Op: &pb.Command_CreateGraph{CreateGraph: &pb.CreateExtractionGraphCmd{Graph: &pb.ExtractionGraph{
		Namespace: "lv", Name: "loopg", Policies: []*pb.ExtractionPolicy{{Name: "ingestion", Extractor: "x"}}}}}}
}

// Rolling upgrade: while one member announces an older command level, no
// node proposes a command form or rules version that member would apply
// differently -- complete_task_v2 is refused unproposed with UNAVAILABLE
// naming the member (also when a node of the older version forwards it to
// the leader as it is), and the rules version is lowered to the old
// member's, so every replica judges by the same rules. Once the member runs
// this version (restarted with it), both new forms are proposed.
func TestMixedVersionNewCommandFormsWaitForEveryMember(t *testing.T) {
	specs := newSpecs(t, 3)
	mode := staticMode(specs)
	older := func(n *Node) { n.commandLevel = 0 } // n3 plays the previous version
	nodes := []*testNode{startNode(t, specs[0], mode, nil), startNode(t, specs[1], mode, nil), startNode(t, specs[2], mode, older)}
	leader := waitLeader(t, nodes...)
	waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
	waitLevels(t, nodes, map[string]uint32{"n1": state.CommandLevel, "n2": state.CommandLevel, "n3": 0})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	mustCreateNamespace(t, leader.node, "lv")

	for _, tn := range nodes[:2] { // the nodes of this version, leader or follower
		res, err := tn.node.Apply(ctx, completeV2())
		if err != nil || res.ErrorCode != pb.ErrorCode_ERROR_CODE_UNAVAILABLE || res.Index != 0 || !strings.Contains(res.Error, "n3") {
			t.Fatalf("complete_task_v2 via %s with n3 at level 0: %v %v; want UNAVAILABLE naming n3, not proposed", tn.spec.id, res, err)
		}
		cmd := reservedPolicy()
		res, err = tn.node.Apply(ctx, cmd)
		if err != nil || cmd.Rules != state.RulesOriginal || res.ErrorCode != pb.ErrorCode_ERROR_CODE_NOT_FOUND {
			t.Fatalf("rules via %s with n3 at level 0: stamped %d, result %v %v; want the original rules (NOT_FOUND)", tn.spec.id, cmd.Rules, res, err)
		}
	}
	// A node of the older version forwards what it is given, unfitted: the
	// leader fits it itself.
	if leader != nodes[2] {
		resp, err := clusterClient(t, leader.spec.grpcAddr).Apply(ctx, &pb.ApplyRequest{Command: completeV2()})
		if err != nil || resp.GetResult().GetErrorCode() != pb.ErrorCode_ERROR_CODE_UNAVAILABLE || resp.GetResult().GetIndex() != 0 {
			t.Fatalf("forwarded complete_task_v2 at the leader: %v %v", resp, err)
		}
	}

	// n3 is upgraded: restarted with this version, it announces its level.
	nodes[2].stop()
	nodes[2] = startNode(t, specs[2], mode, nil)
	waitLeader(t, nodes...)
	waitLevels(t, nodes, map[string]uint32{"n1": state.CommandLevel, "n2": state.CommandLevel, "n3": state.CommandLevel})
	for _, tn := range nodes {
		res, err := tn.node.Apply(ctx, completeV2())
		// Proposed and applied: the FSM answers for the unknown task.
		if err != nil || res.ErrorCode != pb.ErrorCode_ERROR_CODE_NOT_FOUND || res.Index == 0 {
			t.Fatalf("complete_task_v2 via %s after the upgrade: %v %v", tn.spec.id, res, err)
		}
		cmd := reservedPolicy()
		res, err = tn.node.Apply(ctx, cmd)
		if err != nil || cmd.Rules != state.CurrentRules || res.ErrorCode != pb.ErrorCode_ERROR_CODE_INVALID {
			t.Fatalf("rules via %s after the upgrade: stamped %d, result %v %v; want the bounded rules (INVALID)", tn.spec.id, cmd.Rules, res, err)
		}
	}
}
