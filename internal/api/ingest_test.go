package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// acceptContent answers CreateContent with created=created for every item.
func acceptContent(e *env, created bool) {
	on(e.fake, "CreateContent", func(r *pb.CreateContentRequest) (*pb.CreateContentResponse, error) {
		var refs []*pb.ContentRef
		for _, c := range r.GetContents() {
			refs = append(refs, &pb.ContentRef{Id: c.GetId(), Version: 1, Created: created})
		}
		return &pb.CreateContentResponse{Contents: refs}, nil
	})
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// readURL reads a blob by its URL through the store.
func (e *env) readURL(url string) []byte {
	e.t.Helper()
	rc, err := e.store.Open(e.t.Context(), url)
	if err != nil {
		e.t.Fatalf("open %s: %v", url, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func TestUploadFile(t *testing.T) {
	e := newEnv(t)
	acceptContent(e, true)
	data := bytes.Repeat([]byte("%PDF-1.4 hello "), 5000)
	r := e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/extract?id=doc1",
		formPart{name: "labels", data: []byte(`{"lang": "en", "pages": 3, "tags": ["a", "b"]}`)},
		formPart{name: "file", filename: "report.pdf", contentType: "application/pdf", data: data},
		formPart{name: "ignored", data: []byte("x")},
	)
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"content_id":"doc1"}` {
		t.Fatalf("upload = %d %s", r.status, r.body)
	}
	reqs := requests[*pb.CreateContentRequest](e.fake, "CreateContent")
	if len(reqs) != 1 || len(reqs[0].GetContents()) != 1 || reqs[0].GetRequestId() == "" {
		t.Fatalf("CreateContent requests %v", reqs)
	}
	c := reqs[0].GetContents()[0]
	if c.GetId() != "doc1" || c.GetNamespace() != "ns" || c.GetName() != "report.pdf" || c.GetMimeType() != "application/pdf" ||
		c.GetParentId() != "" ||
		strings.Join(c.GetGraphNames(), ",") != "g1" || c.GetSizeBytes() != uint64(len(data)) || c.GetHash() != sha(data) {
		t.Fatalf("content sent: %v", c)
	}
	// Source, root and creation time are the state machine's to set.
	if c.GetSource() != "" || c.GetRootContentId() != "" || c.GetCreatedAt() != 0 || c.GetVersion() != 0 {
		t.Fatalf("content sent: %v", c)
	}
	if l := c.GetLabels(); len(l) != 3 || l["lang"] != `"en"` || l["pages"] != "3" || l["tags"] != `["a","b"]` {
		t.Fatalf("labels = %v", l)
	}
	if !bytes.Equal(e.readURL(c.GetStorageUrl()), data) {
		t.Fatal("stored bytes differ")
	}
	if !strings.HasPrefix(c.GetStorageUrl(), "file://"+e.store.Dir()+"/ns/doc1/") {
		t.Fatalf("storage url %s", c.GetStorageUrl())
	}
}

func TestUploadGeneratesIDAndSniffsType(t *testing.T) {
	e := newEnv(t)
	acceptContent(e, true)
	// The file part comes first and has no Content-Type (as Python
	// requests sends it); labels after the file still apply.
	r := e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/extract",
		formPart{name: "file", filename: "notes", data: []byte("just some plain text\n")},
		formPart{name: "labels", data: []byte(`{"k":"v"}`)},
	)
	if r.status != 200 {
		t.Fatalf("upload = %d %s", r.status, r.body)
	}
	id, _ := r.json(t)["content_id"].(string)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(id) {
		t.Fatalf("generated id %q", id)
	}
	c := requests[*pb.CreateContentRequest](e.fake, "CreateContent")[0].GetContents()[0]
	if c.GetId() != id || c.GetMimeType() != "text/plain" || c.GetLabels()["k"] != `"v"` {
		t.Fatalf("content %v", c)
	}
	// An empty labels field means no labels.
	if r := e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/extract",
		formPart{name: "labels"}, formPart{name: "file", filename: "a.txt", data: []byte("x")}); r.status != 200 {
		t.Fatalf("empty labels field = %d %s", r.status, r.body)
	}
	// Generic octet-stream is refined by the file extension.
	e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/extract",
		formPart{name: "file", filename: "page.html", contentType: "application/octet-stream", data: []byte("<p>x</p>")})
	c = requests[*pb.CreateContentRequest](e.fake, "CreateContent")[2].GetContents()[0]
	if c.GetMimeType() != "text/html" {
		t.Fatalf("mime %q", c.GetMimeType())
	}
}

func TestDuplicateUploadDeletesNewBlob(t *testing.T) {
	e := newEnv(t)
	acceptContent(e, false)
	r := e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g1/extract?id=dup",
		formPart{name: "file", filename: "a.txt", data: []byte("same bytes")})
	if r.status != 200 || r.json(t)["content_id"] != "dup" {
		t.Fatalf("upload = %d %s", r.status, r.body)
	}
	if f := e.blobFiles(); len(f) != 0 {
		t.Fatalf("duplicate upload left blobs %v", f)
	}
}

func TestCreateContentFailureDeletesBlob(t *testing.T) {
	cases := []struct {
		code   codes.Code
		status int
		ecode  string
	}{
		{codes.NotFound, 404, codeNotFound},
		{codes.InvalidArgument, 400, codeInvalidArgument},
		{codes.FailedPrecondition, 409, codeConflict},
	}
	for _, c := range cases {
		t.Run(c.code.String(), func(t *testing.T) {
			e := newEnv(t)
			on(e.fake, "CreateContent", func(r *pb.CreateContentRequest) (*pb.CreateContentResponse, error) {
				return nil, status.Error(c.code, "rejected")
			})
			r := e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/nope/extract",
				formPart{name: "file", filename: "a.txt", data: []byte("bytes")})
			expectError(t, r, c.status, c.ecode)
			if f := e.blobFiles(); len(f) != 0 {
				t.Fatalf("blobs left after failed CreateContent: %v", f)
			}
		})
	}
}

// After an ambiguous failure the API server asks whether the write applied:
// the blob stays only if the coordinator references it.
func TestAmbiguousCreateContentFailure(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprint("applied=", applied), func(t *testing.T) {
			e := newEnv(t)
			var sent atomic.Pointer[pb.Content]
			on(e.fake, "CreateContent", func(r *pb.CreateContentRequest) (*pb.CreateContentResponse, error) {
				sent.Store(r.GetContents()[0])
				return nil, status.Error(codes.Internal, "connection reset mid-write")
			})
			on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
				if r.GetConsistency() != pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE {
					t.Errorf("check read consistency = %v", r.GetConsistency())
				}
				if !applied {
					return nil, status.Error(codes.NotFound, "no such content")
				}
				return &pb.GetContentResponse{Contents: []*pb.Content{sent.Load()}}, nil
			})
			r := e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract?id=x",
				formPart{name: "file", filename: "a.txt", data: []byte("bytes")})
			expectError(t, r, 500, codeInternal)
			if got := len(e.blobFiles()); (got == 1) != applied {
				t.Fatalf("%d blobs left, applied=%v", got, applied)
			}
		})
	}
}

func TestUploadSizeLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxUploadBytes = 1024 })
	acceptContent(e, true)
	// Exactly at the limit is fine.
	r := e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract",
		formPart{name: "file", filename: "a.bin", data: bytes.Repeat([]byte{'a'}, 1024)})
	if r.status != 200 {
		t.Fatalf("upload at the limit = %d %s", r.status, r.body)
	}
	before := e.fake.count("CreateContent")
	blobsBefore := len(e.blobFiles())

	// One byte over, with a known length: streamed and cut at the limit.
	r = e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract",
		formPart{name: "file", filename: "a.bin", data: bytes.Repeat([]byte{'a'}, 1025)})
	expectError(t, r, 413, codeTooLarge)

	// Far over: refused from Content-Length before reading.
	r = e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract",
		formPart{name: "file", filename: "a.bin", data: bytes.Repeat([]byte{'a'}, 2<<20)})
	expectError(t, r, 413, codeTooLarge)

	// Unknown length (chunked): cut while streaming.
	body, ct := multipartBody(t, formPart{name: "file", filename: "a.bin", data: bytes.Repeat([]byte{'b'}, 5000)})
	pr, pw := io.Pipe()
	go func() { io.Copy(pw, body); pw.Close() }()
	r = e.do(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract", pr, ct)
	expectError(t, r, 413, codeTooLarge)

	if e.fake.count("CreateContent") != before {
		t.Error("an oversized upload reached CreateContent")
	}
	if got := len(e.blobFiles()); got != blobsBefore {
		t.Errorf("oversized uploads left %d files", got-blobsBefore)
	}
}

func TestUploadBadInput(t *testing.T) {
	e := newEnv(t)
	acceptContent(e, true)
	file := formPart{name: "file", filename: "a.txt", data: []byte("x")}
	expectError(t, e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract",
		formPart{name: "labels", data: []byte(`{}`)}), 400, codeMissingFile)
	expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract", `{"file":"x"}`), 400, codeInvalidMultipart)
	expectError(t, e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract",
		file, formPart{name: "labels", data: []byte(`{"a":`)}), 400, codeInvalidJSON)
	expectError(t, e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract",
		file, formPart{name: "labels", data: []byte(`["a"]`)}), 400, codeInvalidJSON)
	expectError(t, e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract",
		file, formPart{name: "labels", data: []byte(`{"a=b":1}`)}), 400, codeInvalidArgument)
	expectError(t, e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract", file, file), 400, codeInvalidMultipart)
	for _, id := range []string{"a%2Fb", "..", "a..b", "x%0Ay", "%00", "a%5Cb", "a%20b", strings.Repeat("x", 129)} {
		expectError(t, e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract?id="+id, file), 400, codeInvalidID)
	}
	expectError(t, e.upload(http.MethodPost, "/namespaces/a%2F..%2Fb/extraction_graphs/g/extract", file), 400, codeInvalidID)
	// Names follow the coordinator's rule (letters, digits, '_', '.', '-').
	expectError(t, e.upload(http.MethodPost, "/namespaces/my%20ns/extraction_graphs/g/extract", file), 400, codeInvalidID)
	expectError(t, e.upload(http.MethodPost, "/namespaces/ns/extraction_graphs/-g/extract", file), 400, codeInvalidID)
	// Truncated multipart body.
	body, ct := multipartBody(t, file)
	trunc := body.Bytes()[:body.Len()-10]
	expectError(t, e.do(http.MethodPost, "/namespaces/ns/extraction_graphs/g/extract", bytes.NewReader(trunc), ct), 400, codeInvalidMultipart)

	if n := e.fake.count("CreateContent"); n != 0 {
		t.Errorf("%d bad uploads reached CreateContent", n)
	}
	if f := e.blobFiles(); len(f) != 0 {
		t.Errorf("bad uploads left blobs: %v", f)
	}
}

func TestUpdateContentNewVersion(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
		if r.GetIds()[0] != "doc1" {
			return nil, status.Errorf(codes.NotFound, "content %q not found", r.GetIds()[0])
		}
		return &pb.GetContentResponse{Contents: []*pb.Content{{
			Id: "doc1", Namespace: "ns", Version: 2, Latest: true, Name: "old.txt", Source: "ingestion", RootContentId: "doc1",
			GraphNames: []string{"g1", "g2"}, Labels: map[string]string{"lang": `"en"`},
		}}}, nil
	})
	on(e.fake, "CreateContent", func(r *pb.CreateContentRequest) (*pb.CreateContentResponse, error) {
		return &pb.CreateContentResponse{Contents: []*pb.ContentRef{{Id: "doc1", Version: 3, Created: true}}}, nil
	})
	r := e.upload(http.MethodPut, "/namespaces/ns/content/doc1", formPart{name: "file", filename: "new.txt", data: []byte("v3 bytes")})
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"content_id":"doc1","created":true,"version":3}` {
		t.Fatalf("update = %d %s", r.status, r.body)
	}
	c := requests[*pb.CreateContentRequest](e.fake, "CreateContent")[0].GetContents()[0]
	if c.GetId() != "doc1" || strings.Join(c.GetGraphNames(), ",") != "g1,g2" || c.GetLabels()["lang"] != `"en"` ||
		c.GetName() != "new.txt" || c.GetHash() != sha([]byte("v3 bytes")) || c.GetRootContentId() != "" || c.GetCreatedAt() != 0 {
		t.Fatalf("new version %v", c)
	}
	// New labels replace the old ones.
	e.upload(http.MethodPut, "/namespaces/ns/content/doc1", formPart{name: "file", filename: "new.txt", data: []byte("v4")},
		formPart{name: "labels", data: []byte(`{"lang":"de"}`)})
	c = requests[*pb.CreateContentRequest](e.fake, "CreateContent")[1].GetContents()[0]
	if len(c.GetLabels()) != 1 || c.GetLabels()["lang"] != `"de"` {
		t.Fatalf("labels %v", c.GetLabels())
	}
	expectError(t, e.upload(http.MethodPut, "/namespaces/ns/content/missing", formPart{name: "file", filename: "a", data: []byte("x")}), 404, codeNotFound)
	expectError(t, e.upload(http.MethodPut, "/namespaces/ns/content/a%2Fb", formPart{name: "file", filename: "a", data: []byte("x")}), 400, codeInvalidID)
}

func TestIngestRemoteFile(t *testing.T) {
	payload := bytes.Repeat([]byte("remote data "), 1000)
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/files/doc.md":
			w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
			w.Write(payload)
		case "/big":
			w.Write(bytes.Repeat([]byte("x"), 5000))
		case "/bigchunked": // no Content-Length: the limit is found while streaming
			for range 5 {
				w.Write(bytes.Repeat([]byte("x"), 1000))
				w.(http.Flusher).Flush()
			}
		case "/redirect":
			http.Redirect(w, r, "/files/doc.md", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer remote.Close()
	e := newEnv(t, func(c *Config) { c.MaxUploadBytes = 4096 * 4; c.RemoteFetch = allowLoopback })
	acceptContent(e, true)

	r := e.doJSON(http.MethodPost, "/namespaces/ns/ingest_remote_file", map[string]any{
		"url": remote.URL + "/files/doc.md", "labels": map[string]any{"src": "web"}, "id": "rem1",
		"extraction_graph_names": []string{"g1", "g2"},
	})
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"content_id":"rem1"}` {
		t.Fatalf("ingest = %d %s", r.status, r.body)
	}
	c := requests[*pb.CreateContentRequest](e.fake, "CreateContent")[0].GetContents()[0]
	if c.GetId() != "rem1" || c.GetName() != "doc.md" || c.GetMimeType() != "text/markdown" || c.GetLabels()["src"] != `"web"` ||
		strings.Join(c.GetGraphNames(), ",") != "g1,g2" || c.GetHash() != sha(payload) || c.GetSource() != "" {
		t.Fatalf("content %v", c)
	}
	if !bytes.Equal(e.readURL(c.GetStorageUrl()), payload) {
		t.Fatal("stored bytes differ")
	}

	// mime_type in the request wins; redirects are followed; id generated.
	r = e.doJSON(http.MethodPost, "/namespaces/ns/ingest_remote_file", map[string]any{
		"url": remote.URL + "/redirect", "mime_type": "text/plain", "extraction_graph_names": []string{"g1"},
	})
	if r.status != 200 {
		t.Fatalf("ingest = %d %s", r.status, r.body)
	}
	c = requests[*pb.CreateContentRequest](e.fake, "CreateContent")[1].GetContents()[0]
	if c.GetMimeType() != "text/plain" || len(c.GetId()) != 16 {
		t.Fatalf("content %v", c)
	}

	blobs := len(e.blobFiles())
	bad := []struct {
		body   map[string]any
		status int
		code   string
	}{
		{map[string]any{"url": remote.URL + "/missing", "extraction_graph_names": []string{"g1"}}, 400, codeRemoteFetch},
		{map[string]any{"url": "ftp://127.0.0.1/x", "extraction_graph_names": []string{"g1"}}, 400, codeInvalidArgument},
		{map[string]any{"url": "/relative", "extraction_graph_names": []string{"g1"}}, 400, codeInvalidArgument},
		{map[string]any{"url": remote.URL + "/files/doc.md"}, 400, codeInvalidArgument},
		{map[string]any{"url": remote.URL + "/files/doc.md", "extraction_graph_names": []string{"a/b"}}, 400, codeInvalidID},
		{map[string]any{"url": remote.URL + "/files/doc.md", "id": "..", "extraction_graph_names": []string{"g"}}, 400, codeInvalidID},
		{map[string]any{"url": remote.URL + "/files/doc.md", "mime_type": "not a type", "extraction_graph_names": []string{"g"}}, 400, codeInvalidArgument},
	}
	for _, b := range bad {
		expectError(t, e.doJSON(http.MethodPost, "/namespaces/ns/ingest_remote_file", b.body), b.status, b.code)
	}
	e2 := newEnv(t, func(c *Config) { c.MaxUploadBytes = 1000; c.RemoteFetch = allowLoopback })
	acceptContent(e2, true)
	for _, p := range []string{"/big", "/bigchunked"} {
		r := e2.doJSON(http.MethodPost, "/namespaces/ns/ingest_remote_file",
			map[string]any{"url": remote.URL + p, "extraction_graph_names": []string{"g1"}})
		expectError(t, r, 413, codeTooLarge)
		if !strings.Contains(string(r.body), "remote file exceeds the limit of 1000 bytes") {
			t.Errorf("%s: size error does not name the remote file: %s", p, r.body)
		}
	}
	if len(e.blobFiles()) != blobs || len(e2.blobFiles()) != 0 {
		t.Fatal("failed remote ingests left blobs")
	}
	if _, err := os.Stat(e2.store.Dir()); err != nil {
		t.Fatal(err)
	}
}
