package coordinator

// Every gRPC call served by a coordinator is logged with its method, the
// request id the API server sent (see internal/requestid), its duration and
// status code, and counted in the node's metrics. Successful calls and
// errors that are the caller's business log at debug (they are the bulk of
// the traffic); failures an operator should notice log at info.

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/requestid"
)

type callLogger struct {
	log *slog.Logger
	m   *nodeMetrics
}

func (c callLogger) done(ctx context.Context, method, reqID string, start time.Time, err error, unary bool) {
	d := time.Since(start)
	code := status.Code(err)
	c.m.grpcRequests.WithLabelValues(method, code.String()).Inc()
	if unary {
		c.m.grpcSeconds.WithLabelValues(method).Observe(d.Seconds())
	}
	level := slog.LevelDebug
	switch code {
	case codes.OK, codes.NotFound, codes.AlreadyExists, codes.InvalidArgument,
		codes.FailedPrecondition, codes.Canceled:
	default:
		level = slog.LevelInfo
	}
	if !c.log.Enabled(ctx, level) {
		return
	}
	attrs := []any{"method", method, "duration", d, "code", code.String()}
	if reqID != "" {
		attrs = append(attrs, "request_id", reqID)
	}
	if err != nil && code != codes.OK {
		attrs = append(attrs, "err", status.Convert(err).Message())
	}
	c.log.Log(ctx, level, "grpc call", attrs...)
}

func (c callLogger) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	id := requestid.FromIncoming(ctx)
	if id != "" {
		ctx = requestid.With(ctx, id)
	}
	resp, err := handler(ctx, req)
	c.done(ctx, info.FullMethod, id, start, err, true)
	return resp, err
}

func (c callLogger) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	id := requestid.FromIncoming(ss.Context())
	err := handler(srv, ss)
	c.done(ss.Context(), info.FullMethod, id, start, err, false)
	return err
}

// serverOptions are the interceptors of the coordinator's gRPC server.
func (c callLogger) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(c.unary),
		grpc.ChainStreamInterceptor(c.stream),
	}
}
