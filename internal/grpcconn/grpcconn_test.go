package grpcconn

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/freeport"
)

// A call on a connection whose connect hangs (the old IP of a restarted
// pod) fails as UNAVAILABLE once the connect gives up, instead of waiting
// out its whole deadline behind gRPC's 20 s connect (it would end with
// DEADLINE_EXCEEDED here).
func TestCallFailsSoonWhenTheConnectHangs(t *testing.T) {
	cc, err := grpc.NewClient(freeport.Unanswered(t), grpc.WithTransportCredentials(insecure.NewCredentials()), Connect())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("call through a hanging connect: %v, want UNAVAILABLE", err)
	}
}
