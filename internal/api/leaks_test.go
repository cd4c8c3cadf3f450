package api

// Small leaks and inconsistencies (issue 18 item 9).

import (
	"net/http"
	"strings"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func TestDownloadsAreNotRenderedAsPages(t *testing.T) {
	e := newEnv(t)
	info, err := e.store.Put(t.Context(), "ns/c1/blob", strings.NewReader("<script>alert(1)</script>"))
	if err != nil {
		t.Fatal(err)
	}
	var mimeType, name string
	on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
		c := sampleContent()
		c.StorageUrl, c.SizeBytes, c.MimeType, c.Name = info.URL, uint64(info.Size), mimeType, name
		return &pb.GetContentResponse{Contents: []*pb.Content{c}}, nil
	})
	for _, c := range []struct{ mime, name, disposition string }{
		{"text/html", "", "attachment"},
		{"image/svg+xml", "", "attachment"},
		{"application/xhtml+xml; charset=utf-8", "", "attachment"},
		{"text/javascript", "", "attachment"},
		{"", "", "attachment"},
		{"text/plain", "", ""},
		{"text/html", "page.html", "attachment; filename=page.html"},
	} {
		mimeType, name = c.mime, c.name
		r := e.get("/namespaces/ns/content/c1/download")
		if r.status != 200 || r.header.Get("X-Content-Type-Options") != "nosniff" ||
			r.header.Get("Content-Disposition") != c.disposition || !strings.Contains(r.header.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("download of %q named %q: %d %v", c.mime, c.name, r.status, r.header)
		}
	}
}

func TestStorageURLHidesServerPath(t *testing.T) {
	e := newEnv(t)
	acceptAll(e)
	r := e.upload("POST", "/namespaces/ns/extraction_graphs/g/extract?id=doc1", formPart{name: "file", filename: "a.txt", data: []byte("x")})
	if r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	stored := requests[*pb.CreateContentRequest](e.fake, "CreateContent")[0].GetContents()[0]
	on(e.fake, "GetContent", func(*pb.GetContentRequest) (*pb.GetContentResponse, error) {
		return &pb.GetContentResponse{Contents: []*pb.Content{stored}}, nil
	})
	m := e.get("/namespaces/ns/content/doc1/metadata")
	if m.status != 200 || strings.Contains(string(m.body), e.store.Dir()) {
		t.Fatalf("metadata shows the blob directory %s: %s", e.store.Dir(), m.body)
	}
	got, _ := m.json(t)["content_metadata"].(map[string]any)
	u, _ := got["storage_url"].(string)
	if !strings.HasPrefix(u, "file:ns/doc1/") || strings.Count(u, "/") != 2 {
		t.Fatalf("storage_url = %q, want file:ns/doc1/<blob>", u)
	}
	for in, want := range map[string]string{
		"s3://bucket/prefix/ns/c/b": "s3://bucket/prefix/ns/c/b",
		"file:///var/lib/x/ns/c/b":  "file:ns/c/b",
		"file:///b":                 "file:b",
	} {
		if got := publicStorageURL(in); got != want {
			t.Errorf("publicStorageURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOneRuleForDuplicatesAndDocuments(t *testing.T) {
	e := newEnv(t)
	echoGraphs(e)
	acceptAll(e)
	for _, c := range []struct{ ct, body, code string }{
		{"application/json", `{"name":"g","name":"h","extraction_policies":[{"extractor":"x","name":"p"}]}`, codeInvalidJSON},
		{"application/json", `{"name":"g","extraction_policies":[{"extractor":"x","name":"p","input_params":{"a":1,"a":2}}]}`, codeInvalidJSON},
		{"application/yaml", "name: g\nname: h\nextraction_policies: [{extractor: x, name: p}]\n", codeInvalidYAML},
		{"application/yaml", "name: g\nextraction_policies: [{extractor: x, name: p}]\n---\nname: other\n", codeInvalidYAML},
	} {
		r := e.do(http.MethodPost, "/namespaces/ns/extraction_graphs", strings.NewReader(c.body), c.ct)
		expectError(t, r, 400, c.code)
		if !strings.Contains(string(r.body), "duplicate") && !strings.Contains(string(r.body), "already defined") && !strings.Contains(string(r.body), "one YAML document") {
			t.Errorf("%s: message does not say what is wrong: %s", c.body, r.body)
		}
	}
	if n := e.fake.count("CreateExtractionGraph"); n != 0 {
		t.Fatalf("%d refused specs reached the coordinator", n)
	}
	// Labels: duplicate keys are refused in updates and multipart fields.
	r := e.do(http.MethodPut, "/namespaces/ns/content/c1/labels", strings.NewReader(`{"labels":{"a":1,"a":2}}`), "application/json")
	expectError(t, r, 400, codeInvalidJSON)
	r = e.upload("POST", "/namespaces/ns/extraction_graphs/g/extract", formPart{name: "file", filename: "a.txt", data: []byte("x")},
		formPart{name: "labels", data: []byte(`{"k":"v","k":"w"}`)})
	expectError(t, r, 400, codeInvalidJSON)
	// The same keys in different objects are fine.
	if r := e.do(http.MethodPost, "/namespaces/ns/extraction_graphs", strings.NewReader(
		`{"name":"g","extraction_policies":[{"extractor":"x","name":"p"},{"extractor":"x","name":"q"}]}`), "application/json"); r.status != 200 {
		t.Fatalf("distinct objects with the same keys: %d %s", r.status, r.body)
	}
}

func TestNameLengthErrorsCountCharacters(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ path, want string }{
		{"/namespaces/" + strings.Repeat("n", 129), "is 129 characters long; the limit is 128 characters"},
		{"/namespaces/" + strings.Repeat("n", 300), "is 300 characters long; the limit is 256 characters"},
		{"/namespaces/ns/content/" + strings.Repeat("é", 129) + "/metadata", "is 129 characters long; the limit is 128 characters"},
		{"/namespaces/ns/content/" + strings.Repeat("é", 100) + "/metadata", "is 100 characters but 200 bytes of UTF-8; the limit is 128 bytes"},
	} {
		r := e.get(c.path)
		expectError(t, r, 400, codeInvalidID)
		if !strings.Contains(string(r.body), c.want) {
			t.Errorf("GET %.60s...: %s, want %q", c.path, r.body, c.want)
		}
	}
}
