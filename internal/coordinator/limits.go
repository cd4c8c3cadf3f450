package coordinator

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// DefaultMaxConcurrentStreams caps concurrent calls per client connection.
// An API server multiplexes all its users' requests (including long /wait
// and event streams) over one connection, so the cap is generous; its job
// is to stop a single hostile connection from opening unbounded streams.
const DefaultMaxConcurrentStreams = 1024

// grpcServerOptions are the options of the coordinator's gRPC server:
// resource caps, then the cluster's authentication, then the caller's
// (TLS credentials).
func grpcServerOptions(cfg ServerConfig, extra ...grpc.ServerOption) []grpc.ServerOption {
	streams := cfg.MaxConcurrentStreams
	if streams == 0 {
		streams = DefaultMaxConcurrentStreams
	}
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(streams),
		// Drop connections that stop answering pings (half-open after a
		// node died) instead of keeping their streams forever.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
		// Clients ping every 10 s when idle (coordclient/dial.go); the
		// minimum allowed is half that, so a ping that arrives a little
		// early is never a strike (strikes end in a GOAWAY that breaks
		// every stream of the connection), while floods are refused.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// Handshakes (TLS) that do not finish in time are dropped.
		grpc.ConnectionTimeout(10 * time.Second),
	}
	opts = append(opts, extra...)
	return append(opts, cfg.GRPCServerOptions...)
}
