package harness

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The vector database the tests run for the distributed index store:
// Weaviate, single node, built from the Go module proxy (about 13 minutes on
// 2 cores with a cold module cache; .ci/weaviate.sh builds it before the
// tests, so only a plain `go test` on a fresh machine pays for it, and then
// needs -timeout above the default 10 minutes).
const (
	WeaviateModule  = "github.com/weaviate/weaviate/cmd/weaviate-server"
	WeaviateVersion = "v1.35.2"
)

var (
	weaviateOnce sync.Once
	weaviatePath string
	weaviateErr  error
)

// WeaviatePath is where the weaviate-server binary is cached:
// $INDEXIFY_TOOLS_DIR (default ~/.cache/indexify-tools)/weaviate-<version>/weaviate-server.
func WeaviatePath() string {
	return filepath.Join(toolsDir(), "weaviate-"+WeaviateVersion, "weaviate-server")
}

// WeaviateBinary returns the path of a built weaviate-server, building it if needed.
func WeaviateBinary(t testing.TB) string {
	t.Helper()
	weaviateOnce.Do(func() {
		weaviatePath = WeaviatePath()
		weaviateErr = buildTool(weaviatePath, WeaviateModule, WeaviateVersion)
	})
	if weaviateErr != nil {
		t.Fatal(weaviateErr)
	}
	return weaviatePath
}

// WeaviateServer is a single-node Weaviate on loopback ports, storing its
// data in Dir. Stop and Start keep ports and data (a restart, or an outage).
type WeaviateServer struct {
	t    testing.TB
	Addr string // 127.0.0.1:port of the REST API
	Dir  string
	env  []string
	proc *Proc
}

// StartWeaviate starts a Weaviate with fresh storage and waits until it is
// ready; env (KEY=VALUE) adds to or overrides its configuration.
func StartWeaviate(t testing.TB, env ...string) *WeaviateServer {
	t.Helper()
	port := func() string { return strconv.Itoa(FreePort(t, "127.0.0.1")) }
	s := &WeaviateServer{t: t, Dir: t.TempDir(), Addr: "127.0.0.1:" + port()}
	// Some listeners (gossip, data, gRPC, profiling) bind every interface
	// whatever we say: they get free ports, and the tests only ever talk
	// to 127.0.0.1.
	s.env = []string{
		"PERSISTENCE_DATA_PATH=" + s.Dir,
		"AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED=true",
		"DEFAULT_VECTORIZER_MODULE=none",
		"DISABLE_TELEMETRY=true",
		// Classes are created by EnsureIndex only: an upsert racing a drop
		// must fail, not recreate the class with a guessed schema.
		"AUTOSCHEMA_ENABLED=false",
		"CLUSTER_HOSTNAME=node1",
		"CLUSTER_ADVERTISE_ADDR=127.0.0.1",
		"CLUSTER_GOSSIP_BIND_PORT=" + port(),
		"CLUSTER_DATA_BIND_PORT=" + port(),
		"RAFT_PORT=" + port(),
		"RAFT_INTERNAL_RPC_PORT=" + port(),
		"RAFT_JOIN=node1",
		"RAFT_BOOTSTRAP_EXPECT=1",
		"GRPC_PORT=" + port(),
		"GO_PROFILING_PORT=" + port(),
		"LOG_LEVEL=warning",
	}
	s.env = append(s.env, env...)
	s.Start()
	return s
}

// URL is the REST endpoint (scheme and host).
func (s *WeaviateServer) URL() string { return "http://" + s.Addr }

// Start (re)starts the server and waits until /v1/.well-known/ready answers 200.
func (s *WeaviateServer) Start() {
	s.t.Helper()
	host, port := s.Addr[:len("127.0.0.1")], s.Addr[len("127.0.0.1:"):]
	s.proc = startExternalEnv(s.t, "weaviate", WeaviateBinary(s.t), s.env,
		"--host", host, "--port", port, "--scheme", "http")
	c := &http.Client{Timeout: 2 * time.Second}
	Eventually(s.t, 90*time.Second, "Weaviate is ready", func() error {
		if s.proc.Exited() {
			s.t.Fatalf("weaviate exited:\n%s", s.proc.Output())
		}
		resp, err := c.Get(s.URL() + "/v1/.well-known/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("ready = %d", resp.StatusCode)
		}
		return nil
	})
}

// Stop kills the server (SIGKILL: an outage, not a shutdown) and waits for it to exit.
func (s *WeaviateServer) Stop() {
	s.proc.Kill()
}

// Shutdown stops the server gracefully (SIGTERM), killing it if it has not
// exited within 60 s.
func (s *WeaviateServer) Shutdown() {
	s.proc.Signal(syscall.SIGTERM)
	if !s.proc.Wait(60 * time.Second) {
		s.proc.Kill()
	}
}
