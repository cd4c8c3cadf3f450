package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	"github.com/indexify-go/indexify/internal/blob"
	"github.com/indexify-go/indexify/internal/labels"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

var specTypes = []string{"application/json", "application/x-yaml", "", "text/plain; charset=utf-8"}

// FuzzGraphSpec: any body either becomes a graph within the limits whose
// filters parse and whose params are a JSON object, or is refused with a
// 4xx API error. Never a panic, never a 5xx.
func FuzzGraphSpec(f *testing.F) {
	for _, s := range []string{
		"name: g\nextraction_policies:\n  - {name: p, extractor: x/y, filter: [\"a=b\"], input_params: {k: 1}}\n",
		`{"name":"g","extraction_policies":[{"name":"p","extractor":"x","labels_eq":"a:b,c:d","content_source":"q"}]}`,
		`{"name":"g","extraction_policies":[{"name":"p","extractor":"x","filter":{"a":1,"b":true}}]}`,
		"name: &a [*a]\n", "- 1\n- 2\n", "{}", "null", "name: g\nextraction_policies: 5\n", "\xff\xfe",
		`{"name":"g","namespace":"other","extraction_policies":[]}`, "a: !!binary AAAA\n",
		`{"name":"loopg","extraction_policies":[{"extractor":"tensorlake/chunk-extractor","name":"ingestion","input_params":{"chunk_size":10}}]}`,
		`{"name":"g","extraction_policies":[{"name":"p","extractor":"x","filter":["n>1e999"],"input_params":{"chunk_size":1e18}}]}`,
	} {
		for i := range specTypes {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, kind uint8) {
		req, err := parseGraphSpec(body, specTypes[int(kind)%len(specTypes)])
		if err != nil {
			expect4xx(t, err)
			return
		}
		g, err := graphToProto(req, "default")
		if err != nil {
			expect4xx(t, err)
			return
		}
		if len(g.Policies) == 0 || len(g.Policies) > MaxPoliciesPerGraph {
			t.Fatalf("graph with %d policies accepted", len(g.Policies))
		}
		for _, p := range g.Policies {
			if _, err := labels.Parse(p.Filter); err != nil {
				t.Fatalf("accepted filter %q does not parse: %v", p.Filter, err)
			}
			if state.ReservedPolicyName(p.Name) {
				t.Fatalf("reserved policy name %q accepted", p.Name)
			}
			var params map[string]any
			if err := json.Unmarshal([]byte(p.InputParamsJson), &params); err != nil {
				t.Fatalf("input params %q are not a JSON object: %v", p.InputParamsJson, err)
			}
		}
	})
}

func expect4xx(t *testing.T, err error) {
	t.Helper()
	var ae *apiError
	if !errors.As(err, &ae) || ae.status < 400 || ae.status > 499 || ae.msg == "" {
		t.Fatalf("error is not a 4xx API error: %#v", err)
	}
}

// createOnly is a coordinator that only accepts CreateContent: an upload
// handler calling anything else panics, which the fuzz target reports.
type createOnly struct{ pb.CoordinatorServiceClient }

func (createOnly) CreateContent(_ context.Context, r *pb.CreateContentRequest, _ ...grpc.CallOption) (*pb.CreateContentResponse, error) {
	var refs []*pb.ContentRef
	for _, c := range r.GetContents() {
		refs = append(refs, &pb.ContentRef{Id: c.GetId(), Version: 1, Created: true})
	}
	return &pb.CreateContentResponse{Contents: refs}, nil
}

func countFiles(t *testing.T, dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// FuzzMultipartUpload: any body sent to the upload route gets 200 (and
// exactly one new blob) or a 4xx JSON error (and no new blob).
func FuzzMultipartUpload(f *testing.F) {
	mp := func(parts string) []byte { return []byte(parts) }
	for _, s := range [][]byte{
		mp("--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhello\r\n--B--\r\n"),
		mp("--B\r\nContent-Disposition: form-data; name=\"labels\"\r\n\r\n{\"a\":1}\r\n--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--B--\r\n"),
		mp("--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\ny\r\n--B--\r\n"),
		mp("--B\r\nContent-Disposition: form-data; name=\"labels\"\r\n\r\n[1]\r\n--B--\r\n"),
		mp("--B\r\nContent-Disposition: form-data; name=\"labels\"\r\n\r\n{\"a\":1e400}\r\n--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--B--\r\n"),
		mp("--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../x\"\r\nContent-Type: ;;;\r\n\r\n\x00\r\n--B--\r\n"),
		mp("--B\r\n\r\n--B--"), mp("garbage"), mp(""),
	} {
		f.Add(s, "B", "doc-1")
	}
	dir := f.TempDir()
	store, err := blob.NewDisk(filepath.Join(dir, "blobs"))
	if err != nil {
		f.Fatal(err)
	}
	defer store.Close()
	s := New(Config{Blob: store, Coordinator: createOnly{}, GCInterval: -1, MaxUploadBytes: 1 << 16,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.Fuzz(func(t *testing.T, body []byte, boundary, id string) {
		target := "/namespaces/default/extraction_graphs/g/extract"
		if id != "" {
			target += "?id=" + urlQueryEscape(id)
		}
		before := countFiles(t, store.Dir())
		req := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		req.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		after := countFiles(t, store.Dir())
		switch {
		case rec.Code == http.StatusOK:
			if after != before+1 {
				t.Fatalf("200 but blobs went %d -> %d", before, after)
			}
		case rec.Code >= 400 && rec.Code < 500:
			var eb errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error == "" || eb.Code == "" {
				t.Fatalf("%d with a body that is not the JSON error shape: %q", rec.Code, rec.Body)
			}
			if after != before {
				t.Fatalf("refused upload (%d %s) left blobs %d -> %d", rec.Code, eb.Code, before, after)
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}

func urlQueryEscape(s string) string {
	return (&url.URL{RawQuery: url.Values{"x": {s}}.Encode()}).RawQuery[2:]
}

// FuzzJSONBody: any body is either refused with a 4xx (invalid JSON,
// trailing data, duplicate keys at any depth) or decodes to a value that
// survives a round trip. Never a panic.
func FuzzJSONBody(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `{"x":{"a":1,"a":2}}`, `[{"a":1},{"a":1}]`, `{"a":[{"b":1,"b":1}]}`,
		`{"a":"\u0061","\u0061":1}`, `1 2`, ``, `{"a":1}{"b":2}`, `{"":1,"":2}`, `"x"`, `[[[[]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if err := unmarshalJSON(b, &v); err != nil {
			expect4xx(t, err)
			return
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("accepted %q does not re-encode: %v", b, err)
		}
		if err := checkDuplicateKeys(out); err != nil {
			t.Fatalf("re-encoding of accepted %q has duplicates: %v", b, err)
		}
	})
}
