package coordinator

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Unary RPCs: writes build a command, reads pass the read barrier and then
// consult the local store.

func (s *Service) CreateNamespace(ctx context.Context, r *pb.CreateNamespaceRequest) (*pb.CreateNamespaceResponse, error) {
	_, err := s.apply(ctx, r.GetRequestId(), &pb.Command{Op: &pb.Command_CreateNamespace{
		CreateNamespace: &pb.CreateNamespaceCmd{Name: r.GetName()}}})
	if err != nil {
		return nil, err
	}
	return &pb.CreateNamespaceResponse{}, nil
}

func (s *Service) ListNamespaces(ctx context.Context, r *pb.ListNamespacesRequest) (*pb.ListNamespacesResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	return &pb.ListNamespacesResponse{Namespaces: s.store.Namespaces()}, nil
}

func (s *Service) ListExtractors(ctx context.Context, r *pb.ListExtractorsRequest) (*pb.ListExtractorsResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	return &pb.ListExtractorsResponse{Extractors: s.store.Extractors()}, nil
}

func (s *Service) CreateExtractionGraph(ctx context.Context, r *pb.CreateExtractionGraphRequest) (*pb.CreateExtractionGraphResponse, error) {
	g := r.GetGraph()
	if g == nil {
		return nil, status.Error(codes.InvalidArgument, "graph is required")
	}
	if _, err := s.apply(ctx, r.GetRequestId(), &pb.Command{Op: &pb.Command_CreateGraph{
		CreateGraph: &pb.CreateExtractionGraphCmd{Graph: g}}}); err != nil {
		return nil, err
	}
	// The FSM fills ids; answer with what it stored. After a forwarded write
	// the local replica may lag, so fall back to the request.
	if stored, ok := s.store.Graph(g.GetNamespace(), g.GetName()); ok {
		return &pb.CreateExtractionGraphResponse{Graph: stored}, nil
	}
	return &pb.CreateExtractionGraphResponse{Graph: g}, nil
}

func (s *Service) ListExtractionGraphs(ctx context.Context, r *pb.ListExtractionGraphsRequest) (*pb.ListExtractionGraphsResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	if err := s.requireNamespace(r.GetNamespace()); err != nil {
		return nil, err
	}
	return &pb.ListExtractionGraphsResponse{Graphs: s.store.Graphs(r.GetNamespace())}, nil
}

func (s *Service) DeleteExtractionGraph(ctx context.Context, r *pb.DeleteExtractionGraphRequest) (*pb.DeleteExtractionGraphResponse, error) {
	_, err := s.apply(ctx, r.GetRequestId(), &pb.Command{Op: &pb.Command_DeleteGraph{
		DeleteGraph: &pb.DeleteExtractionGraphCmd{Namespace: r.GetNamespace(), Name: r.GetName()}}})
	if err != nil {
		return nil, err
	}
	return &pb.DeleteExtractionGraphResponse{}, nil
}

func (s *Service) CreateGraphLink(ctx context.Context, r *pb.CreateGraphLinkRequest) (*pb.CreateGraphLinkResponse, error) {
	if r.GetLink() == nil {
		return nil, status.Error(codes.InvalidArgument, "link is required")
	}
	_, err := s.apply(ctx, r.GetRequestId(), &pb.Command{Op: &pb.Command_CreateLink{
		CreateLink: &pb.CreateGraphLinkCmd{Link: r.GetLink()}}})
	if err != nil {
		return nil, err
	}
	return &pb.CreateGraphLinkResponse{}, nil
}

func (s *Service) ListGraphLinks(ctx context.Context, r *pb.ListGraphLinksRequest) (*pb.ListGraphLinksResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	if err := s.requireGraph(r.GetNamespace(), r.GetGraphName()); err != nil {
		return nil, err
	}
	return &pb.ListGraphLinksResponse{Links: s.store.Links(r.GetNamespace(), r.GetGraphName())}, nil
}

func (s *Service) GetAnalytics(ctx context.Context, r *pb.GetAnalyticsRequest) (*pb.GetAnalyticsResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	if err := s.requireGraph(r.GetNamespace(), r.GetGraphName()); err != nil {
		return nil, err
	}
	return &pb.GetAnalyticsResponse{Policies: s.store.Analytics(r.GetNamespace(), r.GetGraphName())}, nil
}

func (s *Service) CreateContent(ctx context.Context, r *pb.CreateContentRequest) (*pb.CreateContentResponse, error) {
	if len(r.GetContents()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no content given")
	}
	if err := s.admitUploads(r.GetContents()); err != nil {
		return nil, err
	}
	res, err := s.apply(ctx, r.GetRequestId(), &pb.Command{Op: &pb.Command_CreateContent{
		CreateContent: &pb.CreateContentCmd{Contents: r.GetContents()}}})
	if err != nil {
		return nil, err
	}
	return &pb.CreateContentResponse{Contents: res.GetContents()}, nil
}

// admitUploads refuses uploads (content without a parent) into a namespace
// that has MaxUnfinishedTasks unfinished tasks: the scheduler holds its
// new tasks back anyway, so accepting more would only grow the backlog of
// content waiting to be planned. Read from this node's replica, a counter
// the FSM keeps; no FSM rule (a follower's slightly stale count only moves
// the moment of refusal). Task results are never refused here.
func (s *Service) admitUploads(contents []*pb.Content) error {
	for _, c := range contents {
		if c.GetParentId() != "" {
			continue
		}
		if n := s.store.UnfinishedTasks(c.GetNamespace()); n >= s.cfg.MaxUnfinishedTasks {
			return status.Errorf(codes.ResourceExhausted,
				"namespace %q has %d unfinished tasks (the limit is %d); retry the upload once some have run",
				c.GetNamespace(), n, s.cfg.MaxUnfinishedTasks)
		}
	}
	return nil
}

// pageLimit applies the page-size rule of every list call (wire.PageLimit,
// the HTTP API's too): 0 is the default page, not "everything".
func pageLimit(n uint32) (uint32, error) {
	limit, err := wire.PageLimit(uint64(n))
	if err != nil {
		return 0, status.Error(codes.InvalidArgument, err.Error())
	}
	return limit, nil
}

func (s *Service) GetContent(ctx context.Context, r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	if err := s.requireNamespace(r.GetNamespace()); err != nil {
		return nil, err
	}
	out := make([]*pb.Content, 0, len(r.GetIds()))
	for _, id := range r.GetIds() {
		if v := r.GetVersion(); v != 0 {
			c, ok := s.store.ContentVersion(r.GetNamespace(), id, v)
			if !ok {
				return nil, status.Errorf(codes.NotFound, "version %d of content %q not found in namespace %q", v, id, r.GetNamespace())
			}
			out = append(out, c)
			continue
		}
		c, ok := s.store.Content(r.GetNamespace(), id)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "content %q not found in namespace %q", id, r.GetNamespace())
		}
		out = append(out, c)
	}
	return &pb.GetContentResponse{Contents: out}, nil
}

func (s *Service) ListContent(ctx context.Context, r *pb.ListContentRequest) (*pb.ListContentResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	if err := s.requireGraph(r.GetNamespace(), r.GetGraphName()); err != nil {
		return nil, err
	}
	limit, err := pageLimit(r.GetLimit())
	if err != nil {
		return nil, err
	}
	items, total, err := s.store.ListContent(state.ContentQuery{
		Namespace: r.GetNamespace(),
		Graph:     r.GetGraphName(),
		Source:    r.GetSource(),
		ParentID:  r.GetParentId(),
		RootID:    r.GetIngestedContentId(),
		Labels:    r.GetLabelsFilter(),
		StartID:   r.GetStartId(),
		Limit:     int(limit),
	})
	if err != nil {
		return nil, storeError(err)
	}
	return &pb.ListContentResponse{Contents: items, Total: total}, nil
}

func (s *Service) GetContentTree(ctx context.Context, r *pb.GetContentTreeRequest) (*pb.GetContentTreeResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	if err := s.requireGraph(r.GetNamespace(), r.GetGraphName()); err != nil {
		return nil, err
	}
	if _, ok := s.store.Content(r.GetNamespace(), r.GetContentId()); !ok {
		return nil, status.Errorf(codes.NotFound, "content %q not found in namespace %q", r.GetContentId(), r.GetNamespace())
	}
	return &pb.GetContentTreeResponse{Contents: s.store.ContentTree(r.GetNamespace(), r.GetContentId())}, nil
}

func (s *Service) UpdateLabels(ctx context.Context, r *pb.UpdateLabelsRequest) (*pb.UpdateLabelsResponse, error) {
	_, err := s.apply(ctx, r.GetRequestId(), &pb.Command{Op: &pb.Command_UpdateLabels{
		UpdateLabels: &pb.UpdateLabelsCmd{Namespace: r.GetNamespace(), ContentId: r.GetContentId(), Labels: r.GetLabels()}}})
	if err != nil {
		return nil, err
	}
	return &pb.UpdateLabelsResponse{}, nil
}

func (s *Service) TombstoneContent(ctx context.Context, r *pb.TombstoneContentRequest) (*pb.TombstoneContentResponse, error) {
	if len(r.GetContentIds()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "content_ids is empty")
	}
	_, err := s.apply(ctx, r.GetRequestId(), &pb.Command{Op: &pb.Command_TombstoneContent{
		TombstoneContent: &pb.TombstoneContentCmd{Namespace: r.GetNamespace(), ContentIds: r.GetContentIds()}}})
	if err != nil {
		return nil, err
	}
	return &pb.TombstoneContentResponse{}, nil
}

// WaitContent blocks until the content's extraction is finished or the
// caller's deadline passes (then it answers done=false, not an error, so a
// client can simply call again).
func (s *Service) WaitContent(ctx context.Context, r *pb.WaitContentRequest) (*pb.WaitContentResponse, error) {
	if err := s.requireNamespace(r.GetNamespace()); err != nil {
		return nil, err
	}
	for {
		watch := s.store.Watch()
		done, err := s.store.ContentDone(r.GetNamespace(), r.GetContentId())
		if err != nil {
			return nil, storeError(err)
		}
		if done {
			return &pb.WaitContentResponse{Done: true}, nil
		}
		select {
		case <-watch:
		case <-ctx.Done():
			return &pb.WaitContentResponse{Done: false}, nil
		}
	}
}

// WatchContent streams content as it is created, until the client leaves.
func (s *Service) WatchContent(r *pb.WatchContentRequest, stream pb.CoordinatorService_WatchContentServer) error {
	if err := s.requireGraph(r.GetNamespace(), r.GetGraphName()); err != nil {
		return err
	}
	after := r.GetAfterOffset()
	ctx := stream.Context()
	for {
		watch := s.store.Watch()
		for _, c := range s.store.ContentSince(r.GetNamespace(), r.GetGraphName(), r.GetPolicy(), after, 256) {
			if err := stream.Send(c); err != nil {
				return err
			}
			after = c.GetChangeOffset()
		}
		select {
		case <-watch:
		case <-ctx.Done():
			return nil
		}
	}
}

func (s *Service) ListTasks(ctx context.Context, r *pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	if err := s.requireGraph(r.GetNamespace(), r.GetGraphName()); err != nil {
		return nil, err
	}
	limit, err := pageLimit(r.GetLimit())
	if err != nil {
		return nil, err
	}
	tasks, total := s.store.ListTasks(state.TaskQuery{
		Namespace: r.GetNamespace(),
		Graph:     r.GetGraphName(),
		Policy:    r.GetPolicy(),
		ContentID: r.GetContentId(),
		StartID:   r.GetStartId(),
		Limit:     int(limit),
	})
	return &pb.ListTasksResponse{Tasks: tasks, Total: total}, nil
}

func (s *Service) GetTask(ctx context.Context, r *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	t, ok := s.store.Task(r.GetTaskId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "task %q not found", r.GetTaskId())
	}
	return &pb.GetTaskResponse{Task: t}, nil
}

func (s *Service) CompleteTask(ctx context.Context, r *pb.CompleteTaskRequest) (*pb.CompleteTaskResponse, error) {
	if r.GetOutcome() == pb.TaskOutcome_TASK_OUTCOME_UNKNOWN {
		return nil, status.Error(codes.InvalidArgument, "outcome must be success or failed")
	}
	// One command: outcome, features and children are applied together by
	// the FSM under the executor fence (internal/state/ops_complete.go).
	res, err := s.apply(ctx, r.GetRequestId(), &pb.Command{Op: &pb.Command_CompleteTaskV2{CompleteTaskV2: &pb.CompleteTaskCmd{
		TaskId:      r.GetTaskId(),
		ExecutorId:  r.GetExecutorId(),
		Outcome:     r.GetOutcome(),
		Error:       r.GetError(),
		Features:    r.GetFeatures(),
		MaxAttempts: s.cfg.MaxTaskAttempts,
		BackoffMs:   s.cfg.RetryBackoff.Milliseconds(),
		Children:    r.GetChildren(),
	}}})
	if err != nil {
		return nil, err
	}
	return &pb.CompleteTaskResponse{Contents: res.GetContents(), Duplicate: res.GetNoop()}, nil
}

func (s *Service) RegisterExecutor(ctx context.Context, r *pb.RegisterExecutorRequest) (*pb.RegisterExecutorResponse, error) {
	if err := validateExecutor(r.GetExecutor()); err != nil {
		return nil, err
	}
	_, err := s.apply(ctx, "", &pb.Command{Op: &pb.Command_RegisterExecutor{
		RegisterExecutor: &pb.RegisterExecutorCmd{Executor: r.GetExecutor()}}})
	if err != nil {
		return nil, err
	}
	return &pb.RegisterExecutorResponse{}, nil
}

func validateExecutor(e *pb.Executor) error {
	if e == nil || e.GetId() == "" {
		return status.Error(codes.InvalidArgument, "executor id is required")
	}
	for _, x := range e.GetExtractors() {
		if x.GetName() == "" {
			return status.Error(codes.InvalidArgument, "every extractor needs a name")
		}
	}
	return nil
}

func (s *Service) ListExecutors(ctx context.Context, r *pb.ListExecutorsRequest) (*pb.ListExecutorsResponse, error) {
	if err := s.read(ctx, r.GetConsistency()); err != nil {
		return nil, err
	}
	return &pb.ListExecutorsResponse{Executors: s.store.Executors()}, nil
}

func (s *Service) ListGCTasks(ctx context.Context, r *pb.ListGCTasksRequest) (*pb.ListGCTasksResponse, error) {
	limit := int(r.GetLimit())
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	return &pb.ListGCTasksResponse{Tasks: s.store.GCTasks(limit)}, nil
}

func (s *Service) AckGCTasks(ctx context.Context, r *pb.AckGCTasksRequest) (*pb.AckGCTasksResponse, error) {
	if len(r.GetIds()) == 0 {
		return &pb.AckGCTasksResponse{}, nil
	}
	_, err := s.apply(ctx, r.GetRequestId(), &pb.Command{Op: &pb.Command_AckGcTasks{
		AckGcTasks: &pb.AckGCTasksCmd{Ids: r.GetIds()}}})
	if err != nil {
		return nil, err
	}
	return &pb.AckGCTasksResponse{}, nil
}
