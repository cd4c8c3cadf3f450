package wire

import pb "github.com/indexify-go/indexify/proto/indexifypb"

// Member is one coordinator in the Raft configuration.
type Member struct {
	ID            string `json:"id"`
	RaftAddr      string `json:"raft_addr"`
	GRPCAddr      string `json:"grpc_addr"`
	Suffrage      string `json:"suffrage"`
	Voter         bool   `json:"voter"`
	Leader        bool   `json:"leader"`
	LastContactMs int64  `json:"last_contact_ms"` // -1: unknown to the answering node
	Healthy       bool   `json:"healthy"`
}

// ClusterStatus is the body of GET /cluster and the -o json|yaml output of
// `indexify cluster status|members`.
type ClusterStatus struct {
	NodeID       string `json:"node_id"` // the coordinator that answered
	ClusterID    string `json:"cluster_id"`
	State        string `json:"state"`
	LeaderID     string `json:"leader_id"`
	LeaderAddr   string `json:"leader_addr"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	LastLogIndex uint64 `json:"last_log_index"`
	Conflict     string `json:"conflict,omitempty"` // a cluster-id conflict the node saw
	// VoteHeld: the answering node started without Raft state and takes no
	// part in elections until it has caught up; VotesWithheld counts the
	// vote requests it refused meanwhile (since its process started).
	VoteHeld      bool     `json:"vote_held"`
	VotesWithheld int64    `json:"votes_withheld"`
	Members       []Member `json:"members"`
}

// StateDigest is what a coordinator's GET /debug/state-digest answers: the
// SHA-256 of its replica's canonical state dump (state.Store.Digest) and
// the applied index it was taken at. Replicas at the same applied index
// must agree; the chaos campaign compares every coordinator's digest at the
// end of a run. It reveals nothing of the data itself.
type StateDigest struct {
	NodeID       string `json:"node_id"`
	AppliedIndex uint64 `json:"applied_index"`
	SHA256       string `json:"sha256"`
}

// ClusterStatusFrom converts ClusterService.Status's answer.
func ClusterStatusFrom(st *pb.StatusResponse) ClusterStatus {
	out := ClusterStatus{
		NodeID: st.GetNodeId(), ClusterID: st.GetClusterId(), State: st.GetState(),
		LeaderID: st.GetLeaderId(), LeaderAddr: st.GetLeaderAddr(), Term: st.GetTerm(),
		CommitIndex: st.GetCommitIndex(), AppliedIndex: st.GetAppliedIndex(), LastLogIndex: st.GetLastLogIndex(),
		Conflict: st.GetConflict(), VoteHeld: st.GetVoteHeld(), VotesWithheld: st.GetVotesWithheld(),
		Members: make([]Member, 0, len(st.GetMembers())),
	}
	for _, m := range st.GetMembers() {
		out.Members = append(out.Members, Member{
			ID: m.GetId(), RaftAddr: m.GetRaftAddr(), GRPCAddr: m.GetGrpcAddr(), Suffrage: m.GetSuffrage(),
			Voter: m.GetSuffrage() == "voter", Leader: m.GetLeader(), LastContactMs: m.GetLastContactMs(),
			Healthy: m.GetHealthy(),
		})
	}
	return out
}
