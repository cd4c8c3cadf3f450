package coordclient_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/coordinator"
	"github.com/indexify-go/indexify/internal/coordproc"
	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/freeport"
	"github.com/indexify-go/indexify/internal/retry"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func addr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", freeport.Take(t, "127.0.0.1"))
}

// startCluster starts n real coordinators (Raft, gRPC, FSM) in this process
// and waits until they agree on a leader.
func startCluster(t *testing.T, n int) []*coordinator.Server {
	t.Helper()
	grpcAddrs := make([]string, n)
	for i := range grpcAddrs {
		grpcAddrs[i] = addr(t)
	}
	nodes := make([]*coordinator.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range nodes {
		raftAddr := addr(t)
		dir := t.TempDir()
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = startNode(cluster.Config{
				NodeID: fmt.Sprintf("c%d", i), DataDir: filepath.Join(dir, "coord"),
				RaftBind: raftAddr, RaftAdvertise: raftAddr, GRPCAdvertise: grpcAddrs[i],
				BootstrapExpect: n, Join: grpcAddrs, ElectionTimeout: 300 * time.Millisecond, Logger: log,
			}, coordinator.ServerConfig{GRPCAddr: grpcAddrs[i], HTTPAddr: "127.0.0.1:0", Logger: log})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		nd := nodes[i]
		t.Cleanup(func() { nd.Shutdown() })
	}
	if _, err := agreedLeader(nodes, nil); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// startNode starts a coordinator composed as the binary composes it.
func startNode(cc cluster.Config, sc coordinator.ServerConfig) (*coordinator.Server, error) {
	return coordproc.Start(context.Background(), coordproc.Config{Cluster: cc, Server: sc})
}

// handOver moves leadership away from node old: it hands over and stops
// its Raft node, while its gRPC server still answers (a pod that is
// terminating, refusing with a hint naming the new leader). It returns the
// new leader's index.
func handOver(t *testing.T, nodes []*coordinator.Server, old int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := nodes[old].Cluster().Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := agreedLeader(nodes, map[int]bool{old: true})
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// agreedLeader polls until every node not in skip names the same leader,
// and returns its index.
func agreedLeader(nodes []*coordinator.Server, skip map[int]bool) (int, error) {
	leader := -1
	err := retry.PollFor(30*time.Second, 10*time.Millisecond, func() error {
		id := ""
		for i, nd := range nodes {
			if skip[i] {
				continue
			}
			lid, _ := nd.Cluster().Leader()
			if lid == "" || (id != "" && lid != id) {
				return fmt.Errorf("node %d names leader %q, others %q", i, lid, id)
			}
			id = lid
		}
		for i, nd := range nodes {
			if nd.Cluster().ID() == id {
				if ok, why := nd.Cluster().Ready(); !ok {
					return fmt.Errorf("leader not ready: %s", why)
				}
				leader = i
				return nil
			}
		}
		return fmt.Errorf("leader %q is not one of ours", id)
	})
	return leader, err
}

// After a leader change, a write sent to the old leader is refused with a
// NOT_LEADER hint naming the new one, and the client's first retry goes
// straight there, without a backoff pause (issue 14: learn the new leader
// from the first coordinator that knows it).
func TestFirstRetryAfterLeaderChangeGoesToTheHintedLeader(t *testing.T) {
	nodes := startCluster(t, 3)
	old, err := agreedLeader(nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The client knows only the old leader: any success must come through
	// a redirect.
	cl, rec := dialRecorded(t, []string{nodes[old].GRPCAddr()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cl.CreateNamespace(ctx, &pb.CreateNamespaceRequest{Name: "before", RequestId: "r-before"}); err != nil {
		t.Fatal(err)
	}

	next := handOver(t, nodes, old)

	rec.take()
	if _, err := cl.CreateNamespace(ctx, &pb.CreateNamespaceRequest{Name: "after", RequestId: "r-after"}); err != nil {
		t.Fatalf("write after the leader change: %v", err)
	}
	attempts := rec.take()
	if len(attempts) != 2 {
		t.Fatalf("%d attempts, want 2 (refusal, then the hinted leader): %+v", len(attempts), attempts)
	}
	first, second := attempts[0], attempts[1]
	if _, hint, ok := errcode.LeaderHint(first.Err); !ok || hint != nodes[next].GRPCAddr() || first.Target != "" {
		t.Fatalf("first attempt: %+v, want NOT_LEADER naming %s", first, nodes[next].GRPCAddr())
	}
	if second.Err != nil || second.Target != nodes[next].GRPCAddr() || second.Waited != 0 {
		t.Fatalf("first retry: %+v, want an immediate success at %s", second, nodes[next].GRPCAddr())
	}
	if _, ok := nodes[next].Store().Namespace("after"); !ok {
		// The leader applied it; its own store has it once it answered.
		t.Fatal("the new leader does not have the namespace")
	}
}

type unavailable struct {
	pb.UnimplementedCoordinatorServiceServer
	calls atomic.Int32
}

func (u *unavailable) ListNamespaces(context.Context, *pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
	u.calls.Add(1)
	return nil, status.Error(codes.Unavailable, "no leader")
}

func (u *unavailable) ListExtractors(context.Context, *pb.ListExtractorsRequest) (*pb.ListExtractorsResponse, error) {
	u.calls.Add(1)
	return nil, status.Error(codes.FailedPrecondition, "conflict")
}

// UNAVAILABLE is retried within the caller's deadline, or the MaxAttempts
// budget when one is set; other codes are never retried.
func TestUnavailableRetriedWithinTheBudget(t *testing.T) {
	a := addr(t)
	lis, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &unavailable{}
	pb.RegisterCoordinatorServiceServer(srv, fake)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	conn, err := coordclient.Dial([]string{a}, coordclient.MaxAttempts(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cl := pb.NewCoordinatorServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.ListNamespaces(ctx, &pb.ListNamespacesRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	if n := fake.calls.Load(); n != 3 {
		t.Fatalf("%d tries, want the budget of 3", n)
	}
	fake.calls.Store(0)
	if _, err := cl.ListExtractors(ctx, &pb.ListExtractorsRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("err = %v", err)
	}
	if n := fake.calls.Load(); n != 1 {
		t.Fatalf("a conflict was tried %d times, want 1", n)
	}

	// Without a budget, a short deadline ends the retries.
	plain, err := coordclient.Dial([]string{a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	fake.calls.Store(0)
	sctx, scancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer scancel()
	if _, err := pb.NewCoordinatorServiceClient(plain).ListNamespaces(sctx, &pb.ListNamespacesRequest{}); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v", err)
	}
	if n := fake.calls.Load(); n < 2 {
		t.Fatalf("%d tries within the deadline, want retries", n)
	}
}

// hintsTo refuses every ListNamespaces with a NOT_LEADER hint naming leader.
type hintsTo struct {
	pb.UnimplementedCoordinatorServiceServer
	leader string
}

func (h *hintsTo) ListNamespaces(context.Context, *pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
	return nil, errcode.NotLeader("not the leader", "b", h.leader)
}

type answers struct {
	pb.UnimplementedCoordinatorServiceServer
}

func (answers) ListNamespaces(context.Context, *pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
	return &pb.ListNamespacesResponse{}, nil
}

// A hinted leader that was down when the client last tried it (a pod that
// restarted and then won the election) is tried afresh: the first redirect
// to it after it is back succeeds, instead of failing at once with the old
// "connection refused" for the rest of gRPC's reconnect backoff (~1 s).
func TestHintedLeaderBackFromDownIsTriedAtOnce(t *testing.T) {
	a, b := addr(t), addr(t)
	lis, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatal(err)
	}
	srvA := grpc.NewServer()
	pb.RegisterCoordinatorServiceServer(srvA, &hintsTo{leader: b})
	go srvA.Serve(lis)
	t.Cleanup(srvA.Stop)

	cl, rec := dialRecorded(t, []string{a}, coordclient.MaxAttempts(2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// b is down: the redirect fails and leaves the client's connection to b
	// in reconnect backoff.
	if _, err := cl.ListNamespaces(ctx, &pb.ListNamespacesRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("with the hinted leader down: err = %v, want Unavailable", err)
	}

	lisB, err := net.Listen("tcp", b)
	if err != nil {
		t.Fatal(err)
	}
	srvB := grpc.NewServer()
	pb.RegisterCoordinatorServiceServer(srvB, answers{})
	go srvB.Serve(lisB)
	t.Cleanup(srvB.Stop)

	rec.take()
	// Two tries: a, then the redirect to b, which must reach the server.
	if _, err := cl.ListNamespaces(ctx, &pb.ListNamespacesRequest{}); err != nil {
		t.Fatalf("with the hinted leader back: %v (tries: %+v)", err, rec.take())
	}
	if attempts := rec.take(); len(attempts) != 2 || attempts[1].Target != b {
		t.Fatalf("tries = %+v, want a then the redirect to %s", attempts, b)
	}
}
