package api

// Hostile input, round two (issue 18 items 1, 6, 7): refused at the API
// before anything reaches the coordinator.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// A policy named "ingestion" read its own output (source "ingestion") and
// ran on it forever.
func TestReservedPolicyNameRefused(t *testing.T) {
	e := newEnv(t)
	echoGraphs(e)
	for _, name := range []string{"ingestion", "Ingestion", "INGESTION"} {
		body := fmt.Sprintf(`{"name":"loopg","extraction_policies":[{"extractor":"tensorlake/chunk-extractor","name":%q,"input_params":{"chunk_size":10}}]}`, name)
		r := e.do(http.MethodPost, "/namespaces/default/extraction_graphs", strings.NewReader(body), "application/json")
		expectError(t, r, 400, codeInvalidArgument)
		if !strings.Contains(string(r.body), "reserved") {
			t.Errorf("%s: message %s", name, r.body)
		}
	}
	if n := e.fake.count("CreateExtractionGraph"); n != 0 {
		t.Fatalf("%d refused graphs reached the coordinator", n)
	}
}

// 1e400 was stored verbatim and then compared as text by filters.
func TestNonFiniteLabelNumbersRefused(t *testing.T) {
	e := newEnv(t)
	acceptContent(e, true)
	on(e.fake, "UpdateLabels", func(r *pb.UpdateLabelsRequest) (*pb.UpdateLabelsResponse, error) {
		return &pb.UpdateLabelsResponse{}, nil
	})
	on(e.fake, "CreateNamespace", func(r *pb.CreateNamespaceRequest) (*pb.CreateNamespaceResponse, error) {
		return &pb.CreateNamespaceResponse{}, nil
	})
	for _, v := range []string{`1e400`, `-1e400`, `[1, 1e999]`, `{"a": {"b": 2e308}}`} {
		body := `{"labels": {"a": ` + v + `}}`
		expectError(t, e.doJSON(http.MethodPut, "/namespaces/ns/content/c1/labels", body), 400, codeInvalidArgument)
		expectError(t, e.doJSON(http.MethodPost, "/namespaces", `{"name":"n1","labels":{"a":`+v+`}}`), 400, codeInvalidArgument)
		r := e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/extract?id=doc1",
			formPart{name: "labels", data: []byte(`{"a": ` + v + `}`)},
			formPart{name: "file", filename: "a.txt", contentType: "text/plain", data: []byte("hello")})
		expectError(t, r, 400, codeInvalidArgument)
	}
	// The same key rule at both routes.
	expectError(t, e.doJSON(http.MethodPost, "/namespaces", `{"name":"n1","labels":{"a=b":1}}`), 400, codeInvalidArgument)
	expectError(t, e.doJSON(http.MethodPut, "/namespaces/ns/content/c1/labels", `{"labels":{"a=b":1}}`), 400, codeInvalidArgument)
	for _, m := range []string{"UpdateLabels", "CreateNamespace", "CreateContent"} {
		if n := e.fake.count(m); n != 0 {
			t.Errorf("%d refused %s requests reached the coordinator", n, m)
		}
	}
	if blobs := e.blobFiles(); len(blobs) != 0 {
		t.Errorf("refused uploads left blobs %v", blobs)
	}
	// Finite numbers pass everywhere.
	if r := e.doJSON(http.MethodPost, "/namespaces", `{"name":"n1","labels":{"a":1e300}}`); r.status != 200 {
		t.Fatalf("namespace with finite label: %d %s", r.status, r.body)
	}
	if r := e.doJSON(http.MethodPut, "/namespaces/ns/content/c1/labels", `{"labels":{"a":-1.5e300}}`); r.status != 200 {
		t.Fatalf("finite label: %d %s", r.status, r.body)
	}
	// Filters: n>1e999 used to compare as text (and matched 5).
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/content?labels_filter=n%3E1e999"), 400, codeInvalidFilter)
}

// limit=0 and limit=1000000 returned everything in one response.
func TestPageSizeRule(t *testing.T) {
	e := newEnv(t)
	withGraphs(e)
	on(e.fake, "ListContent", func(r *pb.ListContentRequest) (*pb.ListContentResponse, error) {
		return &pb.ListContentResponse{}, nil
	})
	on(e.fake, "ListTasks", func(r *pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
		return &pb.ListTasksResponse{}, nil
	})
	routes := []string{"/namespaces/ns/extraction_graphs/g1/content", "/namespaces/ns/extraction_graphs/g1/extraction_policies/embed/tasks"}
	for _, route := range routes {
		for q, want := range map[string]uint32{"": DefaultPageSize, "?limit=0": DefaultPageSize, "?limit=7": 7, "?limit=1000": MaxPageSize} {
			if r := e.get(route + q); r.status != 200 {
				t.Fatalf("%s%s: %d %s", route, q, r.status, r.body)
			}
			var got uint32
			if strings.HasSuffix(route, "/content") {
				reqs := requests[*pb.ListContentRequest](e.fake, "ListContent")
				got = reqs[len(reqs)-1].GetLimit()
			} else {
				reqs := requests[*pb.ListTasksRequest](e.fake, "ListTasks")
				got = reqs[len(reqs)-1].GetLimit()
			}
			if got != want {
				t.Errorf("%s%s: limit sent %d, want %d", route, q, got, want)
			}
		}
		for _, q := range []string{"?limit=1001", "?limit=1000000", "?limit=4294967295"} {
			expectError(t, e.get(route+q), 400, codeLimit)
		}
	}
}

func TestChildContentIDIsTheCoordinatorsRule(t *testing.T) {
	for i := 0; i < 3; i++ {
		if childContentID("task1", i) != state.ChildContentID("task1", i) {
			t.Fatal("the API's child content id differs from the coordinator's")
		}
	}
}
