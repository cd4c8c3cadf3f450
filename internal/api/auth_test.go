package api

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/indexify-go/indexify/internal/tlsutil/tlstest"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

const (
	tokA    = "token-for-namespace-a"
	tokAll  = "token-for-all-namespaces"
	tokExec = "token-of-the-executors"
)

const tokensYAML = `
- token: ` + tokA + `
  namespaces: [a]
- token: ` + tokAll + `
  namespaces: ["*"]
  role: user
- token: ` + tokExec + `
  namespaces: ["*"]
  role: executor
`

func writeTokens(t *testing.T, path, yaml string) {
	t.Helper()
	tlstest.WriteFile(t, path, []byte(yaml))
}

func newAuthEnv(t *testing.T) (*env, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	writeTokens(t, path, tokensYAML)
	toks, err := LoadTokensFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Tokens = toks })
	on(e.fake, "ListNamespaces", func(*pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
		return &pb.ListNamespacesResponse{Namespaces: []*pb.Namespace{{Name: "a"}, {Name: "b"}}}, nil
	})
	on(e.fake, "ListExtractionGraphs", func(*pb.ListExtractionGraphsRequest) (*pb.ListExtractionGraphsResponse, error) {
		return &pb.ListExtractionGraphsResponse{}, nil
	})
	return e, path
}

// doAs sends a request with an Authorization header (none when token is "").
func (e *env) doAs(token, method, path string, body io.Reader, contentType string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestTokensScopeNamespacesAndRoles(t *testing.T) {
	e, _ := newAuthEnv(t)
	graphsOf := func(ns string) string { return "/namespaces/" + ns + "/extraction_graphs" }

	if r := e.doAs("", "GET", "/", nil, ""); r.status != 200 {
		t.Fatalf("GET / without token = %d (the banner stays open for probes)", r.status)
	}
	r := e.doAs("", "GET", graphsOf("a"), nil, "")
	expectError(t, r, 401, codeUnauthenticated)
	if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("401 without WWW-Authenticate: %v", r.header)
	}
	expectError(t, e.doAs("not-a-known-token-at-all", "GET", graphsOf("a"), nil, ""), 401, codeUnauthenticated)
	req, _ := http.NewRequest("GET", e.http.URL+graphsOf("a"), nil)
	req.Header.Set("Authorization", "Basic "+tokA)
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("Basic scheme: %d, want 401", resp.StatusCode)
	}

	if r := e.doAs(tokA, "GET", graphsOf("a"), nil, ""); r.status != 200 {
		t.Fatalf("token A on namespace a: %d %s", r.status, r.body)
	}
	calls := e.fake.count("ListExtractionGraphs")
	expectError(t, e.doAs(tokA, "GET", graphsOf("b"), nil, ""), 403, codePermissionDenied)
	// Escaped separators decode to a namespace that is not "a" either.
	expectError(t, e.doAs(tokA, "GET", "/namespaces/a%2Fb/extraction_graphs", nil, ""), 403, codePermissionDenied)
	expectError(t, e.doAs(tokA, "DELETE", "/namespaces/b/extraction_graphs/g", nil, ""), 403, codePermissionDenied)
	if e.fake.count("ListExtractionGraphs") != calls {
		t.Fatal("a refused request reached the coordinator")
	}
	if r := e.doAs(tokAll, "GET", graphsOf("b"), nil, ""); r.status != 200 {
		t.Fatalf("token * on namespace b: %d %s", r.status, r.body)
	}

	// Namespace listing and creation need a token for all namespaces.
	expectError(t, e.doAs(tokA, "GET", "/namespaces", nil, ""), 403, codePermissionDenied)
	expectError(t, e.doAs(tokA, "POST", "/namespaces", strings.NewReader(`{"name":"c"}`), "application/json"), 403, codePermissionDenied)
	if r := e.doAs(tokAll, "GET", "/namespaces", nil, ""); r.status != 200 {
		t.Fatalf("token * lists namespaces: %d %s", r.status, r.body)
	}

	// Operator routes need a token for every namespace; static docs none.
	for _, p := range []string{"/metrics", "/executors", "/cluster"} {
		expectError(t, e.doAs(tokA, "GET", p, nil, ""), 403, codePermissionDenied)
		expectError(t, e.doAs("", "GET", p, nil, ""), 401, codeUnauthenticated)
	}
	if r := e.doAs(tokAll, "GET", "/metrics", nil, ""); r.status != 200 {
		t.Fatalf("token * on /metrics: %d", r.status)
	}
	if r := e.doAs("", "GET", "/api-docs/openapi.json", nil, ""); r.status != 200 {
		t.Fatalf("OpenAPI document without token: %d", r.status)
	}

	// Task results are for executors only.
	result := "/internal/executors/e1/tasks/t1/result"
	expectError(t, e.doAs(tokAll, "POST", result, strings.NewReader("x"), "text/plain"), 403, codePermissionDenied)
	expectError(t, e.doAs(tokA, "POST", result, strings.NewReader("x"), "text/plain"), 403, codePermissionDenied)
	expectError(t, e.doAs("", "POST", result, strings.NewReader("x"), "text/plain"), 401, codeUnauthenticated)
	if n := e.fake.count("GetTask") + e.fake.count("CompleteTask"); n != 0 {
		t.Fatalf("a result without executor credentials reached the coordinator (%d calls)", n)
	}
	if r := e.doAs(tokExec, "POST", result, strings.NewReader("x"), "text/plain"); r.status == 401 || r.status == 403 {
		t.Fatalf("executor token refused on its route: %d %s", r.status, r.body)
	}
}

func TestTokensFileIsReloaded(t *testing.T) {
	e, path := newAuthEnv(t)
	url := "/namespaces/a/extraction_graphs"
	if r := e.doAs(tokA, "GET", url, nil, ""); r.status != 200 {
		t.Fatalf("before: %d", r.status)
	}
	// Revoke A, add a new token.
	writeTokens(t, path, "- token: a-brand-new-token-123\n  namespaces: [a]\n")
	expectError(t, e.doAs(tokA, "GET", url, nil, ""), 401, codeUnauthenticated)
	if r := e.doAs("a-brand-new-token-123", "GET", url, nil, ""); r.status != 200 {
		t.Fatalf("new token: %d %s", r.status, r.body)
	}
	// A broken edit keeps the tokens in force.
	writeTokens(t, path, "- token: short\n")
	if r := e.doAs("a-brand-new-token-123", "GET", url, nil, ""); r.status != 200 {
		t.Fatalf("after a broken edit: %d %s", r.status, r.body)
	}
}

func TestParseTokensRefusesBadFiles(t *testing.T) {
	for name, y := range map[string]string{
		"not a list":      "token: abcdefghijklmnopq\n",
		"short token":     "- {token: short, namespaces: [a]}\n",
		"no namespaces":   "- {token: abcdefghijklmnopq}\n",
		"unknown role":    "- {token: abcdefghijklmnopq, namespaces: [a], role: admin}\n",
		"duplicate token": "- {token: abcdefghijklmnopq, namespaces: [a]}\n- {token: abcdefghijklmnopq, namespaces: [b]}\n",
		"whitespace":      "- {token: \"abcdefgh ijklmnopq\", namespaces: [a]}\n",
	} {
		if _, err := ParseTokens([]byte(y)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := LoadTokensFile(filepath.Join(t.TempDir(), "missing"), nil); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing file: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
