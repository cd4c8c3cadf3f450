package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/coordinator"
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
lives under --data-dir and survives restarts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.Default()
			cf.dataDir = dataDir
			cf.bootstrapExpect = 1
			if cf.advertise == "" {
				cf.advertise = loopbackAdvertise(cf.raftAddr)
			}
			cfg, err := cf.nodeConfig(log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			node, err := coordinator.StartNode(ctx, cfg)
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
			apiErr := make(chan error, 1)
			go func() { apiErr <- srv.Run(ctx) }()
			go func() {
				if err := srv.EnsureDefaultNamespace(ctx); err != nil && ctx.Err() == nil {
					log.Warn("could not create the default namespace", "err", err)
				}
			}()
			ex, closeEx, err := ef.build(local, cf.sec.scheme()+loopbackAdvertise(sf.apiAddr), log)
			if err != nil {
				return err
			}
			defer closeEx()
			go func() {
				if err := ex.Run(ctx); err != nil && ctx.Err() == nil {
					log.Error("executor stopped", "err", err)
				}
			}()
			log.Info("indexify dev is up", "api", cf.sec.scheme()+loopbackAdvertise(sf.apiAddr), "data_dir", dataDir)
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
	fs.StringVar(&dataDir, "data-dir", "indexify-data", "directory holding all data (Raft log, snapshots, blobs)")
	cf.register(fs, true)
	sf.register(fs)
	ef.register(fs)
	return cmd
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
