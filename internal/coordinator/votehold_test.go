package coordinator_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/coordinator"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// A node that withholds its vote says so (issue 13): a coordinator that
// starts empty in a static three-node list whose other members never
// answer can neither bootstrap nor join, so it stays held; its Status
// (what `cluster status` and GET /cluster show) and its /metrics say so.
func TestHeldNodeSaysSoInStatusAndMetrics(t *testing.T) {
	grpcAddr := freeAddr(t)
	dead1, dead2 := freeAddr(t), freeAddr(t) // closed ports on loopback
	log := slog.New(slog.DiscardHandler)
	node := startNode(t, cluster.Config{
		NodeID: "h-0", DataDir: filepath.Join(t.TempDir(), "coord"), RaftBind: freeAddr(t),
		GRPCAdvertise: grpcAddr, BootstrapExpect: 3, ElectionTimeout: 200 * time.Millisecond, Logger: log,
		Join: []string{"h-0=" + grpcAddr, "h-1=" + dead1, "h-2=" + dead2},
	}, coordinator.ServerConfig{GRPCAddr: grpcAddr, HTTPAddr: "127.0.0.1:0", Logger: log})
	t.Cleanup(func() { node.Shutdown() })

	conn, err := coordclient.Dial([]string{grpcAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var st *pb.StatusResponse
	waitFor(t, "status answers", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err = pb.NewClusterServiceClient(conn).Status(ctx, &pb.StatusRequest{})
		return err
	})
	if !st.GetVoteHeld() || st.GetVotesWithheld() != 0 {
		t.Fatalf("status of an empty node that cannot catch up: vote_held %v, votes_withheld %d", st.GetVoteHeld(), st.GetVotesWithheld())
	}
	_, body := get(t, "http://"+node.HTTPAddr()+"/metrics", nil)
	for _, want := range []string{"indexify_raft_vote_held 1", "indexify_raft_votes_withheld_total 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// A node with state holds no vote, and says that too.
func TestLeaderHoldsNoVote(t *testing.T) {
	s := startStack(t)
	_, body := get(t, "http://"+s.node.HTTPAddr()+"/metrics", nil)
	if v := metricValue(t, string(body), "indexify_raft_vote_held"); v != 0 {
		t.Fatalf("indexify_raft_vote_held %v on a leader", v)
	}
	resp, body := get(t, s.api.URL+"/cluster", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"vote_held":false`) {
		t.Fatalf("GET /cluster: %d %s", resp.StatusCode, body)
	}
}
