package coordinator

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Health Watch streams stay open until cancelled, so they stand in for
// executor heartbeat streams: with a cap of 2, a third stream on the same
// connection cannot start until one of the first two ends.
func TestMaxConcurrentStreamsCapsOneConnection(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpcServerOptions(ServerConfig{MaxConcurrentStreams: 2})...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cl := healthpb.NewHealthClient(cc)

	open := func(ctx context.Context) (healthpb.Health_WatchClient, error) {
		st, err := cl.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return nil, err
		}
		_, err = st.Recv() // the first status arrives once the stream runs
		return st, err
	}
	bg, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	first, cancelFirst := context.WithCancel(bg)
	if _, err := open(first); err != nil {
		t.Fatal(err)
	}
	if _, err := open(bg); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	_, err = open(short)
	cancel()
	if status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third stream: %v, want it held back until the deadline", err)
	}
	cancelFirst()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if _, err := open(ctx); err != nil {
		t.Fatalf("stream after one ended: %v", err)
	}
}
