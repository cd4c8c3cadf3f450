package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
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

API client commands (against --server or INDEXIFY_SERVER, default http://localhost:8900):
  indexify namespace|graph|content|task|extractor|index|schema ...
  indexify search INDEX QUERY | sql QUERY | content download ID | executor list
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
	opts := logOptions(level)
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

// logOptions are the handler options of the process log: durations are
// written as "20ms" in JSON too (slog's JSON handler would write 20000000).
func logOptions(level slog.Level) *slog.HandlerOptions {
	return &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit it was built from and the Go version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			info, _ := debug.ReadBuildInfo()
			fmt.Fprintln(cmd.OutOrStdout(), versionString(version, info))
		},
	}
}

// versionString is `indexify VERSION (commit REV[, modified]) GOVERSION`:
// VERSION from -ldflags (make build), else the module version (go install
// of a tagged release); the commit from the VCS stamp of go build/install
// (go run and go test have none).
func versionString(v string, info *debug.BuildInfo) string {
	if info == nil {
		return "indexify " + v
	}
	if mv := info.Main.Version; v == "dev" && mv != "" && mv != "(devel)" {
		v = mv
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	out := "indexify " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		out += " (commit " + rev
		if modified == "true" {
			out += ", modified"
		}
		out += ")"
	} else {
		out += " (no commit: built by go run or go test)"
	}
	return out + " " + info.GoVersion
}
