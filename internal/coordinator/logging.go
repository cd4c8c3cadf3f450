package coordinator

// Every gRPC call served by a coordinator is logged with its method, the
// request id the API server sent (see internal/requestid), its duration and
// status code, and counted in the node's metrics. Successful calls and
// errors that are the caller's business log at debug (they are the bulk of
// the traffic); failures an operator should notice log at info.
//
// Unavailable (no leader yet, a write that could not commit) is what callers
// retry: at every start the API server and executor retry a few calls until
// the first election ends, and those calls then succeed. So Unavailable logs
// at debug until this node has answered only Unavailable-or-worse for
// unavailableQuiet; a lasting outage then logs every such call at info.

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/requestid"
)

type callLogger struct {
	log *slog.Logger
	m   *nodeMetrics
	// unavailSince is the unix-nano time of the first Unavailable answer
	// since the last successful call (0: the last answer was fine).
	unavailSince *atomic.Int64
}

// unavailableQuiet is how long a streak of Unavailable answers stays at
// debug: longer than the first election of a restarting cluster.
const unavailableQuiet = 30 * time.Second

func newCallLogger(log *slog.Logger, m *nodeMetrics) callLogger {
	return callLogger{log: log, m: m, unavailSince: new(atomic.Int64)}
}

// unavailableLevel is the level of an Unavailable answer at now.
func (c callLogger) unavailableLevel(now time.Time) slog.Level {
	since := c.unavailSince.Load()
	if since == 0 {
		c.unavailSince.CompareAndSwap(0, now.UnixNano())
		return slog.LevelDebug
	}
	if now.Sub(time.Unix(0, since)) < unavailableQuiet {
		return slog.LevelDebug
	}
	return slog.LevelInfo
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
	case codes.OK:
		c.unavailSince.Store(0)
	case codes.NotFound, codes.AlreadyExists, codes.InvalidArgument,
		codes.FailedPrecondition, codes.Canceled:
	case codes.Unavailable:
		level = c.unavailableLevel(time.Now())
	default:
		// A not-leader refusal is routine (the caller retries at the
		// leader); other failures are worth a line.
		if !errcode.IsNotLeader(err) {
			level = slog.LevelInfo
		}
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

// nameLeader: a call whose write this node forwarded to the leader names
// that leader in its answer's trailer (errcode.LeaderTrailer), so the
// client's next call of the method can go there and save the hop.
func nameLeader(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, fwd := cluster.WithForwardNote(ctx)
	resp, err := handler(ctx, req)
	if addr := fwd.Leader(); addr != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(errcode.LeaderTrailer, addr))
	}
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
		grpc.ChainUnaryInterceptor(c.unary, nameLeader),
		grpc.ChainStreamInterceptor(c.stream),
	}
}
