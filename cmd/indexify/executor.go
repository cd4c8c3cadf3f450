package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/executor"
)

// extractorsConfig is --extractors-config, the executor's YAML file: the
// external extractors it offers and the openai_embedding section (base URL,
// model, key) of the built-in OpenAI-compatible embedding. The API server
// reads that section of the same file, so it embeds a search query exactly
// as the executors embedded the content; `dev` registers the flag once and
// gives the one file to both.
type extractorsConfig struct{ file string }

// ensureExtractorsConfig returns c, or a new one when nil (standalone commands).
func ensureExtractorsConfig(c *extractorsConfig) *extractorsConfig {
	if c == nil {
		return &extractorsConfig{}
	}
	return c
}

// register adds --extractors-config unless fs has it already (dev).
func (c *extractorsConfig) register(fs *pflag.FlagSet) {
	if fs.Lookup("extractors-config") != nil {
		return
	}
	fs.StringVar(&c.file, "extractors-config", "", "YAML file of the extractors: external ones (executables) the executor offers besides the built-ins, "+
		"and the openai_embedding defaults (base_url, model, api_key_file, key_dir) of tensorlake/openai-embedding, "+
		"used by the executor and by the API server to embed search queries; give executors and API servers the same section")
}

// load reads the file; ok is false when the flag is unset.
func (c *extractorsConfig) load() (fc executor.FileConfig, ok bool, err error) {
	if c.file == "" {
		return fc, false, nil
	}
	fc, err = executor.LoadConfigFile(c.file)
	if err != nil {
		return fc, false, fmt.Errorf("--extractors-config: %w", err)
	}
	return fc, true, nil
}

// openAIDefaults is the file's openai_embedding section (zero when unset).
func (c *extractorsConfig) openAIDefaults() (embed.OpenAIDefaults, error) {
	fc, _, err := c.load()
	return fc.OpenAIDefaults(), err
}

// executorFlags are the settings of an executor, shared by `executor` and `dev`.
type executorFlags struct {
	id              string
	stateDir        string // keeps the id across restarts (executor: --state-dir; dev: its data dir)
	maxPendingTasks int
	concurrency     int
	extractors      *extractorsConfig // shared with the API server in dev
	sec             *securityFlags    // tlsflags.go; shared with the other parts in dev
}

func (f *executorFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.id, "executor-id", "", "executor id (default: kept in the state directory; without one, host name plus a random suffix)")
	fs.IntVar(&f.maxPendingTasks, "max-pending-tasks", 20, "most tasks queued on this executor at once")
	fs.IntVar(&f.concurrency, "concurrency", 0, "tasks run in parallel (default: number of CPUs)")
	f.extractors = ensureExtractorsConfig(f.extractors)
	f.extractors.register(fs)
	f.sec = ensureSecurity(f.sec)
	f.sec.registerTLS(fs)
	f.sec.registerAPIToken(fs)
}

func (f *executorFlags) build(coordinators []string, apiURL string, log *slog.Logger) (ex *executor.Executor, closeFn func(), err error) {
	id := f.id
	if id == "" && f.stateDir != "" {
		// The same id after a restart replaces the previous run's
		// registration instead of listing it until it is removed.
		var sd *executor.StateDir
		if sd, err = executor.OpenStateDir(f.stateDir); err != nil {
			return nil, nil, err
		}
		id = sd.ID
		defer func() {
			if err != nil {
				sd.Close()
				return
			}
			inner := closeFn
			closeFn = func() { inner(); sd.Close() }
		}()
	}
	extractors := executor.Builtins()
	fc, ok, err := f.extractors.load()
	if err != nil {
		return nil, nil, err
	}
	if ok {
		// The file's openai_embedding section configures that built-in.
		extractors = executor.BuiltinsWith(fc.OpenAIDefaults())
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
	ex, err = executor.New(executor.Config{
		ID:              id,
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
			ctx, stop := processContext()
			defer stop()
			return ex.Run(ctx)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&coordinators, "coordinator-addr", "localhost:8950", "coordinators to use: comma list of HOST:PORT and/or dns:NAME:PORT")
	cmd.Flags().StringVar(&apiURL, "api-server", "http://localhost:8900", "base URL of an API server, for content downloads and result uploads")
	cmd.Flags().StringVar(&f.stateDir, "state-dir", "", "directory keeping this executor's id across restarts, locked while it runs (one per executor): a restarted executor replaces its previous registration and gets its assigned tasks back. Without it each start is a new executor, and the previous one is listed until removed (5 s after its stream ended, or --executor-timeout of the coordinators if they restarted too)")
	cmd.MarkFlagsMutuallyExclusive("executor-id", "state-dir")
	return cmd
}
