package api

// Cross-site writes (issue 18 item 8): a browser sends text/plain, form
// types or no Content-Type without a CORS preflight; JSON routes refuse
// them with 415 before anything reaches the coordinator.

import (
	"net/http"
	"strings"
	"testing"
)

func TestJSONRoutesRequireJSONContentType(t *testing.T) {
	e := newEnv(t)
	echoGraphs(e)
	acceptAll(e)
	routes := []struct{ method, path, body string }{
		{http.MethodPost, "/namespaces", `{"name":"forged"}`},
		{http.MethodPost, "/namespaces/ns/extraction_graphs", `{"name":"g","extraction_policies":[{"extractor":"x","name":"p"}]}`},
		{http.MethodPost, "/namespaces/ns/extraction_graphs/g/links", `{"content_source":"a","linked_graph_name":"b"}`},
		{http.MethodPut, "/namespaces/ns/content/c1/labels", `{"labels":{"a":"b"}}`},
		{http.MethodDelete, "/namespaces/ns/content", `{"content_ids":["c1"]}`},
		{http.MethodPost, "/namespaces/ns/ingest_remote_file", `{"url":"http://example.com/x","extraction_graph_names":["g"]}`},
	}
	for _, rt := range routes {
		for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "not a type"} {
			r := e.do(rt.method, rt.path, strings.NewReader(rt.body), ct)
			expectError(t, r, http.StatusUnsupportedMediaType, codeUnsupportedMediaType)
			if !strings.Contains(string(r.body), "application/json") {
				t.Errorf("%s %s with %q: message does not name the accepted type: %s", rt.method, rt.path, ct, r.body)
			}
		}
	}
	for _, m := range []string{"CreateNamespace", "CreateExtractionGraph", "UpdateLabels", "TombstoneContent", "CreateContent", "CreateGraphLink"} {
		if n := e.fake.count(m); n != 0 {
			t.Errorf("%s reached the coordinator %d times", m, n)
		}
	}
	// YAML is taken where documented (graph creation) and nowhere else.
	if r := e.do(http.MethodPost, "/namespaces/ns/extraction_graphs", strings.NewReader("name: g\nextraction_policies: [{extractor: x, name: p}]\n"), "application/yaml"); r.status != 200 {
		t.Fatalf("YAML graph: %d %s", r.status, r.body)
	}
	expectError(t, e.do(http.MethodPost, "/namespaces", strings.NewReader("name: y\n"), "application/yaml"), 415, codeUnsupportedMediaType)
	// +json types and parameters are JSON.
	r := e.do(http.MethodPut, "/namespaces/ns/content/c1/labels", strings.NewReader(`{"labels":{"a":"b"}}`), "application/merge-patch+json; charset=utf-8")
	if r.status == http.StatusUnsupportedMediaType {
		t.Fatalf("+json refused: %s", r.body)
	}
}
