package api

import (
	"context"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func TestReadConsistencyInterceptorFillsUnsetLevel(t *testing.T) {
	icpt := ReadConsistencyInterceptor()
	var got any
	invoker := func(_ context.Context, _ string, req, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		got = req
		return nil
	}
	ctx := withConsistency(context.Background(), pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE)

	orig := &pb.ListNamespacesRequest{}
	if err := icpt(ctx, "/m", orig, nil, nil, invoker); err != nil {
		t.Fatal(err)
	}
	if l := got.(*pb.ListNamespacesRequest).GetConsistency(); l != pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE {
		t.Fatalf("level sent = %v, want linearizable", l)
	}
	if orig.GetConsistency() != pb.ReadConsistency_READ_CONSISTENCY_DEFAULT {
		t.Fatal("the caller's request was modified")
	}

	// An explicit level chosen by a handler wins.
	explicit := &pb.GetTaskRequest{Consistency: pb.ReadConsistency_READ_CONSISTENCY_STALE}
	_ = icpt(ctx, "/m", explicit, nil, nil, invoker)
	if l := got.(*pb.GetTaskRequest).GetConsistency(); l != pb.ReadConsistency_READ_CONSISTENCY_STALE {
		t.Fatalf("explicit level overridden: %v", l)
	}

	// Requests without the field pass through untouched.
	write := &pb.CreateNamespaceRequest{Name: "x"}
	_ = icpt(ctx, "/m", write, nil, nil, invoker)
	if got != write {
		t.Fatal("a write request was replaced")
	}
}

func TestDefaultLevelConfirmsNotFoundLinearizably(t *testing.T) {
	icpt := ReadConsistencyInterceptor()
	var levels []pb.ReadConsistency
	invoker := func(_ context.Context, _ string, req, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		l := req.(*pb.GetContentRequest).GetConsistency()
		levels = append(levels, l)
		if l == pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE {
			return nil // the lagging replica's answer was stale: the leader has it
		}
		return status.Error(codes.NotFound, "content not found")
	}
	if err := icpt(context.Background(), "/m", &pb.GetContentRequest{}, nil, nil, invoker); err != nil {
		t.Fatalf("err = %v, want the linearizable answer", err)
	}
	if len(levels) != 2 || levels[0] != pb.ReadConsistency_READ_CONSISTENCY_DEFAULT || levels[1] != pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE {
		t.Fatalf("levels tried = %v", levels)
	}
	// A stale read asked for explicitly is not upgraded.
	levels = nil
	ctx := withConsistency(context.Background(), pb.ReadConsistency_READ_CONSISTENCY_STALE)
	if err := icpt(ctx, "/m", &pb.GetContentRequest{}, nil, nil, invoker); status.Code(err) != codes.NotFound {
		t.Fatalf("stale read: %v", err)
	}
	if len(levels) != 1 {
		t.Fatalf("stale read tried %v", levels)
	}
}

func TestParseConsistency(t *testing.T) {
	for q, want := range map[string]pb.ReadConsistency{
		"":                          pb.ReadConsistency_READ_CONSISTENCY_DEFAULT,
		"?consistency=stale":        pb.ReadConsistency_READ_CONSISTENCY_STALE,
		"?consistency=LINEARIZABLE": pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE,
	} {
		got, err := parseConsistency(httptest.NewRequest("GET", "/namespaces"+q, nil))
		if err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", q, got, err, want)
		}
	}
	if _, err := parseConsistency(httptest.NewRequest("GET", "/namespaces?consistency=eventual", nil)); err == nil {
		t.Error("an unknown level was accepted")
	}
}
