package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func acceptAll(e *env) {
	on(e.fake, "CreateContent", func(r *pb.CreateContentRequest) (*pb.CreateContentResponse, error) {
		var refs []*pb.ContentRef
		for _, c := range r.GetContents() {
			refs = append(refs, &pb.ContentRef{Id: c.GetId(), Version: 1, Created: true})
		}
		return &pb.CreateContentResponse{Contents: refs}, nil
	})
}

func labelsJSON(n int, key func(i int) string, val string) []byte {
	m := map[string]json.RawMessage{}
	for i := range n {
		m[key(i)] = json.RawMessage(val)
	}
	b, _ := json.Marshal(m)
	return b
}

func TestLabelLimits(t *testing.T) {
	e := newEnv(t)
	acceptAll(e)
	upload := "/namespaces/default/extraction_graphs/g/extract"
	file := formPart{name: "file", filename: "a.txt", data: []byte("hello")}
	num := func(i int) string { return fmt.Sprintf("k%d", i) }

	ok := e.upload("POST", upload, file, formPart{name: "labels", data: labelsJSON(MaxLabels, num, `"v"`)})
	if ok.status != 200 {
		t.Fatalf("%d labels: %d %s", MaxLabels, ok.status, ok.body)
	}
	for name, labels := range map[string][]byte{
		"too many labels": labelsJSON(MaxLabels+1, num, `"v"`),
		"long label name": labelsJSON(1, func(int) string { return strings.Repeat("k", MaxLabelKeyBytes+1) }, `"v"`),
		"long value":      labelsJSON(1, num, `"`+strings.Repeat("v", MaxLabelValueBytes)+`"`),
	} {
		before := len(e.blobFiles())
		r := e.upload("POST", upload, file, formPart{name: "labels", data: labels})
		expectError(t, r, 400, codeLimit)
		if !strings.Contains(string(r.body), "limit") {
			t.Errorf("%s: message does not name the limit: %s", name, r.body)
		}
		if got := len(e.blobFiles()); got != before {
			t.Errorf("%s: refused upload left a blob (%d -> %d files)", name, before, got)
		}
	}
	// The same limits apply to label updates.
	r := e.doJSON("PUT", "/namespaces/default/content/c1/labels", map[string]any{"labels": json.RawMessage(labelsJSON(MaxLabels+1, num, `1`))})
	expectError(t, r, 400, codeLimit)
}

func TestGraphLimits(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "CreateExtractionGraph", func(r *pb.CreateExtractionGraphRequest) (*pb.CreateExtractionGraphResponse, error) {
		return &pb.CreateExtractionGraphResponse{Graph: r.GetGraph()}, nil
	})
	spec := func(policies, filters int) string {
		var b strings.Builder
		b.WriteString("name: g\nextraction_policies:\n")
		for i := range policies {
			fmt.Fprintf(&b, "  - {name: p%d, extractor: x/y", i)
			if filters > 0 {
				b.WriteString(", filter: [")
				for j := range filters {
					if j > 0 {
						b.WriteString(", ")
					}
					fmt.Fprintf(&b, "\"k%d=1\"", j)
				}
				b.WriteString("]")
			}
			b.WriteString("}\n")
		}
		return b.String()
	}
	url := "/namespaces/default/extraction_graphs"
	if r := e.do("POST", url, strings.NewReader(spec(MaxPoliciesPerGraph, MaxFiltersPerPolicy)), "application/yaml"); r.status != 200 {
		t.Fatalf("graph at the limits: %d %s", r.status, r.body)
	}
	expectError(t, e.do("POST", url, strings.NewReader(spec(MaxPoliciesPerGraph+1, 0)), "application/yaml"), 400, codeLimit)
	expectError(t, e.do("POST", url, strings.NewReader(spec(1, MaxFiltersPerPolicy+1)), "application/yaml"), 400, codeLimit)
	big := "name: g\ndescription: " + strings.Repeat("d", MaxGraphSpecBytes) + "\nextraction_policies: [{name: p, extractor: x/y}]\n"
	expectError(t, e.do("POST", url, strings.NewReader(big), "application/yaml"), 413, codeTooLarge)
	desc := "name: g\ndescription: " + strings.Repeat("d", MaxDescriptionBytes+1) + "\nextraction_policies: [{name: p, extractor: x/y}]\n"
	expectError(t, e.do("POST", url, strings.NewReader(desc), "application/yaml"), 400, codeLimit)
	// Inline graphs of a namespace are checked too.
	var inline map[string]any
	json.Unmarshal([]byte(`{"name":"ns2","extraction_graphs":[`+mustJSONGraph(MaxPoliciesPerGraph+1)+`]}`), &inline)
	expectError(t, e.doJSON("POST", "/namespaces", inline), 400, codeLimit)
}

func mustJSONGraph(policies int) string {
	var ps []string
	for i := range policies {
		ps = append(ps, fmt.Sprintf(`{"name":"p%d","extractor":"x/y"}`, i))
	}
	return `{"name":"g","extraction_policies":[` + strings.Join(ps, ",") + `]}`
}

// stalledUpload starts a multipart upload whose body stops after the file
// part's first bytes; closing the returned writer ends it.
func stalledUpload(t *testing.T, e *env, done chan<- response) *io.PipeWriter {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		req, _ := http.NewRequest("POST", e.http.URL+"/namespaces/default/extraction_graphs/g/extract", pr)
		req.Header.Set("Content-Type", "multipart/form-data; boundary=XYZ")
		resp, err := e.http.Client().Do(req)
		if err != nil {
			done <- response{status: -1, body: []byte(err.Error())}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- response{status: resp.StatusCode, body: b}
	}()
	pw.Write([]byte("--XYZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"))
	pw.Write([]byte(strings.Repeat("x", 1024)))
	return pw
}

func TestConcurrentUploadCap(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.MaxConcurrentUploads = 1 })
	acceptAll(e)
	done := make(chan response, 1)
	pw := stalledUpload(t, e, done)
	// The first upload is inside the handler once its blob is being written.
	eventually(t, "first upload staging", func() bool { return len(e.blobFiles()) > 0 })

	r := e.upload("POST", "/namespaces/default/extraction_graphs/g/extract", formPart{name: "file", filename: "b.txt", data: []byte("b")})
	expectError(t, r, 429, codeTooManyUploads)
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Reads are not uploads: still served.
	on(e.fake, "ListNamespaces", func(*pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
		return &pb.ListNamespacesResponse{}, nil
	})
	if r := e.get("/namespaces"); r.status != 200 {
		t.Fatalf("GET while uploads are capped: %d", r.status)
	}

	pw.Write([]byte("\r\n--XYZ--\r\n"))
	pw.Close()
	if first := <-done; first.status != 200 {
		t.Fatalf("first upload: %d %s", first.status, first.body)
	}
	r = e.upload("POST", "/namespaces/default/extraction_graphs/g/extract", formPart{name: "file", filename: "b.txt", data: []byte("b")})
	if r.status != 200 {
		t.Fatalf("upload after the slot freed: %d %s", r.status, r.body)
	}
}

// serveReal runs the server on a real listener with http.Server timeouts.
func serveReal(t *testing.T, e *env) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ln.Addr().String()
}

// readUntilClosed reads what the server sends until it closes the
// connection; a generous deadline only guards against a hang.
func readUntilClosed(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("server kept a stalled connection open (read so far: %q)", b)
	}
	return string(b)
}

func TestSlowClientsAreCutOff(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Limits.ReadHeaderTimeout = 200 * time.Millisecond
		c.Limits.BodyIdleTimeout = 500 * time.Millisecond
		c.Limits.BodyReadTimeout = 200 * time.Millisecond
	})
	acceptAll(e)
	addr := serveReal(t, e)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("headers never finish", func(t *testing.T) {
		c := dial()
		fmt.Fprint(c, "GET /namespaces HTTP/1.1\r\nHost: x\r\n")
		readUntilClosed(t, c)
	})
	t.Run("upload body stalls", func(t *testing.T) {
		c := dial()
		body := "--XYZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\n\r\n" + strings.Repeat("x", 100)
		fmt.Fprintf(c, "POST /namespaces/default/extraction_graphs/g/extract HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=XYZ\r\nContent-Length: 100000\r\n\r\n%s", body)
		out := readUntilClosed(t, c)
		if !strings.Contains(out, "408 Request Timeout") || !strings.Contains(out, `"code":"request_timeout"`) || !strings.Contains(out, "stalled") {
			t.Fatalf("response to a stalled upload: %q", out)
		}
		eventually(t, "no blob left behind", func() bool { return len(e.blobFiles()) == 0 })
	})
	t.Run("json body never completes", func(t *testing.T) {
		c := dial()
		fmt.Fprint(c, "PUT /namespaces/default/content/c1/labels HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"labels\":")
		out := readUntilClosed(t, c)
		if !strings.Contains(out, "408 Request Timeout") || !strings.Contains(out, "not received within") {
			t.Fatalf("response to a stalled JSON body: %q", out)
		}
	})
	t.Run("a slow but moving upload succeeds", func(t *testing.T) {
		c := dial()
		body := "--XYZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nabcdefghij\r\n--XYZ--\r\n"
		fmt.Fprintf(c, "POST /namespaces/default/extraction_graphs/g/extract HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=XYZ\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body))
		// One byte every 25ms (pacing is the behaviour under test): the
		// whole body takes several idle timeouts, no gap comes close to one.
		for i := range len(body) {
			c.Write([]byte{body[i]})
			time.Sleep(25 * time.Millisecond)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("slow upload: %d %s", resp.StatusCode, b)
		}
	})
}
