package api

import (
	"context"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc"

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
