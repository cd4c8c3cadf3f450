package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/indexify-go/indexify/internal/api"
	"github.com/indexify-go/indexify/internal/coordclient"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// serverFlags are the settings of an API server, shared by `server` and `dev`.
type serverFlags struct {
	apiAddr        string
	blobDir        string
	maxUpload      int64
	requestTimeout time.Duration
	blob           blobFlags
	sec            *securityFlags // tlsflags.go; shared with the other parts in dev
}

func (f *serverFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.apiAddr, "api-addr", ":8900", "listen address of the HTTP API")
	fs.StringVar(&f.blobDir, "blob-dir", "", "directory for content blobs (default: <data-dir>/blobs)")
	fs.Int64Var(&f.maxUpload, "max-upload-bytes", 1<<30, "largest accepted upload in bytes")
	fs.DurationVar(&f.requestTimeout, "request-timeout", 30*time.Second, "deadline of one coordinator call made for an HTTP request")
	f.blob.register(fs)
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
	cfg := api.Config{
		Addr:           f.apiAddr,
		MaxUploadBytes: f.maxUpload,
		Blob:           store,
		Coordinator:    pb.NewCoordinatorServiceClient(conn),
		Cluster:        pb.NewClusterServiceClient(conn),
		Logger:         log.With("component", "api"),
		RequestTimeout: f.requestTimeout,
	}
	if err := f.sec.secureAPI(&cfg, log); err != nil {
		return nil, err
	}
	return api.New(cfg), nil
}

// apiDialOptions are the interceptors of an API server's coordinator
// connection: read consistency from the query string, request ids.
func apiDialOptions() []grpc.DialOption {
	return append([]grpc.DialOption{grpc.WithChainUnaryInterceptor(api.ReadConsistencyInterceptor())}, api.RequestIDInterceptors()...)
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
			conn, err := coordclient.Dial(coordclient.ParseTargets(coordinators), append(opts, apiDialOptions()...)...)
			if err != nil {
				return fmt.Errorf("--coordinator-addr: %w", err)
			}
			defer conn.Close()
			srv, err := f.apiServer(dataDir, conn, log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
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
