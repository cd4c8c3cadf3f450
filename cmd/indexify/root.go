package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/indexify-go/indexify/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type globalFlags struct {
	configFile string
	logLevel   string
	logFormat  string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "indexify",
		Short: "Indexify control plane: replicated coordinator, API server and executors",
		Long: `indexify runs every part of the Indexify control plane from one binary.

  indexify dev           everything in one process, data in one directory
  indexify coordinator   a Raft-replicated coordinator node (metadata + scheduler)
  indexify server        the HTTP API server users and executors talk to
  indexify executor      runs extractors on tasks pushed by the coordinators
  indexify cluster ...   operate a coordinator cluster

API client commands (against --server, default http://localhost:8900):
  indexify namespace|graph|content|task ...   and   indexify executor list
  indexify completion bash|zsh|fish           shell completion script

Every flag can also be set as INDEXIFY_<FLAG> in the environment (--data-dir is
INDEXIFY_DATA_DIR) or as <flag> in the YAML file given with --config (data_dir:).
Flags win over the environment, which wins over the file.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.Apply(cmd.Flags(), cmd.Flag("config").Value.String()); err != nil {
				return err
			}
			return setupLogging(g)
		},
	}
	root.PersistentFlags().StringVar(&g.configFile, "config", "", "YAML file with settings (keys are flag names with _ for -)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "", "log format: text or json (default: text on a terminal, json otherwise)")
	root.AddCommand(newDevCmd(), newCoordinatorCmd(), newServerCmd(), addExecutorList(newExecutorCmd()), newClusterCmd(), newVersionCmd())
	root.AddCommand(clientCommands()...)
	return root
}

func setupLogging(g *globalFlags) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	format := strings.ToLower(g.logFormat)
	if format == "" {
		format = "json"
		if term.IsTerminal(int(os.Stderr.Fd())) {
			format = "text"
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, opts)))
	case "json":
		slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, opts)))
	default:
		return fmt.Errorf("--log-format %q: want text or json", g.logFormat)
	}
	return nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "indexify", version)
		},
	}
}
