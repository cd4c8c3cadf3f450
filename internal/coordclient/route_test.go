package coordclient_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/errcode"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// attempts records every try of a connection's calls.
type attempts struct {
	mu  sync.Mutex
	all []coordclient.Attempt
}

func (a *attempts) option() grpc.DialOption {
	return coordclient.OnAttempt(func(at coordclient.Attempt) {
		a.mu.Lock()
		a.all = append(a.all, at)
		a.mu.Unlock()
	})
}

// dialRecorded dials targets (with opts) and records every try.
func dialRecorded(t *testing.T, targets []string, opts ...grpc.DialOption) (pb.CoordinatorServiceClient, *attempts) {
	t.Helper()
	rec := &attempts{}
	conn, err := coordclient.Dial(targets, append(opts, rec.option())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewCoordinatorServiceClient(conn), rec
}

// take returns the tries recorded since the last take.
func (a *attempts) take() []coordclient.Attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.all
	a.all = nil
	return out
}

// Writes go to the leader once a follower's answer named it: the client
// learns the leader from the forwarded write's trailer and sends that
// method's next calls there at the first try, while reads stay balanced.
// After the leader moves, the first routed try is refused with a hint, the
// hinted leader serves it, and the route follows.
func TestWritesGoToTheLeaderAFollowerNamed(t *testing.T) {
	nodes := startCluster(t, 3)
	leader, err := agreedLeader(nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, n := range nodes {
		targets = append(targets, n.GRPCAddr())
	}
	cl, rec := dialRecorded(t, targets)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// waitRouted writes until a write's first try goes to want and succeeds.
	// Round robin sends one of the first three writes to a follower, whose
	// answer names the leader; the leader's connection then needs a moment.
	seq := 0
	waitRouted := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; ; i++ {
			seq++
			name := fmt.Sprintf("ns%d", seq)
			if _, err := cl.CreateNamespace(ctx, &pb.CreateNamespaceRequest{Name: name, RequestId: "r-" + name}); err != nil {
				t.Fatalf("write %s: %v", name, err)
			}
			tries := rec.take()
			if len(tries) == 1 && tries[0].Target == want {
				return
			}
			if time.Now().After(deadline) || i >= 200 {
				t.Fatalf("after %d writes none went to %s at its first try; last: %+v", i+1, want, tries)
			}
			time.Sleep(10 * time.Millisecond) // pacing only: the loop polls the routed state
		}
	}
	waitRouted(nodes[leader].GRPCAddr())
	// Every following write goes there first.
	for i := 0; i < 10; i++ {
		seq++
		name := fmt.Sprintf("ns%d", seq)
		if _, err := cl.CreateNamespace(ctx, &pb.CreateNamespaceRequest{Name: name, RequestId: "r-" + name}); err != nil {
			t.Fatal(err)
		}
		if tries := rec.take(); len(tries) != 1 || tries[0].Target != nodes[leader].GRPCAddr() {
			t.Fatalf("write %s: tries %+v, want one at the leader %s", name, tries, nodes[leader].GRPCAddr())
		}
	}
	// Reads are served by whichever coordinator gets them: no route.
	for i := 0; i < 6; i++ {
		if _, err := cl.ListNamespaces(ctx, &pb.ListNamespacesRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range rec.take() {
		if a.Target != "" {
			t.Fatalf("a read went to %s, want the balanced connection: %+v", a.Target, a)
		}
	}

	next := handOver(t, nodes, leader)
	if _, err := cl.CreateNamespace(ctx, &pb.CreateNamespaceRequest{Name: "moved", RequestId: "r-moved"}); err != nil {
		t.Fatalf("write after the leader change: %v", err)
	}
	tries := rec.take()
	if len(tries) != 2 || tries[0].Target != nodes[leader].GRPCAddr() || !errcode.IsNotLeader(tries[0].Err) ||
		tries[1].Target != nodes[next].GRPCAddr() || tries[1].Err != nil || tries[1].Waited != 0 {
		t.Fatalf("tries %+v, want the old leader's refusal, then at once the new leader %s", tries, nodes[next].GRPCAddr())
	}
	waitRouted(nodes[next].GRPCAddr())
}

// namesLeader answers every ListNamespaces and names leader in its trailer,
// as a coordinator that forwarded the call's write does.
type namesLeader struct {
	pb.UnimplementedCoordinatorServiceServer
	leader string
}

func (s namesLeader) ListNamespaces(ctx context.Context, _ *pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(errcode.LeaderTrailer, s.leader))
	return &pb.ListNamespacesResponse{}, nil
}

// A leader address the client cannot reach (a CLI outside the cluster
// told a pod's in-cluster name) is never waited for: its connection is not
// ready, so every call goes balanced at its first try.
func TestUnreachableNamedLeaderCostsNothing(t *testing.T) {
	a, gone := addr(t), addr(t) // nothing listens on gone
	lis, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterCoordinatorServiceServer(srv, namesLeader{leader: gone})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	cl, rec := dialRecorded(t, []string{a})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		if _, err := cl.ListNamespaces(ctx, &pb.ListNamespacesRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	for _, at := range rec.take() {
		if at.N != 1 || at.Target != "" || at.Err != nil {
			t.Fatalf("try %+v, want every call answered at its first try through the balanced connection", at)
		}
	}
}
