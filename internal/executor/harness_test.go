package executor

// Test doubles for the two services an executor talks to. The real
// coordinator and API server are exercised together with the executor by the
// end-to-end tests (test/e2e); here they are kept minimal so the runtime's
// own behaviour (stream handling, dedupe, cancellation, retries) can be
// driven precisely over real gRPC and HTTP on 127.0.0.1.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// testCoordinator is an in-test CoordinatorService serving only Heartbeat:
// it hands every stream to the test, which pushes responses on it.
type testCoordinator struct {
	pb.UnimplementedCoordinatorServiceServer
	name    string
	streams chan *testStream
	srv     *grpc.Server
	addr    string
	reject  error // returned to every registration when set
}

type testStream struct {
	coord   string
	first   *pb.HeartbeatRequest
	send    chan *pb.HeartbeatResponse
	end     chan error
	mu      sync.Mutex
	pending []uint32 // pending_tasks of every heartbeat after the first
}

func (s *testStream) heartbeats() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint32(nil), s.pending...)
}

func (c *testCoordinator) Heartbeat(stream pb.CoordinatorService_HeartbeatServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if c.reject != nil {
		return c.reject
	}
	ts := &testStream{coord: c.name, first: first, send: make(chan *pb.HeartbeatResponse), end: make(chan error, 1)}
	c.streams <- ts
	recvDone := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			ts.mu.Lock()
			ts.pending = append(ts.pending, m.GetPendingTasks())
			ts.mu.Unlock()
		}
	}()
	for {
		select {
		case r := <-ts.send:
			if err := stream.Send(r); err != nil {
				return err
			}
		case err := <-ts.end:
			return err
		case err := <-recvDone:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-stream.Context().Done():
			return nil
		}
	}
}

func startCoordinator(t *testing.T, name string) *testCoordinator {
	t.Helper()
	return startRejectingCoordinator(t, name, nil)
}

// startRejectingCoordinator starts a coordinator that, when reject is set,
// answers every registration with it.
func startRejectingCoordinator(t *testing.T, name string, reject error) *testCoordinator {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &testCoordinator{name: name, streams: make(chan *testStream, 16), srv: grpc.NewServer(), addr: lis.Addr().String(), reject: reject}
	pb.RegisterCoordinatorServiceServer(c.srv, c)
	go func() { _ = c.srv.Serve(lis) }()
	t.Cleanup(c.srv.Stop)
	return c
}

// dialCoordinators connects one client to several coordinators, as the
// production dialer does: round robin over a static address list.
func dialCoordinators(t *testing.T, cs ...*testCoordinator) *grpc.ClientConn {
	t.Helper()
	r := manual.NewBuilderWithScheme("executortest")
	var addrs []resolver.Address
	for _, c := range cs {
		addrs = append(addrs, resolver.Address{Addr: c.addr})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	conn, err := grpc.NewClient(r.Scheme()+":///coordinators",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (c *testCoordinator) nextStream(t *testing.T) *testStream {
	t.Helper()
	select {
	case s := <-c.streams:
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("no heartbeat stream reached coordinator %s", c.name)
		return nil
	}
}

func (s *testStream) push(t *testing.T, resp *pb.HeartbeatResponse) {
	t.Helper()
	select {
	case s.send <- resp:
	case <-time.After(20 * time.Second):
		t.Fatal("could not push on the heartbeat stream")
	}
}

// upload is one result upload received by the test API server.
type upload struct {
	executor, task string
	result         *wire.TaskResult
	parseErr       error
	files          map[int][]byte
	mimes          map[int]string
}

// testAPI serves content downloads and records result uploads.
type testAPI struct {
	*httptest.Server
	mu        sync.Mutex
	content   map[string][]byte // "ns/id@version"
	uploads   []upload
	attempts  map[string]int   // upload attempts per task
	script    map[string][]int // per task: status codes to answer, in order, before accepting
	downloads map[string]int
	dlScript  map[string][]int // per content key: status codes to answer first
}

func startAPI(t *testing.T) *testAPI {
	t.Helper()
	a := &testAPI{content: map[string][]byte{}, attempts: map[string]int{}, script: map[string][]int{}, downloads: map[string]int{}, dlScript: map[string][]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /namespaces/{ns}/content/{id}/download", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("ns") + "/" + r.PathValue("id") + "@" + r.URL.Query().Get("version")
		a.mu.Lock()
		data, ok := a.content[key]
		a.downloads[key]++
		var code int
		if s := a.dlScript[key]; len(s) > 0 {
			code, a.dlScript[key] = s[0], s[1:]
		}
		a.mu.Unlock()
		if code != 0 {
			http.Error(w, "scripted "+strconv.Itoa(code), code)
			return
		}
		if !ok {
			http.Error(w, `{"error":"content not found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(data)
	})
	mux.HandleFunc("POST /internal/executors/{eid}/tasks/{tid}/result", func(w http.ResponseWriter, r *http.Request) {
		tid := r.PathValue("tid")
		a.mu.Lock()
		a.attempts[tid]++
		var code int
		if s := a.script[tid]; len(s) > 0 {
			code, a.script[tid] = s[0], s[1:]
		}
		a.mu.Unlock()
		if code != 0 {
			http.Error(w, "scripted "+strconv.Itoa(code), code)
			return
		}
		u := upload{executor: r.PathValue("eid"), task: tid, files: map[int][]byte{}, mimes: map[int]string{}}
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			u.parseErr = err
		} else {
			u.result, u.parseErr = wire.ParseTaskResult([]byte(r.FormValue(wire.ResultField)))
			for name, fhs := range r.MultipartForm.File {
				i, ok := wire.ParseContentPartName(name)
				if !ok || len(fhs) != 1 {
					u.parseErr = fmt.Errorf("unexpected part %q", name)
					continue
				}
				f, err := fhs[0].Open()
				if err != nil {
					u.parseErr = err
					continue
				}
				u.files[i], _ = io.ReadAll(f)
				u.mimes[i] = fhs[0].Header.Get("Content-Type")
				f.Close()
			}
		}
		a.mu.Lock()
		a.uploads = append(a.uploads, u)
		a.mu.Unlock()
		if u.parseErr != nil {
			http.Error(w, u.parseErr.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	a.Server = httptest.NewServer(mux)
	t.Cleanup(a.Close)
	return a
}

func (a *testAPI) put(ns, id string, version uint64, data string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.content[fmt.Sprintf("%s/%s@%d", ns, id, version)] = []byte(data)
}

func (a *testAPI) scriptDownload(key string, codes ...int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dlScript[key] = codes
}

func (a *testAPI) downloadsOf(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.downloads[key]
}

func (a *testAPI) scriptUpload(task string, codes ...int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.script[task] = codes
}

func (a *testAPI) attemptsFor(task string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attempts[task]
}

// uploadsFor returns the accepted-or-parsed uploads of a task so far.
func (a *testAPI) uploadsFor(task string) []upload {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []upload
	for _, u := range a.uploads {
		if u.task == task {
			out = append(out, u)
		}
	}
	return out
}

// waitUpload polls until the task has n uploads and returns the last.
func (a *testAPI) waitUpload(t *testing.T, task string, n int) upload {
	t.Helper()
	var got []upload
	eventually(t, "upload of "+task, func() bool {
		got = a.uploadsFor(task)
		return len(got) >= n
	})
	u := got[n-1]
	if u.parseErr != nil {
		t.Fatalf("upload of %s did not parse: %v", task, u.parseErr)
	}
	return u
}

// eventually polls cond with a deadline (no fixed sleeps as
// synchronisation).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !retry.PollUntil(30*time.Second, 5*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// startExecutor runs an executor until the test ends and checks that Run
// returns cleanly.
func startExecutor(t *testing.T, cfg Config, conn grpc.ClientConnInterface) *Executor {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ex, err := New(cfg, conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancellation")
		}
	})
	return ex
}

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func countLines(t *testing.T, path, line string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if l == line {
			n++
		}
	}
	return n
}
