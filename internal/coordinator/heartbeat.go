package coordinator

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Heartbeat is the executor's bidirectional stream: the first message
// registers the executor; internal/push then pushes every task assigned to
// it and reports its liveness.
func (s *Service) Heartbeat(stream pb.CoordinatorService_HeartbeatServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	ex := first.GetExecutor()
	if err := validateExecutor(ex); err != nil {
		return err
	}
	if first.GetExecutorId() != "" && first.GetExecutorId() != ex.GetId() {
		return status.Error(codes.InvalidArgument, "executor_id differs from the registration's id")
	}
	if ex.GetMaxPendingTasks() == 0 {
		ex.MaxPendingTasks = first.GetMaxPendingTasks()
	}
	if _, err := s.apply(ctx, "", &pb.Command{Op: &pb.Command_RegisterExecutor{
		RegisterExecutor: &pb.RegisterExecutorCmd{Executor: ex}}}); err != nil {
		return err
	}
	s.log.Info("executor connected", "executor", ex.GetId(), "extractors", len(ex.GetExtractors()))
	return s.push.Serve(stream, ex.GetId())
}

// Stop marks the node as shutting down: streams that end from now on do not
// ask for their executor's removal (it will reconnect to another node).
func (s *Service) Stop() { s.push.Stop() }

// ConnectedExecutors is the number of executors with a heartbeat stream
// open to this node right now.
func (s *Service) ConnectedExecutors() int { return s.push.Connected() }
