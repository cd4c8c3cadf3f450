package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/executor"
)

// executorFlags are the settings of an executor, shared by `executor` and `dev`.
type executorFlags struct {
	id              string
	extractorsFile  string
	maxPendingTasks int
	concurrency     int
	sec             *securityFlags // tlsflags.go; shared with the other parts in dev
}

func (f *executorFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.id, "executor-id", "", "executor id (default: host name plus a random suffix)")
	fs.StringVar(&f.extractorsFile, "extractors-config", "", "YAML file listing external extractors (executables) to offer besides the built-ins")
	fs.IntVar(&f.maxPendingTasks, "max-pending-tasks", 20, "most tasks queued on this executor at once")
	fs.IntVar(&f.concurrency, "concurrency", 0, "tasks run in parallel (default: number of CPUs)")
	f.sec = ensureSecurity(f.sec)
	f.sec.registerTLS(fs)
	f.sec.registerAPIToken(fs)
}

func (f *executorFlags) build(coordinators []string, apiURL string, log *slog.Logger) (*executor.Executor, func(), error) {
	extractors := executor.Builtins()
	if f.extractorsFile != "" {
		fc, err := executor.LoadConfigFile(f.extractorsFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--extractors-config: %w", err)
		}
		more, err := fc.Extractors()
		if err != nil {
			return nil, nil, fmt.Errorf("--extractors-config: %w", err)
		}
		extractors = append(extractors, more...)
	}
	opts, err := f.sec.dialOptions(log, false)
	if err != nil {
		return nil, nil, err
	}
	httpClient, err := f.sec.httpClient(log)
	if err != nil {
		return nil, nil, err
	}
	conn, err := coordclient.Dial(coordinators, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--coordinator-addr: %w", err)
	}
	ex, err := executor.New(executor.Config{
		ID:              f.id,
		Coordinators:    coordinators,
		APIServer:       apiURL,
		MaxPendingTasks: f.maxPendingTasks,
		Concurrency:     f.concurrency,
		Extractors:      extractors,
		Logger:          log.With("component", "executor"),
		HTTPClient:      httpClient,
	}, conn)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return ex, func() { conn.Close() }, nil
}

func newExecutorCmd() *cobra.Command {
	f := &executorFlags{}
	var coordinators, apiURL string
	cmd := &cobra.Command{
		Use:   "executor",
		Short: "Run an executor: receives tasks from the coordinators and runs extractors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ex, closeFn, err := f.build(coordclient.ParseTargets(coordinators), apiURL, slog.Default())
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return ex.Run(ctx)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&coordinators, "coordinator-addr", "localhost:8950", "coordinators to use: comma list of HOST:PORT and/or dns:NAME:PORT")
	cmd.Flags().StringVar(&apiURL, "api-server", "http://localhost:8900", "base URL of an API server, for content downloads and result uploads")
	return cmd
}
