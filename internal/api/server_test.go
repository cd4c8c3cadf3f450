package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func TestRoot(t *testing.T) {
	e := newEnv(t)
	r := e.get("/")
	if r.status != 200 || string(r.body) != "Indexify Server" {
		t.Fatalf("GET / = %d %q", r.status, r.body)
	}
}

func TestUnknownRoutesAnswerJSON(t *testing.T) {
	e := newEnv(t)
	expectError(t, e.get("/nope"), 404, codeRouteNotFound)
	expectError(t, e.get("/namespaces/default/unknown/thing"), 404, codeRouteNotFound)
	expectError(t, e.doJSON(http.MethodPatch, "/namespaces", "{}"), 405, codeMethodNotAllowed)
	expectError(t, e.do(http.MethodPost, "/", nil, ""), 405, codeMethodNotAllowed)
}

func TestNamespaces(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "ListNamespaces", func(*pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
		return &pb.ListNamespacesResponse{Namespaces: []*pb.Namespace{{Name: "default", CreatedAt: 1_700_000_000_123}, {Name: "b"}}}, nil
	})
	on(e.fake, "CreateNamespace", func(r *pb.CreateNamespaceRequest) (*pb.CreateNamespaceResponse, error) {
		if r.GetName() == "taken" {
			return nil, status.Error(codes.AlreadyExists, `namespace "taken" already exists`)
		}
		return &pb.CreateNamespaceResponse{}, nil
	})
	on(e.fake, "CreateExtractionGraph", func(r *pb.CreateExtractionGraphRequest) (*pb.CreateExtractionGraphResponse, error) {
		return &pb.CreateExtractionGraphResponse{Graph: r.GetGraph()}, nil
	})

	r := e.get("/namespaces")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"namespaces":[{"name":"default","created_at":1700000000},{"name":"b"}]}` {
		t.Fatalf("GET /namespaces = %d %s", r.status, r.body)
	}
	if r := e.get("/namespaces/b"); r.status != 200 || r.json(t)["namespace"].(map[string]any)["name"] != "b" {
		t.Fatalf("GET /namespaces/b = %d %s", r.status, r.body)
	}
	expectError(t, e.get("/namespaces/zzz"), 404, codeNotFound)

	r = e.doJSON(http.MethodPost, "/namespaces", map[string]any{
		"name":   "ns1",
		"labels": map[string]any{},
		"extraction_graphs": []any{map[string]any{
			"name":                "g1",
			"extraction_policies": []any{map[string]any{"extractor": "tensorlake/minilm-l6", "name": "embed"}},
		}},
	})
	if r.status != 200 {
		t.Fatalf("POST /namespaces = %d %s", r.status, r.body)
	}
	cr := requests[*pb.CreateNamespaceRequest](e.fake, "CreateNamespace")
	if len(cr) != 1 || cr[0].GetName() != "ns1" || cr[0].GetRequestId() == "" {
		t.Fatalf("CreateNamespace requests = %v", cr)
	}
	gr := requests[*pb.CreateExtractionGraphRequest](e.fake, "CreateExtractionGraph")
	if len(gr) != 1 || gr[0].GetGraph().GetNamespace() != "ns1" || gr[0].GetGraph().GetPolicies()[0].GetExtractor() != "tensorlake/minilm-l6" {
		t.Fatalf("CreateExtractionGraph requests = %v", gr)
	}

	expectError(t, e.doJSON(http.MethodPost, "/namespaces", map[string]any{"name": "taken"}), 409, codeAlreadyExists)
	for _, bad := range []string{"", "a/b", "..", "x\ny"} {
		expectError(t, e.doJSON(http.MethodPost, "/namespaces", map[string]any{"name": bad}), 400, codeInvalidID)
	}
	expectError(t, e.doJSON(http.MethodPost, "/namespaces", `{"name":`), 400, codeInvalidJSON)
	expectError(t, e.doJSON(http.MethodPost, "/namespaces", `{"name":"x"} trailing`), 400, codeInvalidJSON)
	// A bad inline graph is rejected before the namespace is created.
	before := e.fake.count("CreateNamespace")
	r = e.doJSON(http.MethodPost, "/namespaces", map[string]any{"name": "ns2", "extraction_graphs": []any{map[string]any{"name": "g/1"}}})
	expectError(t, r, 400, codeInvalidID)
	if e.fake.count("CreateNamespace") != before {
		t.Error("namespace created despite a bad inline graph")
	}
}

func TestExtractors(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "ListExtractors", func(*pb.ListExtractorsRequest) (*pb.ListExtractorsResponse, error) {
		return &pb.ListExtractorsResponse{Extractors: []*pb.ExtractorDescription{{
			Name:                  "tensorlake/minilm-l6",
			Description:           "embeddings",
			InputParamsSchemaJson: `{"type":"object"}`,
			InputMimeTypes:        []string{"text/plain"},
			Outputs: map[string]*pb.ExtractorOutput{
				"embedding": {Embedding: &pb.EmbeddingSchema{Dim: 384, Distance: "cosine"}},
				"meta":      {MetadataSchemaJson: `{"type":"object"}`},
			},
		}, {Name: "bare"}}}, nil
	})
	r := e.get("/extractors")
	want := `{"extractors":[{"name":"tensorlake/minilm-l6","description":"embeddings","input_mime_types":["text/plain"],` +
		`"input_params":{"type":"object"},"outputs":{"embedding":{"embedding":{"dim":384,"distance":"cosine"}},"meta":{"metadata":{"type":"object"}}},` +
		`"embedding_schemas":{"embedding":{"dim":384,"distance":"cosine"}},"metadata_schemas":{"meta":{"type":"object"}}},` +
		`{"name":"bare","description":"","input_mime_types":[],"input_params":{},"outputs":{},"embedding_schemas":{},"metadata_schemas":{}}]}`
	if r.status != 200 || strings.TrimSpace(string(r.body)) != want {
		t.Fatalf("GET /extractors = %d\n%s\nwant\n%s", r.status, r.body, want)
	}
}

func TestCoordinatorErrorMapping(t *testing.T) {
	cases := []struct {
		code   codes.Code
		status int
		ecode  string
	}{
		{codes.InvalidArgument, 400, codeInvalidArgument},
		{codes.NotFound, 404, codeNotFound},
		{codes.AlreadyExists, 409, codeAlreadyExists},
		{codes.FailedPrecondition, 409, codeConflict},
		{codes.Aborted, 409, codeConflict},
		{codes.Unavailable, 503, codeUnavailable},
		{codes.DeadlineExceeded, 504, codeDeadline},
		{codes.Internal, 500, codeInternal},
		{codes.Unimplemented, 500, codeInternal},
	}
	// A short timeout bounds the Unavailable retries.
	e := newEnv(t, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })
	for _, c := range cases {
		on(e.fake, "ListNamespaces", func(*pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
			return nil, status.Error(c.code, "boom "+c.code.String())
		})
		r := e.get("/namespaces")
		expectError(t, r, c.status, c.ecode)
		if !strings.Contains(string(r.body), "boom "+c.code.String()) {
			t.Errorf("%v: message lost: %s", c.code, r.body)
		}
	}
}

func TestUnavailableIsRetriedWithSameRequestID(t *testing.T) {
	e := newEnv(t)
	var n atomic.Int32
	on(e.fake, "CreateNamespace", func(*pb.CreateNamespaceRequest) (*pb.CreateNamespaceResponse, error) {
		if n.Add(1) < 3 {
			return nil, status.Error(codes.Unavailable, "no leader")
		}
		return &pb.CreateNamespaceResponse{}, nil
	})
	if r := e.doJSON(http.MethodPost, "/namespaces", map[string]any{"name": "ns"}); r.status != 200 {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	reqs := requests[*pb.CreateNamespaceRequest](e.fake, "CreateNamespace")
	if len(reqs) != 3 {
		t.Fatalf("%d attempts, want 3", len(reqs))
	}
	for _, r := range reqs {
		if r.GetRequestId() != reqs[0].GetRequestId() || r.GetRequestId() == "" {
			t.Fatalf("request ids differ across retries: %v", reqs)
		}
	}
	// A second, separate request gets a new id.
	e.doJSON(http.MethodPost, "/namespaces", map[string]any{"name": "ns"})
	reqs = requests[*pb.CreateNamespaceRequest](e.fake, "CreateNamespace")
	if reqs[3].GetRequestId() == reqs[0].GetRequestId() {
		t.Fatal("two HTTP requests shared a request id")
	}
}

func TestEnsureDefaultNamespace(t *testing.T) {
	e := newEnv(t)
	var n atomic.Int32
	on(e.fake, "CreateNamespace", func(r *pb.CreateNamespaceRequest) (*pb.CreateNamespaceResponse, error) {
		switch n.Add(1) {
		case 1:
			return nil, status.Error(codes.Internal, "not ready")
		case 2:
			return nil, status.Error(codes.Unavailable, "electing")
		}
		return nil, status.Error(codes.AlreadyExists, "exists")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.srv.EnsureDefaultNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	reqs := requests[*pb.CreateNamespaceRequest](e.fake, "CreateNamespace")
	if len(reqs) != 3 || reqs[2].GetName() != "default" {
		t.Fatalf("requests = %v", reqs)
	}

	// Gives up with an error when ctx ends.
	on(e.fake, "CreateNamespace", func(r *pb.CreateNamespaceRequest) (*pb.CreateNamespaceResponse, error) {
		return nil, status.Error(codes.Internal, "broken")
	})
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := e.srv.EnsureDefaultNamespace(ctx2); err == nil {
		t.Fatal("EnsureDefaultNamespace succeeded with a broken coordinator")
	}
}

// Serve runs the GC worker and shuts down gracefully, ending open event
// streams instead of waiting for them.
func TestServeGCAndGracefulShutdown(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.GCInterval = 10 * time.Millisecond })
	on(e.fake, "ListGCTasks", func(*pb.ListGCTasksRequest) (*pb.ListGCTasksResponse, error) {
		return &pb.ListGCTasksResponse{Tasks: []*pb.GCTask{{Id: "gc1"}}}, nil
	})
	on(e.fake, "AckGCTasks", func(*pb.AckGCTasksRequest) (*pb.AckGCTasksResponse, error) {
		return &pb.AckGCTasksResponse{}, nil
	})
	on(e.fake, "ListExtractionGraphs", func(*pb.ListExtractionGraphsRequest) (*pb.ListExtractionGraphsResponse, error) {
		return &pb.ListExtractionGraphsResponse{Graphs: []*pb.ExtractionGraph{{Name: "g", Policies: []*pb.ExtractionPolicy{{Name: "p"}}}}}, nil
	})
	e.fake.watch = func(_ *pb.WatchContentRequest, ss grpc.ServerStream) error {
		<-ss.Context().Done()
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	eventually(t, "GC ack", func() bool { return e.fake.count("AckGCTasks") > 0 })
	acks := requests[*pb.AckGCTasksRequest](e.fake, "AckGCTasks")
	if len(acks[0].GetIds()) != 1 || acks[0].GetIds()[0] != "gc1" || acks[0].GetRequestId() == "" {
		t.Fatalf("ack = %v", acks[0])
	}

	resp, err := http.Get(base + "/namespaces/default/extraction_graphs/g/extraction_policies/p/content/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream status %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	// The stream was ended by the shutdown.
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Logf("stream read ended with %v", err)
	}
}
