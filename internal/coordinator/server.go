package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// ServerConfig is what one coordinator's endpoints serve: the node's
// replica of the state and its Raft member, both composed by the caller
// (internal/coordproc), plus the listen addresses and options.
type ServerConfig struct {
	// Store is the node's replica, written by the FSM that Cluster runs.
	Store   *state.Store
	Cluster *cluster.Node
	Service Config
	// GRPCAddr is the listen address of the gRPC API (CoordinatorService,
	// ClusterService, grpc.health.v1).
	GRPCAddr string
	// HTTPAddr is the listen address of /livez, /readyz, /startupz, /metrics.
	HTTPAddr string
	// ShutdownTimeout bounds the leadership hand-off on shutdown.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	// Metrics is the registry /metrics serves (default: a new one per node,
	// so several nodes can share a process).
	Metrics *prometheus.Registry
	// GRPCServerOptions are added to the gRPC server's (TLS credentials).
	GRPCServerOptions []grpc.ServerOption
	// MaxConcurrentStreams caps streams per client connection (default
	// DefaultMaxConcurrentStreams).
	MaxConcurrentStreams uint32
	// Ready, if set, is an extra condition of /readyz and /startupz
	// (`indexify dev`: its built-in executor has registered). It does not
	// affect the gRPC health service, which clients of this node use.
	Ready func() (ok bool, why string)
}

// Server is one coordinator node's endpoints: the gRPC API (with the
// executor push streams), health and metrics. It does not start Raft or
// the scheduler; the process's composition (internal/coordproc) does.
type Server struct {
	cfg     ServerConfig
	store   *state.Store
	cluster *cluster.Node
	svc     *Service
	applier instrumentedApply
	grpc    *grpc.Server
	health  *health.Server
	http    *http.Server
	grpcLn  net.Listener
	httpLn  net.Listener
	metrics *nodeMetrics
}

// NewServer listens on both addresses and builds the endpoints; Start
// serves them.
func NewServer(cfg ServerConfig) (*Server, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	grpcLn, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("coordinator gRPC listen %s: %w", cfg.GRPCAddr, err)
	}
	httpLn, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		grpcLn.Close()
		return nil, fmt.Errorf("coordinator HTTP listen %s: %w", cfg.HTTPAddr, err)
	}
	store, cn := cfg.Store, cfg.Cluster
	n := &Server{cfg: cfg, store: store, cluster: cn, grpcLn: grpcLn, httpLn: httpLn}
	n.metrics = newNodeMetrics(cfg.Metrics)
	n.applier = instrumentedApply{cn: cn, m: n.metrics}
	n.svc = New(store, n.applier, cfg.Service, log)
	if err := n.metrics.register(store, cn, n.svc); err != nil {
		grpcLn.Close()
		httpLn.Close()
		return nil, fmt.Errorf("coordinator metrics: %w", err)
	}
	callOpts := newCallLogger(log.With("component", "grpc"), n.metrics).serverOptions()
	n.grpc = grpc.NewServer(grpcServerOptions(cfg, append(callOpts, cn.GRPCServerOptions()...)...)...)
	pb.RegisterCoordinatorServiceServer(n.grpc, n.svc)
	cn.RegisterGRPC(n.grpc)
	n.health = health.NewServer()
	healthpb.RegisterHealthServer(n.grpc, n.health)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		if !cn.Live() {
			http.Error(w, "raft stopped", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ready := func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := cn.Ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		if cfg.Ready != nil {
			if ok, why := cfg.Ready(); !ok {
				http.Error(w, why, http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("GET /readyz", ready)
	mux.HandleFunc("GET /startupz", ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /debug/state-digest", digestHandler(cn.ID(), store))
	n.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return n, nil
}

// Replicator is the node's write path with its metrics: what the scheduler
// proposes through.
func (n *Server) Replicator() Replicator { return n.applier }

// Start serves the endpoints and runs the executor heartbeat flushes until
// ctx ends (or Shutdown).
func (n *Server) Start(ctx context.Context) {
	log := n.svc.log
	go func() {
		if err := n.grpc.Serve(n.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("gRPC server stopped", "err", err)
		}
	}()
	go func() {
		if err := n.http.Serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health server stopped", "err", err)
		}
	}()
	go n.svc.Run(ctx)
	go n.watchHealth(ctx)
}

// watchHealth keeps the gRPC health service in step with readiness.
func (n *Server) watchHealth(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ok, _ := n.cluster.Ready(); ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		n.health.SetServingStatus("", st)
		n.health.SetServingStatus(pb.CoordinatorService_ServiceDesc.ServiceName, st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Store returns the node's replica of the state (read-only use).
func (n *Server) Store() *state.Store { return n.store }

// Cluster returns the node's Raft membership handle.
func (n *Server) Cluster() *cluster.Node { return n.cluster }

// GRPCAddr is the address the gRPC API listens on.
func (n *Server) GRPCAddr() string { return n.grpcLn.Addr().String() }

// Metrics returns the registry the node's /metrics serves.
func (n *Server) Metrics() *prometheus.Registry { return n.metrics.reg }

// HTTPAddr is the address the health/metrics endpoints listen on.
func (n *Server) HTTPAddr() string { return n.httpLn.Addr().String() }

// Shutdown hands leadership off (if leading), then stops serving. It never
// removes this node from the cluster: a restart must find it still a member.
func (n *Server) Shutdown() error {
	n.svc.Stop()
	n.health.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	err := n.cluster.Shutdown(ctx)
	n.stopServers()
	return err
}

// Leave removes this node from the cluster (scale-down), then stops.
func (n *Server) Leave() error {
	n.svc.Stop()
	n.health.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	err := n.cluster.Leave(ctx)
	n.stopServers()
	return err
}

func (n *Server) stopServers() {
	stopped := make(chan struct{})
	go func() { n.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		n.grpc.Stop() // streams (executor heartbeats) never end by themselves
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = n.http.Shutdown(ctx)
	n.metrics.close(n.cluster)
}
