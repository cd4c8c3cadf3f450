package cluster

// Mixed-version safety for command forms and rules versions (state
// CommandLevel). During a rolling upgrade a node of this version may lead
// followers of the previous one, or follow a leader of it. Every replica
// applies every log entry, so a proposer must not write an entry that some
// member applies differently: an operation it does not know (it would
// refuse what the others apply) or a rules version it ignores (it would
// accept what the others refuse). Each node announces its level in its own
// NodeInfo; admit fits every command to the lowest level announced by the
// members of the Raft configuration before it is proposed or forwarded.
// Forwarded commands are fitted by the follower too, because a leader of
// the previous version proposes what it is given (protobuf keeps the
// fields it does not know).
//
// Upgrading never needs an operator step: a member's level counts once its
// upsert of its own NodeInfo commits, and the new forms start then.
// Downgrading a node after its whole cluster ran at the new level is not
// supported: the log holds entries of the new level that the old version
// cannot apply.

import (
	"fmt"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// clusterLevel is the lowest command level announced by the members of the
// Raft configuration (voters and non-voters: both apply the log), with the
// member that has it. This node counts with its own level. A member without
// NodeInfo has never run in this cluster (every version upserts its own
// NodeInfo, and the leader publishes a joiner's at once, with the level its
// JoinRequest names): it is not counted, so that a new cluster does not
// start below its level while its members' upserts commit.
func (n *Node) clusterLevel() (level uint32, lowest string) {
	level = n.commandLevel
	cfg, _ := n.configuration()
	store := n.fsm.Store()
	for _, s := range cfg.Servers {
		id := string(s.ID)
		if id == n.cfg.NodeID {
			continue
		}
		if info, ok := store.Node(id); ok && info.GetCommandLevel() < level {
			level, lowest = info.GetCommandLevel(), id
		}
	}
	return level, lowest
}

// admit fits cmd to the cluster's command level: it lowers cmd.Rules to the
// level every member applies, and refuses (ERROR_CODE_UNAVAILABLE, not
// proposed) a command form some member does not know yet. nil: propose.
func (n *Node) admit(cmd *pb.Command) *pb.CommandResult {
	level, lowest := n.clusterLevel()
	if cmd.Rules > level {
		cmd.Rules = level
	}
	if need := state.NeededLevel(cmd); need > level {
		return &pb.CommandResult{ErrorCode: pb.ErrorCode_ERROR_CODE_UNAVAILABLE, Error: fmt.Sprintf(
			"cluster: this operation needs command level %d on every coordinator, but %s announces level %d "+
				"(an older version, or not started since the upgrade); retry once every coordinator runs this version",
			need, lowest, level)}
	}
	return nil
}
