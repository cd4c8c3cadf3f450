// Package coordinator serves the CoordinatorService gRPC API on every
// coordinator node. Reads come from the local replica of the state store
// (after the read barrier the caller asked for); writes become typed commands
// applied through the Raft log, forwarded to the leader by the cluster layer
// when this node is a follower. So any coordinator can answer any call.
package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/push"
	"github.com/indexify-go/indexify/internal/requestid"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Replicator is what the service needs from the Raft layer, the same as
// the push streams need; *cluster.Node implements it.
type Replicator = push.Replicator

// Config tunes the service.
type Config struct {
	// MaxTaskAttempts is how many times a failing task runs before it is
	// marked failed for good.
	MaxTaskAttempts uint32
	// RetryBackoff is the delay before the first retry; it doubles per attempt.
	RetryBackoff time.Duration
	// HeartbeatFlush is how often executor heartbeats seen on this node are
	// written to the log (as one batched command). Must be well below the
	// scheduler's executor timeout.
	HeartbeatFlush time.Duration
	// DisconnectGrace is how long an executor whose stream ended may take to
	// reconnect before this node asks for its removal.
	DisconnectGrace time.Duration
	// MaxUnfinishedTasks: an upload into a namespace with this many
	// unfinished tasks is refused (RESOURCE_EXHAUSTED, HTTP 429). The
	// scheduler holds new tasks back at the same bound (give both the same
	// value); 0 means state.DefaultMaxUnfinishedTasks.
	MaxUnfinishedTasks int
}

func (c *Config) setDefaults() {
	if c.MaxTaskAttempts == 0 {
		c.MaxTaskAttempts = 3
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = time.Second
	}
	if c.HeartbeatFlush == 0 {
		c.HeartbeatFlush = 2 * time.Second
	}
	if c.DisconnectGrace == 0 {
		c.DisconnectGrace = 5 * time.Second
	}
	if c.MaxUnfinishedTasks <= 0 {
		c.MaxUnfinishedTasks = state.DefaultMaxUnfinishedTasks
	}
}

// Service implements pb.CoordinatorServiceServer.
type Service struct {
	pb.UnimplementedCoordinatorServiceServer

	store *state.Store
	raft  Replicator
	cfg   Config
	log   *slog.Logger
	push  *push.Hub
}

// New returns a service reading store and writing through raft.
func New(store *state.Store, raft Replicator, cfg Config, logger *slog.Logger) *Service {
	cfg.setDefaults()
	if logger == nil {
		logger = slog.Default()
	}
	s := &Service{store: store, raft: raft, cfg: cfg, log: logger}
	s.push = push.New(store, raft, push.Config{HeartbeatFlush: cfg.HeartbeatFlush, DisconnectGrace: cfg.DisconnectGrace}, logger)
	return s
}

// Run runs the background work every node does for the executors connected
// to it (batched heartbeats); it returns when ctx ends.
func (s *Service) Run(ctx context.Context) { s.push.Run(ctx) }

// apply commits one command and turns a user error in its result into a gRPC
// status, so callers see InvalidArgument / NotFound / AlreadyExists.
func (s *Service) apply(ctx context.Context, requestID string, cmd *pb.Command) (*pb.CommandResult, error) {
	if requestID == "" {
		requestID = requestid.New()
	}
	cmd.RequestId = requestID
	res, err := s.raft.Apply(ctx, cmd)
	if err != nil {
		return nil, applyError(ctx, err)
	}
	if res.GetErrorCode() != pb.ErrorCode_ERROR_CODE_OK {
		return res, commandStatus(res)
	}
	return res, nil
}

// commandStatus is the gRPC status of a refused command, by the one table
// (internal/errcode); the state code travels as a detail.
func commandStatus(res *pb.CommandResult) error {
	return errcode.Status(res.GetErrorCode(), res.GetError())
}

func (s *Service) read(ctx context.Context, level pb.ReadConsistency) error {
	if err := s.raft.ReadBarrier(ctx, level); err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Errorf(codes.Unavailable, "read not possible at level %s: %v", level, err)
	}
	return nil
}

func applyError(ctx context.Context, err error) error {
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Errorf(codes.Unavailable, "coordinator cannot commit the write: %v", err)
}

// storeError turns an error from a store read into a gRPC status.
func storeError(err error) error {
	var se *state.Error
	if errors.As(err, &se) {
		return status.Error(errcode.GRPC(se.Code), se.Msg)
	}
	return status.Error(codes.Internal, err.Error())
}

func nowMillis() int64 { return time.Now().UnixMilli() }

func (s *Service) requireNamespace(ns string) error {
	if ns == "" {
		return status.Error(codes.InvalidArgument, "namespace is required")
	}
	if _, ok := s.store.Namespace(ns); !ok {
		return status.Errorf(codes.NotFound, "namespace %q not found", ns)
	}
	return nil
}

func (s *Service) requireGraph(ns, graph string) error {
	if err := s.requireNamespace(ns); err != nil {
		return err
	}
	if graph == "" {
		return nil
	}
	if _, ok := s.store.Graph(ns, graph); !ok {
		return status.Errorf(codes.NotFound, "extraction graph %q not found in namespace %q", graph, ns)
	}
	return nil
}
