package api

import (
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// docPath turns a mux pattern ("GET /a/{x}/{$}") into the OpenAPI key
// ("GET /a/{x}/").
func docPath(pattern string) string { return strings.Replace(pattern, "{$}", "", 1) }

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

func TestOpenAPIMatchesRoutes(t *testing.T) {
	e := newEnv(t)
	r := e.get("/api-docs/openapi.json")
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /api-docs/openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	registered := map[string]string{} // doc key -> mux pattern
	for _, p := range e.srv.patterns {
		registered[docPath(p)] = p
	}
	var missing, extra []string
	for k := range registered {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	for k := range documented {
		if _, ok := registered[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes missing from the OpenAPI document: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("documented routes the server does not have: %v", extra)
	}
	// The document's paths must reach those routes through the real mux,
	// not merely look alike: resolve each with sample parameter values.
	for k := range documented {
		method, path, _ := strings.Cut(k, " ")
		req, err := http.NewRequest(method, "http://x"+pathParam.ReplaceAllString(path, "p1"), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, pattern := e.srv.mux.Handler(req)
		if docPath(pattern) != k {
			t.Errorf("%s resolves to route %q", k, pattern)
		}
	}
}

func TestRequestIDHeader(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "ListNamespaces", func(*pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
		return &pb.ListNamespacesResponse{}, nil
	})
	req, _ := http.NewRequest(http.MethodGet, e.http.URL+"/namespaces", nil)
	req.Header.Set("X-Request-Id", "abc-123")
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-Id"); got != "abc-123" {
		t.Fatalf("echoed id %q", got)
	}
	// Without a header, and on errors (unknown route), an id is made up.
	a, b := e.get("/namespaces"), e.get("/no/such/route")
	if a.header.Get("X-Request-Id") == "" || b.header.Get("X-Request-Id") == "" ||
		a.header.Get("X-Request-Id") == b.header.Get("X-Request-Id") {
		t.Fatalf("generated ids %q and %q", a.header.Get("X-Request-Id"), b.header.Get("X-Request-Id"))
	}
}

func TestHTTPMetrics(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "ListNamespaces", func(*pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
		return &pb.ListNamespacesResponse{}, nil
	})
	on(e.fake, "CreateContent", func(req *pb.CreateContentRequest) (*pb.CreateContentResponse, error) {
		return &pb.CreateContentResponse{Contents: []*pb.ContentRef{{Id: req.Contents[0].Id, Version: 1, Created: true}}}, nil
	})
	on(e.fake, "ListExtractionGraphs", func(*pb.ListExtractionGraphsRequest) (*pb.ListExtractionGraphsResponse, error) {
		return &pb.ListExtractionGraphsResponse{Graphs: []*pb.ExtractionGraph{{Name: "g", Namespace: "ns"}}}, nil
	})
	e.get("/namespaces")
	e.get("/namespaces")
	e.get("/nowhere")
	up := e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract",
		formPart{name: "file", filename: "a.txt", data: []byte("0123456789")})
	r := e.get("/metrics")
	if r.status != 200 {
		t.Fatalf("GET /metrics: %d", r.status)
	}
	text := string(r.body)
	for _, want := range []string{
		`indexify_http_requests_total{code="200",route="GET /namespaces"} 2`,
		`indexify_http_requests_total{code="404",route="unmatched"} 1`,
		`indexify_http_request_duration_seconds_count{route="GET /namespaces"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if up.status == 200 {
		for _, want := range []string{`indexify_api_ingested_bytes_total 10`, `indexify_api_ingested_blobs_total 1`} {
			if !strings.Contains(text, want) {
				t.Errorf("/metrics lacks %q after a 10-byte upload", want)
			}
		}
	} else {
		t.Fatalf("upload: %d %s", up.status, up.body)
	}
	// Two servers in one process keep separate registries.
	if other := newEnv(t).get("/metrics"); strings.Contains(string(other.body), `route="GET /namespaces"`) {
		t.Error("a second server's /metrics shows the first server's requests")
	}
}

func TestConsoleServed(t *testing.T) {
	e := newEnv(t)
	r := e.get("/ui/")
	if r.status != 200 || !strings.Contains(string(r.body), "Indexify console") || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /ui/: %d %s", r.status, r.header.Get("Content-Type"))
	}
	for _, f := range []string{"/ui/app.js", "/ui/style.css"} {
		if r := e.get(f); r.status != 200 || len(r.body) == 0 {
			t.Errorf("GET %s: %d", f, r.status)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, e.http.URL+"/ui", nil)
	resp, err := e.http.Client().Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Without a cluster client /cluster says so in the JSON error shape.
	expectError(t, e.get("/cluster"), http.StatusServiceUnavailable, codeUnavailable)
}
