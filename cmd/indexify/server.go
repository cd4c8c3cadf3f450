package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/indexify-go/indexify/internal/api"
	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/remotefetch"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// serverFlags are the settings of an API server, shared by `server` and `dev`.
type serverFlags struct {
	apiAddr        string
	blobDir        string
	maxUpload      int64
	requestTimeout time.Duration
	fetchAllow     []string
	fetchTimeout   time.Duration
	limits         api.Limits
	blob           blobFlags
	stores         storeFlags
	extractors     *extractorsConfig // executor.go: its openai_embedding section; shared with the executor in dev
	sec            *securityFlags    // tlsflags.go; shared with the other parts in dev
}

func (f *serverFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.apiAddr, "api-addr", ":8900", "listen address of the HTTP API")
	fs.StringVar(&f.blobDir, "blob-dir", "", "directory for content blobs (default: <data-dir>/blobs)")
	fs.Int64Var(&f.maxUpload, "max-upload-bytes", 1<<30, "largest accepted upload in bytes")
	fs.DurationVar(&f.requestTimeout, "request-timeout", 30*time.Second, "deadline of one coordinator call made for an HTTP request")
	fs.StringSliceVar(&f.fetchAllow, "remote-fetch-allow", nil, "CIDRs ingest_remote_file may fetch from although they are refused by default (loopback, private, link-local, CGNAT, ...), e.g. 10.1.0.0/16")
	fs.DurationVar(&f.fetchTimeout, "remote-fetch-timeout", remotefetch.DefaultTimeout, "deadline of one whole ingest_remote_file download (connect, redirects, body)")
	fs.IntVar(&f.limits.MaxConcurrentUploads, "max-concurrent-uploads", 64, "uploads (files, new versions, remote ingests, task results) in progress at once; more get 429")
	fs.IntVar(&f.limits.MaxUploadsPerClient, "max-uploads-per-client", 0, "uploads in progress at once from one client: an IPv4 address or an IPv6 /64 (default: half of --max-concurrent-uploads; behind a proxy hiding client IPs set it to --max-concurrent-uploads)")
	fs.Int64Var(&f.limits.MinUploadRate, "upload-min-rate", 1024, "bytes/s an upload body must average after its first 30 s, or it is cut off with 408")
	f.blob.register(fs)
	f.stores.register(fs)
	f.extractors = ensureExtractorsConfig(f.extractors)
	f.extractors.register(fs)
	f.sec = ensureSecurity(f.sec)
	f.sec.registerTLS(fs)
	f.sec.registerAPITokens(fs)
	f.sec.registerClusterSecret(fs) // GET /cluster calls ClusterService.Status
}

// startAPI builds the API server over a coordinator connection.
func (f *serverFlags) apiServer(dataDir string, conn *grpc.ClientConn, log *slog.Logger) (*api.Server, error) {
	store, err := f.blob.open(f.blobDir, dataDir, log)
	if err != nil {
		return nil, fmt.Errorf("blob storage: %w", err)
	}
	allow, err := remotefetch.ParseAllow(f.fetchAllow)
	if err != nil {
		return nil, fmt.Errorf("--remote-fetch-allow: %w", err)
	}
	openai, err := f.extractors.openAIDefaults()
	if err != nil {
		return nil, err
	}
	vec, sql, err := f.stores.open(dataDir, log)
	if err != nil {
		return nil, err
	}
	cfg := api.Config{
		Index:          vec,
		Structured:     sql,
		OpenAI:         openai,
		Addr:           f.apiAddr,
		MaxUploadBytes: f.maxUpload,
		Blob:           store,
		Coordinator:    pb.NewCoordinatorServiceClient(conn),
		Cluster:        pb.NewClusterServiceClient(conn),
		Logger:         log.With("component", "api"),
		RequestTimeout: f.requestTimeout,
		RemoteFetch:    remotefetch.Policy{Allow: allow, Timeout: f.fetchTimeout},
		Limits:         f.limits,
	}
	if err := f.sec.secureAPI(&cfg, log); err != nil {
		return nil, err
	}
	return api.New(cfg), nil
}

// apiDialOptions are the interceptors of an API server's coordinator
// connection: request ids.
func apiDialOptions() []grpc.DialOption { return api.RequestIDInterceptors() }

// logRetries logs, at debug level, every coordinator call that was not
// answered at its first try: each failed try (where it went, how long it
// waited before it) and the try that succeeded, so an operator can see
// where a slow request spent its time during a failover.
func logRetries(log *slog.Logger) grpc.DialOption {
	return coordclient.OnAttempt(func(a coordclient.Attempt) {
		if (a.Err == nil && a.N == 1) || !log.Enabled(context.Background(), slog.LevelDebug) {
			return
		}
		target := a.Target
		if target == "" {
			target = "balanced"
		}
		log.Debug("coordinator call try", "method", a.Method, "try", a.N, "target", target,
			"waited", a.Waited, "err", a.Err)
	})
}

func newServerCmd() *cobra.Command {
	f := &serverFlags{}
	var coordinators, dataDir string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the HTTP API server (stateless; talks to any coordinator)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.Default()
			opts, err := f.sec.dialOptions(log, true)
			if err != nil {
				return err
			}
			targets := coordclient.ParseTargets(coordinators)
			f.sec.warnCoordinatorExposure(log, targets)
			conn, err := coordclient.Dial(targets, append(append(opts, apiDialOptions()...), logRetries(log))...)
			if err != nil {
				return fmt.Errorf("--coordinator-addr: %w", err)
			}
			defer conn.Close()
			srv, err := f.apiServer(dataDir, conn, log)
			if err != nil {
				return err
			}
			defer srv.Close()
			ctx, stop := processContext()
			defer stop()
			go func() {
				if err := srv.EnsureDefaultNamespace(ctx); err != nil && ctx.Err() == nil {
					log.Warn("could not create the default namespace", "err", err)
				}
			}()
			return srv.Run(ctx)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&coordinators, "coordinator-addr", "localhost:8950", "coordinators to use: comma list of HOST:PORT and/or dns:NAME:PORT")
	cmd.Flags().StringVar(&dataDir, "data-dir", "/var/lib/indexify", "directory for local data (blobs by default)")
	return cmd
}
