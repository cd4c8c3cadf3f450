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
	"github.com/indexify-go/indexify/internal/scheduler"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// NodeConfig is everything one coordinator process needs.
type NodeConfig struct {
	Cluster   cluster.Config
	Service   Config
	Scheduler scheduler.Config
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
}

// Node is a running coordinator: Raft member, gRPC API, health endpoints and,
// while it leads, the scheduler.
type Node struct {
	cfg     NodeConfig
	store   *state.Store
	cluster *cluster.Node
	svc     *Service
	grpc    *grpc.Server
	health  *health.Server
	http    *http.Server
	grpcLn  net.Listener
	httpLn  net.Listener
	metrics *nodeMetrics
}

// StartNode opens the data directory, starts listening and joins or forms
// the cluster in the background. Call Shutdown to stop.
func StartNode(ctx context.Context, cfg NodeConfig) (*Node, error) {
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
	store := state.NewStore()
	fsm := state.NewFSM(store, log)
	cn, err := cluster.New(cfg.Cluster, fsm)
	if err != nil {
		grpcLn.Close()
		httpLn.Close()
		return nil, err
	}
	n := &Node{cfg: cfg, store: store, cluster: cn, grpcLn: grpcLn, httpLn: httpLn}
	n.metrics = newNodeMetrics(cfg.Metrics)
	applier := instrumentedApply{cn: cn, m: n.metrics}
	n.svc = New(store, applier, cfg.Service, log)
	if err := n.metrics.register(store, cn, n.svc); err != nil {
		cn.Shutdown(ctx)
		grpcLn.Close()
		httpLn.Close()
		return nil, fmt.Errorf("coordinator metrics: %w", err)
	}
	callOpts := callLogger{log: log.With("component", "grpc"), m: n.metrics}.serverOptions()
	n.grpc = grpc.NewServer(grpcServerOptions(cfg, append(callOpts, cn.GRPCServerOptions()...)...)...)
	pb.RegisterCoordinatorServiceServer(n.grpc, n.svc)
	cn.RegisterGRPC(n.grpc)
	n.health = health.NewServer()
	healthpb.RegisterHealthServer(n.grpc, n.health)

	schedCfg := cfg.Scheduler
	schedCfg.NodeID = cfg.Cluster.NodeID
	cn.RunWhileLeader(func(lctx context.Context, term uint64) {
		log.Info("leadership gained: scheduler starting", "term", term)
		scheduler.New(store, applier, schedCfg, log.With("component", "scheduler")).Run(lctx, term)
		log.Info("leadership lost: scheduler stopped", "term", term)
	})

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
		fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("GET /readyz", ready)
	mux.HandleFunc("GET /startupz", ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	n.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	go func() {
		if err := n.grpc.Serve(grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("gRPC server stopped", "err", err)
		}
	}()
	go func() {
		if err := n.http.Serve(httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health server stopped", "err", err)
		}
	}()
	go n.svc.Run(ctx)
	go n.watchHealth(ctx)
	cn.Start(ctx)
	log.Info("coordinator started", "node", cfg.Cluster.NodeID, "grpc", grpcLn.Addr().String(),
		"http", httpLn.Addr().String(), "raft", cfg.Cluster.RaftAdvertise)
	return n, nil
}

// watchHealth keeps the gRPC health service in step with readiness.
func (n *Node) watchHealth(ctx context.Context) {
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
func (n *Node) Store() *state.Store { return n.store }

// Cluster returns the node's Raft membership handle.
func (n *Node) Cluster() *cluster.Node { return n.cluster }

// GRPCAddr is the address the gRPC API listens on.
func (n *Node) GRPCAddr() string { return n.grpcLn.Addr().String() }

// Metrics returns the registry the node's /metrics serves.
func (n *Node) Metrics() *prometheus.Registry { return n.metrics.reg }

// HTTPAddr is the address the health/metrics endpoints listen on.
func (n *Node) HTTPAddr() string { return n.httpLn.Addr().String() }

// Shutdown hands leadership off (if leading), then stops serving. It never
// removes this node from the cluster: a restart must find it still a member.
func (n *Node) Shutdown() error {
	n.svc.Stop()
	n.health.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	err := n.cluster.Shutdown(ctx)
	n.stopServers()
	return err
}

// Leave removes this node from the cluster (scale-down), then stops.
func (n *Node) Leave() error {
	n.svc.Stop()
	n.health.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	err := n.cluster.Leave(ctx)
	n.stopServers()
	return err
}

func (n *Node) stopServers() {
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
