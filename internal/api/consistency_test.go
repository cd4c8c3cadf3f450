package api

import (
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// The level asked for in the query string reaches the coordinator in the
// request message, for the route's own read and for the lookups it makes.
func TestQueryLevelIsSentInTheRequest(t *testing.T) {
	e := newEnv(t)
	withGraphs(e)
	on(e.fake, "ListNamespaces", func(*pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
		return &pb.ListNamespacesResponse{}, nil
	})
	on(e.fake, "ListTasks", func(*pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
		return &pb.ListTasksResponse{}, nil
	})
	for q, want := range map[string]pb.ReadConsistency{
		"":                          pb.ReadConsistency_READ_CONSISTENCY_DEFAULT,
		"?consistency=stale":        pb.ReadConsistency_READ_CONSISTENCY_STALE,
		"?consistency=linearizable": pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE,
	} {
		if r := e.get("/namespaces" + q); r.status != 200 {
			t.Fatalf("GET /namespaces%s = %d %s", q, r.status, r.body)
		}
		ns := requests[*pb.ListNamespacesRequest](e.fake, "ListNamespaces")
		if got := ns[len(ns)-1].GetConsistency(); got != want {
			t.Errorf("%q: ListNamespaces level %v, want %v", q, got, want)
		}
		if r := e.get("/namespaces/ns/extraction_graphs/g1/extraction_policies/embed/tasks" + q); r.status != 200 {
			t.Fatalf("GET tasks%s = %d %s", q, r.status, r.body)
		}
		graphs := requests[*pb.ListExtractionGraphsRequest](e.fake, "ListExtractionGraphs")
		if got := graphs[len(graphs)-1].GetConsistency(); got != want {
			t.Errorf("%q: the policy lookup's level %v, want %v", q, got, want)
		}
		tasks := requests[*pb.ListTasksRequest](e.fake, "ListTasks")
		if got := tasks[len(tasks)-1].GetConsistency(); got != want {
			t.Errorf("%q: ListTasks level %v, want %v", q, got, want)
		}
	}
	expectError(t, e.get("/namespaces?consistency=eventual"), 400, codeInvalidArgument)
}

// A NotFound at the default level is confirmed once at the linearizable
// level (a lagging replica); an explicitly stale read is not upgraded.
func TestDefaultLevelConfirmsNotFoundLinearizably(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
		if r.GetConsistency() == pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE {
			return &pb.GetContentResponse{Contents: []*pb.Content{sampleContent()}}, nil // the leader has it
		}
		return nil, status.Error(codes.NotFound, "content not found")
	})
	if r := e.get("/namespaces/ns/content/c1/metadata"); r.status != 200 {
		t.Fatalf("default read = %d %s, want the linearizable answer", r.status, r.body)
	}
	got := requests[*pb.GetContentRequest](e.fake, "GetContent")
	if len(got) != 2 || got[0].GetConsistency() != pb.ReadConsistency_READ_CONSISTENCY_DEFAULT ||
		got[1].GetConsistency() != pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE {
		t.Fatalf("levels tried = %v", got)
	}
	expectError(t, e.get("/namespaces/ns/content/c1/metadata?consistency=stale"), 404, codeNotFound)
	if n := len(requests[*pb.GetContentRequest](e.fake, "GetContent")); n != 3 {
		t.Fatalf("a stale read made %d calls, want 1", n-2)
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
