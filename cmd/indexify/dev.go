package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/coordproc"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func newDevCmd() *cobra.Command {
	var (
		cf      coordFlags
		sf      serverFlags
		ef      executorFlags
		dataDir string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run coordinator, API server and an executor in one process, data in one directory",
		Long: `Run the whole control plane in one process: a one-voter Raft coordinator, the
HTTP API server and a local executor with the built-in extractors. All data
(Raft log, snapshots, blobs, vector and SQL stores) lives under --data-dir,
./indexify-data of the working directory by default, and survives restarts.

Every listener binds 127.0.0.1 unless told otherwise: API 8900, coordinator
gRPC 8950, health/metrics 8960, Raft 8970. To reach dev from other hosts set
--api-addr :8900 (and --coordinator-addr, ... as needed); with
--api-tokens-file on, the coordinator gRPC API and Raft must stay on
loopback (or use mutual TLS), since they take no API tokens.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.Default()
			if err := cf.sec.checkDevExposure(cf.grpcAddr, cf.raftAddr); err != nil {
				return err
			}
			cf.dataDir = dataDir
			cf.bootstrapExpect = 1
			if cf.advertise == "" {
				cf.advertise = loopbackAdvertise(cf.raftAddr)
			}
			cfg, err := cf.nodeConfig(log)
			if err != nil {
				return err
			}
			// /readyz and /startupz of dev mean "the whole dev is usable":
			// the built-in executor and its extractors are registered.
			var devReady atomic.Bool
			cfg.Server.Ready = func() (bool, string) {
				if !devReady.Load() {
					return false, "the built-in executor has not registered yet"
				}
				return true, ""
			}
			ctx, stop := processContext()
			defer stop()
			node, err := coordproc.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer node.Shutdown()

			local := []string{loopbackAdvertise(node.GRPCAddr())}
			opts, err := cf.sec.dialOptions(log, true)
			if err != nil {
				return err
			}
			conn, err := coordclient.Dial(local, append(opts, apiDialOptions()...)...)
			if err != nil {
				return err
			}
			defer conn.Close()
			srv, err := sf.apiServer(dataDir, conn, log)
			if err != nil {
				return err
			}
			defer srv.Close()
			apiURL := cf.sec.scheme() + loopbackAdvertise(sf.apiAddr)
			ef.stateDir = dataDir // keeps the executor id across restarts
			ex, closeEx, err := ef.build(local, apiURL, log)
			if err != nil {
				return err
			}
			defer closeEx()
			go func() {
				if err := ex.Run(ctx); err != nil && ctx.Err() == nil {
					log.Error("executor stopped", "err", err)
				}
			}()
			// The API listens only once requests can succeed: the default
			// namespace exists and the executor's extractors are known, so
			// the README's first curl never meets "unknown extractor".
			if err := srv.EnsureDefaultNamespace(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if err := waitExecutorRegistered(ctx, pb.NewCoordinatorServiceClient(conn), ex.ID(), log); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			ln, err := net.Listen("tcp", sf.apiAddr)
			if err != nil {
				return fmt.Errorf("api: listen %s: %w", sf.apiAddr, err)
			}
			apiErr := make(chan error, 1)
			go func() { apiErr <- srv.Serve(ctx, ln) }()
			devReady.Store(true)
			log.Info("indexify dev is up", "api", apiURL, "data_dir", dataDir)
			fmt.Fprintf(cmd.OutOrStdout(), "indexify dev ready: %s (data in %s)\n", apiURL, dataDir)
			select {
			case <-ctx.Done():
				return nil
			case err := <-apiErr:
				if err != nil {
					return fmt.Errorf("API server: %w", err)
				}
				return nil
			}
		},
	}
	fs := cmd.Flags()
	sec := &securityFlags{} // one set of security flags for all three parts
	cf.sec, sf.sec, ef.sec = sec, sec, sec
	xc := &extractorsConfig{} // one --extractors-config for executor and API server
	sf.extractors, ef.extractors = xc, xc
	fs.StringVar(&dataDir, "data-dir", "indexify-data", "directory holding all data (Raft log, snapshots, blobs)")
	cf.register(fs, true)
	sf.register(fs)
	ef.register(fs)
	// dev is a single-machine mode: every listener is reachable from this
	// host only unless a flag says otherwise (server and coordinator keep
	// their all-interface defaults).
	for name, addr := range devListenDefaults {
		f := fs.Lookup(name)
		f.DefValue = addr
		if err := f.Value.Set(addr); err != nil {
			panic(err)
		}
	}
	return cmd
}

// devListenDefaults are dev's loopback defaults of the listen addresses.
var devListenDefaults = map[string]string{
	"api-addr":              "127.0.0.1:8900",
	"coordinator-addr":      "127.0.0.1:8950",
	"coordinator-http-addr": "127.0.0.1:8960",
	"raft-addr":             "127.0.0.1:8970",
}

// waitExecutorRegistered polls the coordinator (linearizably) until the
// executor id is registered, logging while it waits.
func waitExecutorRegistered(ctx context.Context, cl pb.CoordinatorServiceClient, id string, log *slog.Logger) error {
	backoff := 20 * time.Millisecond
	nextLog := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cl.ListExecutors(cctx, &pb.ListExecutorsRequest{Consistency: pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE})
		cancel()
		for _, e := range resp.GetExecutors() {
			if e.GetId() == id {
				return nil
			}
		}
		if time.Now().After(nextLog) {
			log.Warn("still waiting for the built-in executor to register", "executor", id, "err", err)
			nextLog = time.Now().Add(10 * time.Second)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// loopbackAdvertise turns a listen address with an empty or wildcard host
// into a loopback address a local client can dial.
func loopbackAdvertise(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
