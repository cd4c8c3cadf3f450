package coordinator_test

// Operator-facing behaviour of a real one-node coordinator with a real API
// server in front of it: request ids reach the coordinator's log, the
// coordinator's /metrics shows Raft and apply numbers, and the API's
// /cluster route reports the Raft status.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/api"
	"github.com/indexify-go/indexify/internal/blob"
	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/coordinator"
	"github.com/indexify-go/indexify/internal/coordproc"
	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/scheduler"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	if err := retry.PollFor(20*time.Second, 20*time.Millisecond, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

type stack struct {
	node    *coordinator.Server
	api     *httptest.Server
	logs    *syncBuf
	blobDir string
}

func startStack(t *testing.T) *stack { return startStackWith(t, coordinator.Config{}) }

// startStackWith starts the stack with the coordinator service's config
// (its MaxUnfinishedTasks is the scheduler's too, as in cmd/indexify).
func startStackWith(t *testing.T, svc coordinator.Config) *stack {
	t.Helper()
	logs := &syncBuf{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	grpcAddr := freeAddr(t)
	dir := t.TempDir()
	node := startNode(t, cluster.Config{
		NodeID: "op-0", DataDir: filepath.Join(dir, "coord"), RaftBind: freeAddr(t),
		GRPCAdvertise: grpcAddr, BootstrapExpect: 1, ElectionTimeout: 200 * time.Millisecond, Logger: log,
	}, coordinator.ServerConfig{GRPCAddr: grpcAddr, HTTPAddr: "127.0.0.1:0", Logger: log, Service: svc})
	t.Cleanup(func() { node.Shutdown() })
	waitFor(t, "node ready", func() error {
		if ok, why := node.Cluster().Ready(); !ok {
			return fmt.Errorf("%s", why)
		}
		return nil
	})
	conn, err := coordclient.Dial([]string{grpcAddr}, api.RequestIDInterceptors()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	store, err := blob.NewDisk(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Config{
		Blob:        store,
		Coordinator: pb.NewCoordinatorServiceClient(conn),
		Cluster:     pb.NewClusterServiceClient(conn),
		Logger:      log,
		GCInterval:  -1,
	})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &stack{node: node, api: hs, logs: logs, blobDir: filepath.Join(dir, "blobs")}
}

// startNode starts a coordinator composed as the binary composes it (the
// scheduler's bound on unfinished tasks is the service's, as the flag sets
// both).
func startNode(t *testing.T, cc cluster.Config, sc coordinator.ServerConfig) *coordinator.Server {
	t.Helper()
	srv, err := coordproc.Start(context.Background(), coordproc.Config{Cluster: cc, Server: sc,
		Scheduler: scheduler.Config{MaxUnfinishedTasks: sc.Service.MaxUnfinishedTasks}})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestRequestIDReachesCoordinatorLog(t *testing.T) {
	s := startStack(t)
	resp, body := get(t, s.api.URL+"/namespaces", map[string]string{"X-Request-Id": "trace-me-42"})
	if resp.StatusCode != 200 {
		t.Fatalf("GET /namespaces: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "trace-me-42" {
		t.Fatalf("X-Request-Id echoed as %q", got)
	}
	waitFor(t, "coordinator logs the request id", func() error {
		for _, line := range strings.Split(s.logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			if rec["component"] == "grpc" && rec["request_id"] == "trace-me-42" &&
				rec["method"] == "/indexify.v1.CoordinatorService/ListNamespaces" && rec["code"] == "OK" {
				return nil
			}
		}
		return fmt.Errorf("no grpc log line with the request id")
	})

	// A header that could forge log fields is replaced by a fresh id, which
	// is what the coordinator then sees.
	resp, _ = get(t, s.api.URL+"/namespaces", map[string]string{"X-Request-Id": "bad id level=ERROR"})
	fresh := resp.Header.Get("X-Request-Id")
	if fresh == "" || strings.ContainsAny(fresh, " \n") {
		t.Fatalf("invalid client id not replaced: %q", fresh)
	}
	waitFor(t, "coordinator logs the generated id", func() error {
		if !strings.Contains(s.logs.String(), `"request_id":"`+fresh+`"`) {
			return fmt.Errorf("id %s not logged", fresh)
		}
		return nil
	})
}

func TestCoordinatorMetricsAndClusterRoute(t *testing.T) {
	s := startStack(t)
	resp, err := http.Post(s.api.URL+"/namespaces", "application/json", strings.NewReader(`{"name":"ops"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("create namespace: %d", resp.StatusCode)
	}

	_, body := get(t, "http://"+s.node.HTTPAddr()+"/metrics", nil)
	text := string(body)
	for _, want := range []string{
		`indexify_raft_state{state="Leader"} 1`,
		`indexify_raft_state{state="Follower"} 0`,
		`indexify_raft_is_leader 1`,
		`indexify_raft_members{suffrage="voter"} 1`,
		`indexify_raft_leader_changes_total 1`,
		`indexify_executors_connected 0`,
		`indexify_executors_registered 0`,
		`indexify_raft_apply_duration_seconds_count{path="local",result="ok"}`,
		`indexify_grpc_requests_total{code="OK",method="/indexify.v1.CoordinatorService/CreateNamespace"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("coordinator /metrics lacks %q", want)
		}
	}
	term := metricValue(t, text, "indexify_raft_term")
	applied := metricValue(t, text, "indexify_raft_applied_index")
	commit := metricValue(t, text, "indexify_raft_commit_index")
	if term < 1 || applied < 3 || commit < applied {
		t.Errorf("term %v applied %v commit %v: want term>=1, applied>=3 (bootstrap, node info, namespace), commit>=applied", term, applied, commit)
	}

	resp, body = get(t, s.api.URL+"/cluster", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /cluster: %d %s", resp.StatusCode, body)
	}
	var st wire.ClusterStatus
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.LeaderID != "op-0" || st.State != "Leader" || st.AppliedIndex < 3 || len(st.Members) != 1 ||
		!st.Members[0].Voter || !st.Members[0].Leader || !st.Members[0].Healthy {
		t.Fatalf("GET /cluster = %s", body)
	}
	resp, body = get(t, s.api.URL+"/executors", nil)
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"executors":[]}` {
		t.Fatalf("GET /executors: %d %s", resp.StatusCode, body)
	}
}

// metricValue reads an unlabelled sample from the text exposition format.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// The digest route answers the SHA-256 of the replica's canonical dump at
// the applied index it names, and a change of state changes it.
func TestStateDigestRoute(t *testing.T) {
	s := startStack(t)
	fetch := func() wire.StateDigest {
		t.Helper()
		resp, body := get(t, "http://"+s.node.HTTPAddr()+"/debug/state-digest", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET /debug/state-digest: %d %s", resp.StatusCode, body)
		}
		var d wire.StateDigest
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return d
	}
	var before wire.StateDigest
	waitFor(t, "route digest equals the store's at the same applied index", func() error {
		before = fetch()
		applied, sum := s.node.Store().Digest()
		if applied != before.AppliedIndex {
			return fmt.Errorf("store moved from %d to %d", before.AppliedIndex, applied)
		}
		if before.SHA256 != hex.EncodeToString(sum[:]) {
			return fmt.Errorf("route %s, Digest %x", before.SHA256, sum)
		}
		return nil
	})
	if before.NodeID != "op-0" || before.AppliedIndex == 0 {
		t.Fatalf("digest = %+v", before)
	}
	resp, err := http.Post(s.api.URL+"/namespaces", "application/json", strings.NewReader(`{"name":"digest"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("create namespace: %d", resp.StatusCode)
	}
	after := fetch()
	if after.AppliedIndex <= before.AppliedIndex || after.SHA256 == before.SHA256 {
		t.Fatalf("after a write: %+v, before: %+v", after, before)
	}
}
