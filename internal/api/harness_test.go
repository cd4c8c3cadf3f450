package api

// Test harness: a real gRPC server on 127.0.0.1 serving a deliberately small
// fake of CoordinatorService. The fake has no logic of its own: each test
// installs canned answers for the methods it exercises (interceptors
// short-circuit the calls) and inspects the captured requests. Methods a
// test did not install answer Unimplemented. The real coordinator is
// exercised end-to-end elsewhere.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/indexify-go/indexify/internal/blob"
	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/retry"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

type fakeCoord struct {
	mu       sync.Mutex
	handlers map[string]func(context.Context, proto.Message) (proto.Message, error)
	reqs     map[string][]proto.Message
	// watch serves WatchContent when set.
	watch func(*pb.WatchContentRequest, grpc.ServerStream) error
}

func methodName(full string) string { return full[strings.LastIndex(full, "/")+1:] }

func (f *fakeCoord) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	name := methodName(info.FullMethod)
	f.mu.Lock()
	f.reqs[name] = append(f.reqs[name], proto.Clone(req.(proto.Message)))
	h := f.handlers[name]
	f.mu.Unlock()
	if h == nil {
		return nil, status.Errorf(codes.Unimplemented, "fake: %s not set up by this test", name)
	}
	return h(ctx, req.(proto.Message))
}

func (f *fakeCoord) stream(_ any, ss grpc.ServerStream, info *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
	if methodName(info.FullMethod) != "WatchContent" {
		return status.Error(codes.Unimplemented, "fake: stream not set up")
	}
	req := &pb.WatchContentRequest{}
	if err := ss.RecvMsg(req); err != nil {
		return err
	}
	f.mu.Lock()
	f.reqs["WatchContent"] = append(f.reqs["WatchContent"], req)
	w := f.watch
	f.mu.Unlock()
	if w == nil {
		return status.Error(codes.Unimplemented, "fake: WatchContent not set up")
	}
	return w(req, ss)
}

// on installs the canned answer of one unary method.
func on[Req, Resp proto.Message](f *fakeCoord, method string, fn func(Req) (Resp, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[method] = func(_ context.Context, m proto.Message) (proto.Message, error) {
		resp, err := fn(m.(Req))
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// onCtx is on for answers that depend on the call's context (deadlines).
func onCtx[Req, Resp proto.Message](f *fakeCoord, method string, fn func(context.Context, Req) (Resp, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[method] = func(ctx context.Context, m proto.Message) (proto.Message, error) {
		resp, err := fn(ctx, m.(Req))
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// requests returns the captured requests of one method.
func requests[Req proto.Message](f *fakeCoord, method string) []Req {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Req
	for _, m := range f.reqs[method] {
		out = append(out, m.(Req))
	}
	return out
}

func (f *fakeCoord) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs[method])
}

type env struct {
	t     *testing.T
	fake  *fakeCoord
	srv   *Server
	http  *httptest.Server
	store *blob.Disk
	cfg   Config
}

func newEnv(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	f := &fakeCoord{
		handlers: map[string]func(context.Context, proto.Message) (proto.Message, error){},
		reqs:     map[string][]proto.Message{},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(f.unary), grpc.StreamInterceptor(f.stream))
	pb.RegisterCoordinatorServiceServer(gs, pb.UnimplementedCoordinatorServiceServer{})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	// The connection the API server runs with: it owns Unavailable retries.
	conn, err := coordclient.Dial([]string{lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	store, err := blob.NewDisk(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := Config{
		Blob:           store,
		Coordinator:    pb.NewCoordinatorServiceClient(conn),
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		RequestTimeout: 10 * time.Second,
		GCInterval:     -1,
	}
	for _, o := range opts {
		o(&cfg)
	}
	s := New(cfg)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &env{t: t, fake: f, srv: s, http: hs, store: store, cfg: cfg}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v: %s", r.status, err, r.body)
	}
	return m
}

func (e *env) do(method, path string, body io.Reader, contentType string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (e *env) get(path string) response { return e.do(http.MethodGet, path, nil, "") }

func (e *env) doJSON(method, path string, v any) response {
	e.t.Helper()
	var body io.Reader
	switch t := v.(type) {
	case nil:
	case string:
		body = strings.NewReader(t)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			e.t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	return e.do(method, path, body, "application/json")
}

// formPart is one multipart part for upload helpers.
type formPart struct {
	name, filename, contentType string
	data                        []byte
}

func multipartBody(t *testing.T, parts ...formPart) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		disp := `form-data; name="` + p.name + `"`
		if p.filename != "" {
			disp += `; filename="` + p.filename + `"`
		}
		h.Set("Content-Disposition", disp)
		if p.contentType != "" {
			h.Set("Content-Type", p.contentType)
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(p.data)
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

func (e *env) upload(method, path string, parts ...formPart) response {
	e.t.Helper()
	body, ct := multipartBody(e.t, parts...)
	return e.do(method, path, body, ct)
}

// expectError checks the one JSON error shape and its status and code.
func expectError(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type = %q, want application/json", ct)
	}
	var eb map[string]any
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Fatalf("error body is not JSON: %s", r.body)
	}
	if len(eb) != 2 {
		t.Errorf("error body has fields %v, want exactly error and code", eb)
	}
	msg, _ := eb["error"].(string)
	if msg == "" {
		t.Errorf("error message is empty: %s", r.body)
	}
	if eb["code"] != code {
		t.Errorf("error code = %v, want %q (message %q)", eb["code"], code, msg)
	}
}

// blobFiles lists the files in the blob store (temp files included).
func (e *env) blobFiles() []string {
	e.t.Helper()
	var out []string
	filepath.WalkDir(e.store.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !retry.PollUntil(10*time.Second, 5*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}
