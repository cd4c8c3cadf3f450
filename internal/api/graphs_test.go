package api

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// echoGraphs answers CreateExtractionGraph with the graph, ids filled in as
// the coordinator would.
func echoGraphs(e *env) {
	on(e.fake, "CreateExtractionGraph", func(r *pb.CreateExtractionGraphRequest) (*pb.CreateExtractionGraphResponse, error) {
		g := proto.Clone(r.GetGraph()).(*pb.ExtractionGraph)
		g.Id = "gid"
		for _, p := range g.Policies {
			p.Id = "pid-" + p.Name
		}
		return &pb.CreateExtractionGraphResponse{Graph: g}, nil
	})
}

func TestCreateGraphJSON(t *testing.T) {
	e := newEnv(t)
	echoGraphs(e)
	body := `{
	  "name": "pdfqa", "namespace": "default", "description": "qa over pdfs",
	  "extraction_policies": [
	    {"extractor": "tensorlake/pdf", "name": "docs", "filter": ["lang=en", "size>3"], "labels_eq": "source:web, kind:pdf"},
	    {"extractor": "tensorlake/chunk", "name": "chunks", "content_source": "docs",
	     "input_params": {"chunk_size": 1000, "overlap": 100, "nested": {"a": [1, 2]}}, "id": "ignored"}
	  ]
	}`
	r := e.do(http.MethodPost, "/namespaces/default/extraction_graphs", strings.NewReader(body), "application/json")
	if r.status != 200 {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	reqs := requests[*pb.CreateExtractionGraphRequest](e.fake, "CreateExtractionGraph")
	if len(reqs) != 1 || reqs[0].GetRequestId() == "" {
		t.Fatalf("requests = %v", reqs)
	}
	want := &pb.ExtractionGraph{
		Name: "pdfqa", Namespace: "default", Description: "qa over pdfs",
		Policies: []*pb.ExtractionPolicy{
			{Name: "docs", GraphName: "pdfqa", Namespace: "default", Extractor: "tensorlake/pdf", InputParamsJson: "{}",
				Filter: []string{"lang=en", "size>3", "source=web", "kind=pdf"}},
			{Name: "chunks", GraphName: "pdfqa", Namespace: "default", Extractor: "tensorlake/chunk", ContentSource: "docs",
				InputParamsJson: `{"chunk_size":1000,"overlap":100,"nested":{"a":[1,2]}}`},
		},
	}
	if !proto.Equal(reqs[0].GetGraph(), want) {
		t.Fatalf("graph sent\n%v\nwant\n%v", reqs[0].GetGraph(), want)
	}
	got := r.json(t)
	if got["id"] != "gid" || got["name"] != "pdfqa" {
		t.Fatalf("response %s", r.body)
	}
	pols := got["extraction_policies"].([]any)
	p1 := pols[1].(map[string]any)
	if p1["id"] != "pid-chunks" || p1["graph_name"] != "pdfqa" || p1["content_source"] != "docs" ||
		p1["input_params"].(map[string]any)["chunk_size"] != 1000.0 {
		t.Fatalf("policy JSON %v", p1)
	}
	if f := pols[0].(map[string]any)["filter"].([]any); len(f) != 4 {
		t.Fatalf("filter JSON %v", f)
	}
}

const yamlGraph = `
name: 'yamlgraph'
description: from yaml
extraction_policies:
  - extractor: 'tensorlake/minilm-l6'
    name: 'embed'
    filter:
      lang: en
      pages: 3
      ok: true
    labels_eq:
      source: web
  - extractor: 'tensorlake/chunk'
    name: 'chunk'
    content_source: 'embed'
    input_params:
      chunk_size: 1000
      mode: fast
      list: [a, 1]
`

func TestCreateGraphYAML(t *testing.T) {
	for _, ct := range []string{"application/x-yaml", "text/yaml", "application/yaml; charset=utf-8"} {
		t.Run("content-type="+ct, func(t *testing.T) {
			e := newEnv(t)
			echoGraphs(e)
			r := e.do(http.MethodPost, "/namespaces/ns/extraction_graphs", strings.NewReader(yamlGraph), ct)
			if r.status != 200 {
				t.Fatalf("status %d %s", r.status, r.body)
			}
			g := requests[*pb.CreateExtractionGraphRequest](e.fake, "CreateExtractionGraph")[0].GetGraph()
			if g.GetName() != "yamlgraph" || g.GetNamespace() != "ns" || g.GetDescription() != "from yaml" {
				t.Fatalf("graph %v", g)
			}
			if f := strings.Join(g.GetPolicies()[0].GetFilter(), ","); f != "lang=en,ok=true,pages=3,source=web" {
				t.Errorf("filter = %q", f)
			}
			if p := g.GetPolicies()[1].GetInputParamsJson(); p != `{"chunk_size":1000,"list":["a",1],"mode":"fast"}` {
				t.Errorf("input params = %s", p)
			}
			if g.GetPolicies()[1].GetContentSource() != "embed" {
				t.Errorf("content source lost")
			}
		})
	}
}

func TestCreateGraphRejectsBadSpecs(t *testing.T) {
	e := newEnv(t)
	echoGraphs(e)
	pol := func(extra string) string {
		return `{"name":"g","extraction_policies":[{"extractor":"x","name":"p"` + extra + `}]}`
	}
	cases := []struct {
		name, body, ct, code string
	}{
		{"bad json", `{"name": "g",`, "application/json", codeInvalidJSON},
		{"bad yaml", "name: [unclosed", "application/yaml", codeInvalidYAML},
		{"yaml scalar", "just a string", "application/yaml", codeInvalidYAML},
		{"empty", "", "application/json", codeInvalidJSON},
		{"no name", `{"extraction_policies":[{"extractor":"x","name":"p"}]}`, "application/json", codeInvalidID},
		{"slash name", `{"name":"a/b","extraction_policies":[{"extractor":"x","name":"p"}]}`, "application/json", codeInvalidID},
		{"name charset", `{"name":"g:1","extraction_policies":[{"extractor":"x","name":"p"}]}`, "application/json", codeInvalidID},
		{"policy charset", `{"name":"g","extraction_policies":[{"extractor":"x","name":"p q"}]}`, "application/json", codeInvalidID},
		{"no policies", `{"name":"g"}`, "application/json", codeInvalidArgument},
		{"dup policy", `{"name":"g","extraction_policies":[{"extractor":"x","name":"p"},{"extractor":"x","name":"p"}]}`, "application/json", codeInvalidArgument},
		{"policy name dots", `{"name":"g","extraction_policies":[{"extractor":"x","name":".."}]}`, "application/json", codeInvalidID},
		{"no extractor", `{"name":"g","extraction_policies":[{"name":"p"}]}`, "application/json", codeInvalidArgument},
		{"namespace mismatch", `{"name":"g","namespace":"other","extraction_policies":[{"extractor":"x","name":"p"}]}`, "application/json", codeInvalidArgument},
		{"filter no operator", pol(`,"filter":["novalue"]`), "application/json", codeInvalidFilter},
		{"filter empty key", pol(`,"filter":["=3"]`), "application/json", codeInvalidFilter},
		{"filter bad type", pol(`,"filter":42`), "application/json", codeInvalidFilter},
		{"filter map nested", pol(`,"filter":{"a":{"b":1}}`), "application/json", codeInvalidFilter},
		{"labels_eq no colon", pol(`,"labels_eq":"novalue"`), "application/json", codeInvalidFilter},
		{"labels_eq empty key", pol(`,"labels_eq":":v"`), "application/json", codeInvalidFilter},
		{"params not object", pol(`,"input_params":[1,2]`), "application/json", codeInvalidArgument},
		{"params string", pol(`,"input_params":"x"`), "application/json", codeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(http.MethodPost, "/namespaces/ns/extraction_graphs", strings.NewReader(c.body), c.ct)
			expectError(t, r, 400, c.code)
		})
	}
	if n := e.fake.count("CreateExtractionGraph"); n != 0 {
		t.Fatalf("%d bad specs reached the coordinator", n)
	}
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/a%2Fb/extraction_graphs", pol("")), 400, codeInvalidID)
	big := strings.Repeat(" ", maxJSONBody+1)
	expectError(t, e.do(http.MethodPost, "/namespaces/ns/extraction_graphs", strings.NewReader(big), "application/json"), 413, codeTooLarge)
}

func TestCreateGraphCoordinatorRejects(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "CreateExtractionGraph", func(r *pb.CreateExtractionGraphRequest) (*pb.CreateExtractionGraphResponse, error) {
		return nil, status.Errorf(codes.InvalidArgument, "extractor %q is not registered", r.GetGraph().GetPolicies()[0].GetExtractor())
	})
	r := e.doJSON(http.MethodPost, "/namespaces/ns/extraction_graphs", `{"name":"g","extraction_policies":[{"extractor":"nope","name":"p"}]}`)
	expectError(t, r, 400, codeInvalidArgument)
	if !strings.Contains(string(r.body), `extractor \"nope\" is not registered`) {
		t.Errorf("message %s", r.body)
	}
}

func sampleGraphs() []*pb.ExtractionGraph {
	return []*pb.ExtractionGraph{
		{Id: "1", Name: "g1", Namespace: "ns", Policies: []*pb.ExtractionPolicy{
			{Id: "p1", Name: "embed", Extractor: "x", Filter: []string{"a=b"}, InputParamsJson: `{"k":1}`},
		}},
		{Id: "2", Name: "g2", Namespace: "ns"},
	}
}

func TestListGetDeleteGraphs(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "ListExtractionGraphs", func(r *pb.ListExtractionGraphsRequest) (*pb.ListExtractionGraphsResponse, error) {
		if r.GetNamespace() != "ns" {
			return nil, status.Errorf(codes.NotFound, "namespace %q not found", r.GetNamespace())
		}
		return &pb.ListExtractionGraphsResponse{Graphs: sampleGraphs()}, nil
	})
	on(e.fake, "DeleteExtractionGraph", func(r *pb.DeleteExtractionGraphRequest) (*pb.DeleteExtractionGraphResponse, error) {
		return &pb.DeleteExtractionGraphResponse{}, nil
	})
	r := e.get("/namespaces/ns/extraction_graphs")
	want := `{"extraction_graphs":[{"id":"1","name":"g1","namespace":"ns","description":"","extraction_policies":[` +
		`{"id":"p1","extractor":"x","name":"embed","filter":["a=b"],"input_params":{"k":1},"content_source":"","graph_name":"g1"}]},` +
		`{"id":"2","name":"g2","namespace":"ns","description":"","extraction_policies":[]}]}`
	if r.status != 200 || strings.TrimSpace(string(r.body)) != want {
		t.Fatalf("list = %d\n%s\nwant\n%s", r.status, r.body, want)
	}
	expectError(t, e.get("/namespaces/other/extraction_graphs"), 404, codeNotFound)

	if r := e.get("/namespaces/ns/extraction_graphs/g2"); r.status != 200 || r.json(t)["name"] != "g2" {
		t.Fatalf("get = %d %s", r.status, r.body)
	}
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g3"), 404, codeNotFound)

	if r := e.do(http.MethodDelete, "/namespaces/ns/extraction_graphs/g1", nil, ""); r.status != 200 {
		t.Fatalf("delete = %d %s", r.status, r.body)
	}
	d := requests[*pb.DeleteExtractionGraphRequest](e.fake, "DeleteExtractionGraph")
	if len(d) != 1 || d[0].GetNamespace() != "ns" || d[0].GetName() != "g1" || d[0].GetRequestId() == "" {
		t.Fatalf("delete requests %v", d)
	}
	expectError(t, e.do(http.MethodDelete, "/namespaces/ns/extraction_graphs/x..y", nil, ""), 400, codeInvalidID)
	expectError(t, e.do(http.MethodDelete, "/namespaces/ns/extraction_graphs/a%2Fb", nil, ""), 400, codeInvalidID)
}

func TestLinks(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "ListGraphLinks", func(r *pb.ListGraphLinksRequest) (*pb.ListGraphLinksResponse, error) {
		return &pb.ListGraphLinksResponse{Links: []*pb.GraphLink{{Namespace: "ns", GraphName: "g1", ContentSource: "embed", LinkedGraphName: "g2"}}}, nil
	})
	on(e.fake, "CreateGraphLink", func(r *pb.CreateGraphLinkRequest) (*pb.CreateGraphLinkResponse, error) {
		if r.GetLink().GetLinkedGraphName() == "g1" {
			return nil, status.Error(codes.InvalidArgument, "link would create a cycle")
		}
		return &pb.CreateGraphLinkResponse{}, nil
	})
	r := e.get("/namespaces/ns/extraction_graphs/g1/links")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"links":[{"graph_name":"g1","content_source":"embed","linked_graph_name":"g2"}]}` {
		t.Fatalf("links = %d %s", r.status, r.body)
	}
	r = e.doJSON(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/links", map[string]any{"content_source": "embed", "linked_graph_name": "g3"})
	if r.status != 200 {
		t.Fatalf("create link = %d %s", r.status, r.body)
	}
	c := requests[*pb.CreateGraphLinkRequest](e.fake, "CreateGraphLink")[0]
	want := &pb.GraphLink{Namespace: "ns", GraphName: "g1", ContentSource: "embed", LinkedGraphName: "g3"}
	if !proto.Equal(c.GetLink(), want) || c.GetRequestId() == "" {
		t.Fatalf("link request %v", c)
	}
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/links", map[string]any{"linked_graph_name": "g1"}), 400, codeInvalidArgument)
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/links", map[string]any{"content_source": "x"}), 400, codeInvalidID)
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/links", map[string]any{"linked_graph_name": "a/b"}), 400, codeInvalidID)
}

func TestAnalytics(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "GetAnalytics", func(r *pb.GetAnalyticsRequest) (*pb.GetAnalyticsResponse, error) {
		if r.GetGraphName() != "g1" {
			return nil, status.Error(codes.NotFound, "graph not found")
		}
		return &pb.GetAnalyticsResponse{Policies: []*pb.PolicyAnalytics{{Policy: "embed", Pending: 2, Success: 5, Failure: 1}}}, nil
	})
	r := e.get("/namespaces/ns/extraction_graphs/g1/analytics")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"task_analytics":{"embed":{"pending":2,"success":5,"failure":1}}}` {
		t.Fatalf("analytics = %d %s", r.status, r.body)
	}
	expectError(t, e.get("/namespaces/ns/extraction_graphs/nope/analytics"), 404, codeNotFound)
}
