package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/state"
)

// The window of issue 13 item 2, forced open in every round: acknowledged
// writes are committed by the leader L and one follower W while the other
// follower B is down; then W loses its data directory and L crashes, so the
// only copies of those writes are on L's disk. B (stale) and W (empty) come
// back while L stays down: W is still a voter in the configuration and no
// leader can demote it. An empty W that grants B its vote elects a leader
// without the writes, and they are gone for good once L returns. The wiped
// node must grant no vote (and persist none) while it lacks the log, and
// once L is back every acknowledged write must be on every node and W must
// be a voter again.
// campaignWait bounds the waits of TestWipedVoterVotesOnlyAfterCatchingUp
// that depend on elections, which a loaded machine slows down.
const campaignWait = 3 * waitTimeout

func TestWipedVoterVotesOnlyAfterCatchingUp(t *testing.T) {
	const rounds = 5
	specs := newSpecs(t, 3)
	mode := staticMode(specs)
	nodes := make([]*testNode, len(specs))
	for i, s := range specs {
		nodes[i] = startNode(t, s, mode, nil)
	}
	waitLeader(t, nodes...)
	waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
	var acked []string
	for round := range rounds {
		leader := waitLeader(t, nodes...)
		var li, bi, wi int
		var others []int
		for i, tn := range nodes {
			if tn == leader {
				li = i
			} else {
				others = append(others, i)
			}
		}
		// Rotate which follower lags and which one is wiped.
		bi, wi = others[round%2], others[(round+1)%2]
		L, B, W := nodes[li], nodes[bi], nodes[wi]
		t.Logf("round %d: leader %s, lagging %s, wiped %s", round, L.spec.id, B.spec.id, W.spec.id)

		B.stop()
		for k := range 5 {
			// Acknowledged: committed by L and W, the only nodes up. On a
			// loaded machine leadership may move between them meanwhile;
			// the write is retried (its request id makes that safe).
			name := fmt.Sprintf("r%d-k%d", round, k)
			var last error
			if err := retry.PollFor(campaignWait, 50*time.Millisecond, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*testET)
				defer cancel()
				res, err := createNamespace(ctx, L.node, name)
				if err == nil {
					err = state.ResultError(res)
				}
				last = err
				return err
			}); err != nil {
				t.Fatalf("round %d: write %s never acknowledged: %v", round, name, last)
			}
			acked = append(acked, name)
		}
		W.stop()
		if err := os.RemoveAll(W.spec.dir); err != nil {
			t.Fatal(err)
		}
		L.stop() // the crash: the acknowledged writes now live on L's disk only

		// B's log, for the failure message.
		blog := &syncBuf{}
		withLog := func(c *Config) {
			mode(c)
			c.Logger = slog.New(slog.NewTextHandler(blog, &slog.HandlerOptions{Level: slog.LevelInfo})).With("t", B.spec.id)
		}
		B = startNode(t, B.spec, withLog, nil)
		W = startNode(t, W.spec, mode, nil)
		nodes[bi], nodes[wi] = B, W

		// Wait until B won an election, or W refused two of its campaigns
		// (W is the only other voter up: each campaign asks it). Counted
		// by W's own transport gate, not read from Raft's log text.
		if err := retry.PollFor(campaignWait, 20*time.Millisecond, func() error {
			if B.node.IsLeader() {
				return nil
			}
			if n := W.node.VotesWithheld(); n < 2 {
				return fmt.Errorf("%s refused %d vote requests, %s is %s", W.spec.id, n, B.spec.id, B.node.Raft().State())
			}
			return nil
		}); err != nil {
			t.Fatalf("round %d: %s never campaigned: %v; %s's log:\n%s", round, B.spec.id, err, B.spec.id, blog.String())
		}
		if B.node.IsLeader() {
			t.Errorf("round %d: %s, which lacks acknowledged writes, was elected with the vote of the wiped %s", round, B.spec.id, W.spec.id)
		}
		if st := W.node.Status(); !st.GetVoteHeld() || st.GetVotesWithheld() < 2 {
			t.Errorf("round %d: the wiped %s does not say it holds its vote: vote_held %v, votes_withheld %d",
				round, W.spec.id, st.GetVoteHeld(), st.GetVotesWithheld())
		}
		if votes, pre := W.node.VotesGranted(); votes != 0 || pre != 0 {
			t.Errorf("round %d: the wiped %s granted %d votes and %d pre-votes while its log was empty", round, W.spec.id, votes, pre)
		}

		L = startNode(t, L.spec, mode, nil)
		nodes[li] = L
		leader = waitLeader(t, nodes...)
		for _, name := range acked {
			waitNamespace(t, leader, name)
		}
		waitVoters(t, []string{"n1", "n2", "n3"}, nodes...)
		for _, tn := range nodes {
			for _, name := range acked {
				waitNamespace(t, tn, name)
			}
		}
		waitFor(t, fmt.Sprintf("round %d: %s to release its vote hold", round, W.spec.id), func() (bool, string) {
			return !W.node.Status().GetVoteHeld(), fmt.Sprintf("applied %d", W.node.Raft().AppliedIndex())
		})
		if _, err := os.Stat(voteHoldPath(W.spec.dir)); !os.IsNotExist(err) {
			t.Errorf("round %d: vote hold marker still there: %v", round, err)
		}
		if t.Failed() {
			t.Fatalf("round %d failed; %s's log:\n%s", round, B.spec.id, blog.String())
		}
	}
}

// The transport gate of a held node, over hashicorp/raft's in-memory
// transport: vote traffic is refused before Raft sees it (except a
// bootstrap-only candidate while the log is empty), everything passes once
// released, and the node asks for no votes while held.
func TestVoteGate(t *testing.T) {
	wAddr, wInner := raft.NewInmemTransport("w")
	cAddr, cand := raft.NewInmemTransport("c")
	cand.Connect(wAddr, wInner)
	wInner.Connect(cAddr, cand)
	var held, empty atomic.Bool
	var notes atomic.Int32
	g := newVoteGate(wInner, "w", string(wAddr), held.Load, empty.Load, func(string, []byte) { notes.Add(1) })
	defer g.Close()
	// Stand-ins for Raft behind the gate and on the candidate: grant all.
	var seen atomic.Int32
	grantAll := func(ch <-chan raft.RPC, count *atomic.Int32) {
		for rpc := range ch {
			if count != nil {
				count.Add(1)
			}
			switch req := rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
			case *raft.RequestPreVoteRequest:
				rpc.Respond(&raft.RequestPreVoteResponse{Term: req.Term, Granted: true}, nil)
			default:
				rpc.Respond(&raft.TimeoutNowResponse{}, nil)
			}
		}
	}
	go grantAll(g.Consumer(), &seen)
	go grantAll(cand.Consumer(), nil)

	ask := func(last uint64) (vote, pre bool, tnErr error) {
		var vr raft.RequestVoteResponse
		if err := cand.RequestVote("w", wAddr, &raft.RequestVoteRequest{Term: 7, LastLogIndex: last, LastLogTerm: 3}, &vr); err != nil {
			t.Fatal(err)
		}
		if vr.Term != 7 {
			t.Fatalf("vote answer term %d, want the request's 7", vr.Term)
		}
		var pr raft.RequestPreVoteResponse
		if err := cand.RequestPreVote("w", wAddr, &raft.RequestPreVoteRequest{Term: 8, LastLogIndex: last, LastLogTerm: 3}, &pr); err != nil {
			t.Fatal(err)
		}
		if pr.Term != 8 {
			t.Fatalf("pre-vote answer term %d, want the request's 8", pr.Term)
		}
		tnErr = cand.TimeoutNow("w", wAddr, &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{})
		return vr.Granted, pr.Granted, tnErr
	}

	grants := func() [2]int64 { return [2]int64{g.votesGranted.Load(), g.preVotesGranted.Load()} }
	held.Store(true)
	if v, p, tn := ask(10); v || p || tn == nil || seen.Load() != 0 || notes.Load() != 3 || grants() != [2]int64{} {
		t.Fatalf("held: vote %v pre-vote %v timeout-now err %v, raft saw %d, noted %d, grants counted %v", v, p, tn, seen.Load(), notes.Load(), grants())
	}
	empty.Store(true) // no log yet: a bootstrap-only candidate gets through, others not
	if v, p, _ := ask(1); !v || !p || grants() != [2]int64{1, 1} {
		t.Fatalf("held, empty, bootstrap-only candidate: vote %v pre-vote %v, grants counted %v", v, p, grants())
	}
	if v, p, _ := ask(2); v || p {
		t.Fatalf("held, empty, candidate with entries: vote %v pre-vote %v", v, p)
	}
	var vr raft.RequestVoteResponse
	if err := g.RequestVote("c", cAddr, &raft.RequestVoteRequest{Term: 1}, &vr); !errors.Is(err, errVoteWithheld) {
		t.Fatalf("held node asked for a vote: %v", err)
	}
	var pr raft.RequestPreVoteResponse
	if err := g.RequestPreVote("c", cAddr, &raft.RequestPreVoteRequest{Term: 1}, &pr); !errors.Is(err, errVoteWithheld) {
		t.Fatalf("held node asked for a pre-vote: %v", err)
	}
	// raft counts a pre-vote error with this text as granted.
	if strings.Contains(errVoteWithheld.Error(), "unexpected command") {
		t.Fatal("errVoteWithheld would be taken for a granted pre-vote")
	}

	held.Store(false)
	empty.Store(false)
	if v, p, tn := ask(10); !v || !p || tn != nil || grants() != [2]int64{2, 2} {
		t.Fatalf("released: vote %v pre-vote %v timeout-now err %v, grants counted %v", v, p, tn, grants())
	}
	if err := g.RequestVote("c", cAddr, &raft.RequestVoteRequest{Term: 1}, &vr); err != nil || !vr.Granted {
		t.Fatalf("released node's vote request: %v %v", err, vr.Granted)
	}
	if err := g.RequestPreVote("c", cAddr, &raft.RequestPreVoteRequest{Term: 1}, &pr); err != nil || !pr.Granted {
		t.Fatalf("released node's pre-vote request: %v %v", err, pr.Granted)
	}
}

// The marker is written for an empty node before Raft starts and survives a
// restart with a partial log; a node with state and no marker is not held.
func TestVoteHoldMarker(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: Config{DataDir: dir}}
	if err := n.initVoteHold(false); err != nil || n.VoteHeld() {
		t.Fatalf("node with state, no marker: held %v, %v", n.VoteHeld(), err)
	}
	if err := n.initVoteHold(true); err != nil || !n.VoteHeld() {
		t.Fatalf("empty node: held %v, %v", n.VoteHeld(), err)
	}
	again := &Node{cfg: Config{DataDir: dir}}
	if err := again.initVoteHold(false); err != nil || !again.VoteHeld() {
		t.Fatalf("restart with a partial log: held %v, %v", again.VoteHeld(), err)
	}
}

// The gate remembers the highest commit index a leader announced (append
// entries, snapshots), which ends the hold once the log reaches it.
func TestVoteGateRecordsAnnouncedCommit(t *testing.T) {
	wAddr, wInner := raft.NewInmemTransport("w")
	lAddr, leader := raft.NewInmemTransport("l")
	leader.Connect(wAddr, wInner)
	wInner.Connect(lAddr, leader)
	var held, empty atomic.Bool
	held.Store(true)
	g := newVoteGate(wInner, "w", string(wAddr), held.Load, empty.Load, func(string, []byte) {})
	defer g.Close()
	go func() {
		for rpc := range g.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
		}
	}()
	for _, c := range []uint64{5, 9, 7} { // a lower index later never lowers it
		var resp raft.AppendEntriesResponse
		if err := leader.AppendEntries("w", wAddr, &raft.AppendEntriesRequest{Term: 2, LeaderCommitIndex: c}, &resp); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.seenCommit.Load(); got != 9 {
		t.Fatalf("seen commit %d, want 9", got)
	}
}
