// Package coordproc composes one coordinator process: the state store and
// its FSM, the Raft member applying the log to it, the endpoints (gRPC API,
// executor push streams, health, metrics) and, while the node leads, the
// scheduler. cmd/indexify (coordinator and dev) starts its coordinator
// with it, as the API server and the executor are composed from their own
// packages, and so do the tests that need a real coordinator in-process,
// so that they run the composition production runs instead of a copy.
package coordproc

import (
	"context"
	"log/slog"

	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/coordinator"
	"github.com/indexify-go/indexify/internal/scheduler"
	"github.com/indexify-go/indexify/internal/state"
)

// Config is everything one coordinator process needs (cmd/indexify builds
// it from its flags).
type Config struct {
	Cluster   cluster.Config
	Scheduler scheduler.Config // NodeID is taken from Cluster
	// Server's Store and Cluster are filled by Start.
	Server coordinator.ServerConfig
}

// Start composes and starts a coordinator. Raft joins or forms the cluster
// in the background. Stop it with the returned server's Shutdown or Leave.
func Start(ctx context.Context, cfg Config) (*coordinator.Server, error) {
	log := cfg.Server.Logger
	if log == nil {
		log = slog.Default()
	}
	store := state.NewStore()
	cn, err := cluster.New(cfg.Cluster, state.NewFSM(store, log))
	if err != nil {
		return nil, err
	}
	sc := cfg.Server
	sc.Store, sc.Cluster = store, cn
	srv, err := coordinator.NewServer(sc)
	if err != nil {
		cn.Shutdown(ctx)
		return nil, err
	}
	schedCfg := cfg.Scheduler
	schedCfg.NodeID = cfg.Cluster.NodeID
	cn.RunWhileLeader(func(lctx context.Context, term uint64) {
		log.Info("leadership gained: scheduler starting", "term", term)
		scheduler.New(store, srv.Replicator(), schedCfg, log.With("component", "scheduler")).Run(lctx, term)
		log.Info("leadership lost: scheduler stopped", "term", term)
	})
	srv.Start(ctx)
	cn.Start(ctx)
	log.Info("coordinator started", "node", cfg.Cluster.NodeID, "grpc", srv.GRPCAddr(),
		"http", srv.HTTPAddr(), "raft", cfg.Cluster.RaftAdvertise)
	return srv, nil
}
