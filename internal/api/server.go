// Package api is the HTTP API server: the original Indexify routes for users
// and the result upload route for executors. It keeps no state of its own:
// metadata goes to the coordinator over gRPC, bytes go to a blob.Store.
package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/blob"
	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/index"
	"github.com/indexify-go/indexify/internal/remotefetch"
	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/structured"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Defaults for zero Config fields.
const (
	DefaultAddr           = ":8900"
	DefaultMaxUploadBytes = 1 << 30
	DefaultRequestTimeout = 30 * time.Second
	DefaultGCInterval     = 2 * time.Second
	DefaultNamespace      = "default"
	shutdownGrace         = 15 * time.Second
)

// Config configures a Server. Blob and Coordinator are required.
type Config struct {
	Addr           string // listen address for Run (default ":8900")
	MaxUploadBytes int64  // per uploaded file (default 1 GiB)
	Blob           blob.Store
	Coordinator    pb.CoordinatorServiceClient
	Logger         *slog.Logger // used as is (default: slog.Default() with component=api)
	// RequestTimeout bounds each coordinator call, including the retries
	// its connection makes while coordinators are unavailable (default 30s).
	// Coordinator must retry Unavailable itself (coordclient.Dial does).
	RequestTimeout time.Duration
	// GCInterval is the blob garbage collection period (default 2s; < 0
	// disables the GC worker, e.g. when another API server does GC).
	GCInterval time.Duration
	// RemoteFetch is where ingest_remote_file may connect and for how
	// long (default: public addresses only, 60s per fetch, 5 redirects).
	RemoteFetch remotefetch.Policy
	// Cluster answers GET /cluster (optional: without it the route is 503).
	Cluster pb.ClusterServiceClient
	// Metrics is the registry GET /metrics serves (default: a new one).
	Metrics *prometheus.Registry
	// Security and limits (auth.go, limits.go): API tokens (nil: open),
	// TLS for Run/Serve (nil: plain HTTP), caps and slow-client timeouts.
	Tokens *Tokens
	TLS    *tls.Config
	Limits Limits
	// Retrieval stores (retrieval.go): where task results' embeddings and
	// metadata go, and what search and SQL read. nil: features are not
	// stored and the retrieval routes answer 503.
	Index      index.Store
	Structured structured.Store
	// OpenAI is this server's configuration of the OpenAI-compatible
	// embedding extractor (base URL, model, key file, key directory; the
	// openai_embedding section of --extractors-config, the executors'
	// own): a search query is embedded with it where the index's params
	// leave those out, exactly as the executors embedded the content.
	OpenAI embed.OpenAIDefaults
}

// Server is the HTTP API server.
type Server struct {
	cfg          Config
	log          *slog.Logger
	mux          *http.ServeMux
	handler      http.Handler
	metrics      *apiMetrics
	fetch        *http.Client  // ingest_remote_file (remotefetch policy)
	patterns     []string      // every pattern registered on mux, for the OpenAPI check
	leaders      leaderConns   // GET /cluster asks the leader for member health
	stopping     chan struct{} // closed when graceful shutdown starts
	stoppingOnce sync.Once
}

// New builds a server; zero Config fields get their defaults.
func New(cfg Config) *Server {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default().With("component", "api")
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.GCInterval == 0 {
		cfg.GCInterval = DefaultGCInterval
	}
	s := &Server{
		cfg:      cfg,
		fetch:    cfg.RemoteFetch.Client(),
		log:      cfg.Logger,
		mux:      http.NewServeMux(),
		stopping: make(chan struct{}),
		metrics:  newAPIMetrics(cfg.Metrics),
	}
	s.routes()
	s.retrievalRoutes()
	s.operatorRoutes()
	cfg.Limits.setDefaults()
	s.cfg.Limits = cfg.Limits
	s.handler = s.observe(s.authenticate(s.limit(http.HandlerFunc(s.serveHTTP))))
	return s
}

func (s *Server) routes() {
	h := func(pattern string, fn func(http.ResponseWriter, *http.Request) error) {
		s.handle(pattern, s.wrap(fn))
	}
	s.handle("GET /{$}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("Indexify Server"))
	}))

	h("GET /namespaces", s.listNamespaces)
	h("POST /namespaces", s.createNamespace)
	h("GET /namespaces/{ns}", s.getNamespace)
	h("GET /extractors", s.listExtractors)

	const graph = "/namespaces/{ns}/extraction_graphs/{graph}"
	h("GET /namespaces/{ns}/extraction_graphs", s.listGraphs)
	h("POST /namespaces/{ns}/extraction_graphs", s.createGraph)
	h("GET "+graph, s.getGraph)
	h("DELETE "+graph, s.deleteGraph)
	h("GET "+graph+"/links", s.listLinks)
	h("POST "+graph+"/links", s.createLink)
	h("GET "+graph+"/analytics", s.analytics)
	h("POST "+graph+"/extract", s.uploadFile)
	h("GET "+graph+"/content", s.listContent)
	h("GET "+graph+"/content/{id}/extraction_policies/{policy}", s.contentTree)
	h("GET "+graph+"/extraction_policies/{policy}/tasks", s.listTasks)
	h("GET "+graph+"/extraction_policies/{policy}/content/stream", s.streamContent)

	const content = "/namespaces/{ns}/content/{id}"
	h("POST /namespaces/{ns}/ingest_remote_file", s.ingestRemoteFile)
	h("DELETE /namespaces/{ns}/content", s.deleteContent)
	h("PUT "+content, s.updateContent)
	h("GET "+content+"/metadata", s.contentMetadata)
	h("GET "+content+"/download", s.downloadContent)
	h("PUT "+content+"/labels", s.updateLabels)
	h("GET "+content+"/wait", s.waitContent)

	h("POST "+wire.ResultRoute, s.taskResult)
}

// handle registers a route and remembers its pattern.
func (s *Server) handle(pattern string, h http.Handler) {
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, h)
}

// wrap turns a handler returning an error into an http.Handler writing the
// JSON error shape.
func (s *Server) wrap(fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// Handler returns the HTTP handler of all routes.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal error", Code: codeInternal})
		}
	}()
	if _, err := parseConsistency(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		// No route: let the mux decide between 404, 405 and redirects, but
		// answer errors in our JSON shape.
		s.mux.ServeHTTP(&jsonErrorWriter{ResponseWriter: w}, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Run listens on Config.Addr and serves until ctx is done, then shuts down
// gracefully. It also runs the blob GC worker.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api: listen %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Run on an existing listener (which it closes).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler: s.handler,
		// No WriteTimeout: downloads, uploads, /wait and event streams are
		// legitimately long. Header reads are bounded against slowloris.
		// Bodies get read deadlines per request (limits.go).
		ReadHeaderTimeout: s.cfg.Limits.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.Limits.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	// Long-lived handlers (event streams, /wait) end when shutdown starts;
	// otherwise Shutdown would wait for them until its grace period ends.
	srv.RegisterOnShutdown(func() { s.stoppingOnce.Do(func() { close(s.stopping) }) })

	gcCtx, gcCancel := context.WithCancel(ctx)
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		s.runGC(gcCtx)
	}()
	defer func() {
		gcCancel()
		<-gcDone
	}()

	s.log.Info("api server listening", "addr", ln.Addr().String())
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	shCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := srv.Shutdown(shCtx)
	if err != nil {
		srv.Close()
	}
	if serr := <-serveErr; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("api: serve: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("api: shutdown: %w", err)
	}
	s.log.Info("api server stopped")
	return nil
}

// EnsureDefaultNamespace creates the "default" namespace, retrying until it
// exists or ctx is done. It is a start-up task, not a request: besides the
// connection's own Unavailable retries (bounded by RequestTimeout) it waits
// out any error, such as a coordinator still starting.
func (s *Server) EnsureDefaultNamespace(ctx context.Context) error {
	reqID := newRequestID()
	backoff := 50 * time.Millisecond
	for {
		_, err := call(ctx, s, func(ctx context.Context) (*pb.CreateNamespaceResponse, error) {
			return s.cfg.Coordinator.CreateNamespace(ctx, &pb.CreateNamespaceRequest{Name: DefaultNamespace, RequestId: reqID})
		})
		if err == nil || status.Code(err) == codes.AlreadyExists {
			return nil
		}
		s.log.Warn("creating default namespace failed; retrying", "err", err, "backoff", backoff)
		if !retry.Sleep(ctx, backoff) {
			return fmt.Errorf("api: create default namespace: %w (last error: %v)", ctx.Err(), err)
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// call runs one coordinator RPC bounded by RequestTimeout. It does not
// retry: the coordinator connection (internal/coordclient) owns the retries
// of this hop, re-sending an Unavailable call to the hinted leader or the
// next coordinator until this deadline. Writes carry a request id chosen
// once by the caller, so a retried write that did apply is answered from the
// coordinator's dedup table.
func call[T any](ctx context.Context, s *Server, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	return fn(ctx)
}
