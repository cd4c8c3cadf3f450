package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/index"
	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/structured"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// withStores gives the server real embedded stores in temp dirs.
func withStores(t *testing.T) (func(*Config), index.Store, structured.Store) {
	t.Helper()
	vec, err := index.OpenEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sql, err := structured.OpenSQLite(t.TempDir(), structured.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vec.Close(); sql.Close() })
	return func(c *Config) { c.Index, c.Structured = vec, sql }, vec, sql
}

func withGraph(e *env) {
	on(e.fake, "ListExtractionGraphs", func(r *pb.ListExtractionGraphsRequest) (*pb.ListExtractionGraphsResponse, error) {
		return &pb.ListExtractionGraphsResponse{Graphs: []*pb.ExtractionGraph{{Name: "g1", Namespace: "ns",
			Policies: []*pb.ExtractionPolicy{{Name: "chunks", Extractor: "chunker"}}}}}, nil
	})
	on(e.fake, "ListExtractors", func(r *pb.ListExtractorsRequest) (*pb.ListExtractorsResponse, error) {
		return &pb.ListExtractorsResponse{Extractors: []*pb.ExtractorDescription{{Name: "chunker",
			Outputs: map[string]*pb.ExtractorOutput{"embedding": {Embedding: &pb.EmbeddingSchema{Dim: 2, Distance: index.Cosine}}}}}}, nil
	})
}

func embeddingResult(vec string) wire.TaskResult {
	return wire.TaskResult{
		Outcome:  wire.OutcomeSuccess,
		Features: []wire.ResultFeature{{Name: "summary", Value: json.RawMessage(`{"words":3}`)}},
		Content: []wire.ResultContent{{Index: 0, MimeType: "text/plain",
			Labels:   map[string]json.RawMessage{"chunk": json.RawMessage(`0`)},
			Features: []wire.ResultFeature{{Name: "embedding", Embedding: true, Value: json.RawMessage(vec)}}}},
	}
}

// A successful result writes its vectors and metadata rows into the stores
// before the completion; the coordinator gets references, not vectors.
func TestResultFeaturesGoToTheStores(t *testing.T) {
	opt, vec, sql := withStores(t)
	e := newEnv(t, opt)
	withTask(e, sampleTask())
	withGraph(e)
	r := e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), contentPart(0, "first chunk"), resultPart(t, embeddingResult(`[1,0]`)))
	if r.status != 200 {
		t.Fatalf("result = %d %s", r.status, r.body)
	}
	child := state.ChildContentID("task1", 0)
	hits, err := vec.Search(context.Background(), "ns", "g1.chunks.embedding", []float32{1, 0}, 5, nil)
	if err != nil || len(hits) != 1 || hits[0].ContentID != child || hits[0].Text != "first chunk" ||
		hits[0].RootContentID != "root" || hits[0].Labels["chunk"] != "0" {
		t.Fatalf("index after the result: %+v %v", hits, err)
	}
	rows, err := sql.Rows(context.Background(), "ns", "parent")
	if err != nil || len(rows) != 1 || rows[0].Policy != "chunks" || rows[0].Metadata["words"] != float64(3) {
		t.Fatalf("rows after the result: %+v %v", rows, err)
	}
	ct := requests[*pb.CompleteTaskRequest](e.fake, "CompleteTask")
	if got := ct[0].GetChildren()[0].GetFeatures()[0].GetValueJson(); got != `{"dim":2,"index":"g1.chunks.embedding"}` {
		t.Fatalf("coordinator got the vector, not a reference: %s", got)
	}
	// A wrong dimension is the executor's fault: 400, nothing stored.
	r = e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), contentPart(0, "first chunk"), resultPart(t, embeddingResult(`[1,0,0]`)))
	expectError(t, r, 400, codeInvalidArgument)
}

// A result posted for a task that already finished (a repeat, or a forged
// one the coordinator will refuse) never touches the stores: the real
// vectors stay.
func TestFinishedTaskResultLeavesStoresAlone(t *testing.T) {
	opt, vec, _ := withStores(t)
	e := newEnv(t, opt)
	task := sampleTask()
	task.Outcome = pb.TaskOutcome_TASK_OUTCOME_SUCCESS
	withTask(e, task)
	withGraph(e)
	r := e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), contentPart(0, "forged"), resultPart(t, embeddingResult(`[0,1]`)))
	if r.status != 200 { // the fake coordinator accepts; the real one answers 409
		t.Fatalf("result = %d %s", r.status, r.body)
	}
	if _, err := vec.Search(context.Background(), "ns", "g1.chunks.embedding", []float32{0, 1}, 5, nil); !errors.Is(err, index.ErrNoIndex) {
		t.Fatalf("a finished task's result wrote to the index: %v", err)
	}
}

func TestRetrievalRoutesRefuseBadInput(t *testing.T) {
	opt, _, _ := withStores(t)
	e := newEnv(t, opt)
	withGraph(e)
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/indexes/g1.nope.embedding/search", map[string]any{"query": "x"}), 404, codeNotFound)
	// The chunker has no query embedder in the API server.
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/indexes/g1.chunks.embedding/search", map[string]any{"query": "x"}), 400, codeInvalidArgument)
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/indexes/g1.chunks.embedding/search", map[string]any{"query": "x", "k": 5000}), 400, codeInvalidArgument)
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/sql_query", map[string]any{"query": "delete from g1"}), 400, codeQuery)
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/sql_query", map[string]any{"query": " "}), 400, codeQuery)
	r := e.get("/namespaces/ns/indexes")
	if r.status != 200 || string(r.body) != `{"indexes":[{"name":"g1.chunks.embedding","embedding_schema":{"dim":2,"distance":"cosine"}}]}`+"\n" {
		t.Fatalf("indexes = %d %s", r.status, r.body)
	}
	// Without stores the routes say so.
	bare := newEnv(t)
	expectError(t, bare.doJSON(http.MethodPost, "/namespaces/ns/sql_query", map[string]any{"query": "select 1"}), 503, codeUnavailable)
}

// Nothing half-written is visible: the stores are written before the
// task's completion is committed, so a result whose completion fails
// (here: the task was reassigned meanwhile) leaves a vector and a row in
// the stores. Search and the content's metadata show them only once the
// content record holds the committed features.
func TestUncommittedResultIsNotVisible(t *testing.T) {
	opt, vec, sql := withStores(t)
	e := newEnv(t, opt)
	// A lexical embedding of dim 8: the API server embeds the query itself.
	on(e.fake, "ListExtractionGraphs", func(r *pb.ListExtractionGraphsRequest) (*pb.ListExtractionGraphsResponse, error) {
		return &pb.ListExtractionGraphsResponse{Graphs: []*pb.ExtractionGraph{{Name: "g1", Namespace: "ns",
			Policies: []*pb.ExtractionPolicy{{Name: "both", Extractor: embed.LexicalExtractor, InputParamsJson: `{"dim":8}`}}}}}, nil
	})
	on(e.fake, "ListExtractors", func(r *pb.ListExtractorsRequest) (*pb.ListExtractorsResponse, error) {
		return &pb.ListExtractorsResponse{Extractors: []*pb.ExtractorDescription{{Name: embed.LexicalExtractor,
			Outputs: map[string]*pb.ExtractorOutput{embed.Output: {Embedding: &pb.EmbeddingSchema{Dim: embed.DefaultDim, Distance: index.Cosine}}}}}}, nil
	})
	task := sampleTask()
	task.Extractor, task.PolicyName, task.InputParamsJson = embed.LexicalExtractor, "both", `{"dim":8}`
	withTask(e, task)
	on(e.fake, "CompleteTask", func(r *pb.CompleteTaskRequest) (*pb.CompleteTaskResponse, error) {
		return nil, status.Error(codes.FailedPrecondition, "task is assigned to another executor")
	})
	var mu sync.Mutex
	parent := &pb.Content{Id: "parent", Namespace: "ns", Version: 1, RootContentId: "root", MimeType: "text/plain"}
	on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		return &pb.GetContentResponse{Contents: []*pb.Content{proto.Clone(parent).(*pb.Content)}}, nil
	})
	setFeatures := func(fs ...*pb.Feature) {
		mu.Lock()
		defer mu.Unlock()
		parent.Features = fs
	}

	v, _ := json.Marshal(embed.NewLexical(8).Vector("volcano"))
	res := wire.TaskResult{Outcome: wire.OutcomeSuccess, Features: []wire.ResultFeature{
		{Name: embed.Output, Embedding: true, Value: v},
		{Name: "counts", Value: json.RawMessage(`{"words":3}`)},
	}}
	expectError(t, e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), resultPart(t, res)), 409, codeConflict)
	// Both values are in the stores...
	if hits, err := vec.Search(context.Background(), "ns", "g1.both.embedding", embed.NewLexical(8).Vector("volcano"), 5, nil); err != nil || len(hits) != 1 {
		t.Fatalf("index after the refused completion: %+v %v", hits, err)
	}
	if rows, err := sql.Rows(context.Background(), "ns", "parent"); err != nil || len(rows) != 1 {
		t.Fatalf("rows after the refused completion: %+v %v", rows, err)
	}
	// ...but not shown: the content record has no committed feature.
	visible := func() (int, int) {
		t.Helper()
		r := e.doJSON(http.MethodPost, "/namespaces/ns/indexes/g1.both.embedding/search", map[string]any{"query": "volcano"})
		var sr wire.SearchResponse
		if r.status != 200 || json.Unmarshal(r.body, &sr) != nil {
			t.Fatalf("search = %d %s", r.status, r.body)
		}
		r = e.get("/namespaces/ns/content/parent/metadata")
		var cm wire.ContentMetadata
		if r.status != 200 || json.Unmarshal(r.body, &cm) != nil {
			t.Fatalf("metadata = %d %s", r.status, r.body)
		}
		return len(sr.Results), len(cm.Metadata)
	}
	if h, m := visible(); h != 0 || m != 0 {
		t.Fatalf("an uncommitted result is visible: %d search hits, %d metadata rows", h, m)
	}
	// The completion committed (the record lists the features as the FSM
	// stores them): both are shown.
	setFeatures(
		&pb.Feature{Name: embed.Output, Policy: "both", Embedding: true, ValueJson: `{"dim":8,"index":"g1.both.embedding"}`},
		&pb.Feature{Name: "counts", Policy: "both", ValueJson: `{"words":3}`},
	)
	if h, m := visible(); h != 1 || m != 1 {
		t.Fatalf("a committed result is not visible: %d search hits, %d metadata rows", h, m)
	}
	// A dropped hit does not cost a result: with k=1 and a better-ranked
	// point of a deleted content, the search reads on and finds parent.
	if err := vec.Upsert(context.Background(), "ns", "g1.both.embedding", []index.Point{{ContentID: "gone", Vector: embed.NewLexical(8).Vector("volcano")}}); err != nil {
		t.Fatal(err)
	}
	r := e.doJSON(http.MethodPost, "/namespaces/ns/indexes/g1.both.embedding/search", map[string]any{"query": "volcano", "k": 1})
	var sr wire.SearchResponse
	if r.status != 200 || json.Unmarshal(r.body, &sr) != nil || len(sr.Results) != 1 || sr.Results[0].ContentID != "parent" {
		t.Fatalf("k=1 search with a dropped better hit = %d %s", r.status, r.body)
	}
	// Another policy's committed features do not reveal this one's.
	setFeatures(&pb.Feature{Name: embed.Output, Policy: "other", Embedding: true}, &pb.Feature{Name: "counts", Policy: "other"})
	if h, m := visible(); h != 0 || m != 0 {
		t.Fatalf("another policy's features revealed this one's: %d search hits, %d metadata rows", h, m)
	}
	// The replica behind a default-level read has not applied the commit
	// the leader has: the hit and the row are confirmed there and shown
	// (read-your-writes across API servers).
	committedAt := proto.Clone(parent).(*pb.Content)
	committedAt.Features = []*pb.Feature{
		{Name: embed.Output, Policy: "both", Embedding: true},
		{Name: "counts", Policy: "both"},
	}
	on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
		c := proto.Clone(parent).(*pb.Content)
		if r.GetConsistency() == pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE {
			c = proto.Clone(committedAt).(*pb.Content)
		}
		return &pb.GetContentResponse{Contents: []*pb.Content{c}}, nil
	})
	if h, m := visible(); h != 1 || m != 1 {
		t.Fatalf("a result committed on the leader only is not visible: %d search hits, %d metadata rows", h, m)
	}
}
