package coordinator_test

// Operator-facing behaviour of a real one-node coordinator with a real API
// server in front of it: request ids reach the coordinator's log, the
// coordinator's /metrics shows Raft and apply numbers, and the API's
// /cluster route reports the Raft status.

import (
	"bytes"
	"context"
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

	"google.golang.org/grpc"

	"github.com/indexify-go/indexify/internal/api"
	"github.com/indexify-go/indexify/internal/blob"
	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/coordinator"
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

type stack struct {
	node *coordinator.Node
	api  *httptest.Server
	logs *syncBuf
}

func startStack(t *testing.T) *stack {
	t.Helper()
	logs := &syncBuf{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	grpcAddr := freeAddr(t)
	dir := t.TempDir()
	node, err := coordinator.StartNode(context.Background(), coordinator.NodeConfig{
		Cluster: cluster.Config{
			NodeID: "op-0", DataDir: filepath.Join(dir, "coord"), RaftBind: freeAddr(t),
			GRPCAdvertise: grpcAddr, BootstrapExpect: 1, ElectionTimeout: 200 * time.Millisecond, Logger: log,
		},
		GRPCAddr: grpcAddr,
		HTTPAddr: "127.0.0.1:0",
		Logger:   log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Shutdown() })
	waitFor(t, "node ready", func() error {
		if ok, why := node.Cluster().Ready(); !ok {
			return fmt.Errorf("%s", why)
		}
		return nil
	})
	opts := append([]grpc.DialOption{grpc.WithChainUnaryInterceptor(api.ReadConsistencyInterceptor())}, api.RequestIDInterceptors()...)
	conn, err := coordclient.Dial([]string{grpcAddr}, opts...)
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
	return &stack{node: node, api: hs, logs: logs}
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
	var st struct {
		LeaderID     string `json:"leader_id"`
		State        string `json:"state"`
		AppliedIndex uint64 `json:"applied_index"`
		Members      []struct {
			ID      string `json:"id"`
			Voter   bool   `json:"voter"`
			Leader  bool   `json:"leader"`
			Healthy bool   `json:"healthy"`
		} `json:"members"`
	}
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
