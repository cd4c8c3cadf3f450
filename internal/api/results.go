package api

// The executor result route: executors upload extracted content and report
// the task outcome here; metadata is forwarded to the coordinator.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sort"

	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// maxResultJSON bounds the `result` field: features (embeddings) are inline.
const maxResultJSON = 64 << 20

// taskResult: POST wire.ResultRoute.
//
// Order of work: read the task (a stale executor gets 409 before uploading
// anything; the read is only an early answer, not the fence), stage child
// blobs under fresh random keys, then send ONE CompleteTask carrying the
// outcome, features and children. The coordinator's state machine applies
// it atomically under the executor fence: a stale executor publishes
// nothing, the same result again is a no-op (200, "duplicate": true), and
// a different result for a finished task is 409 task_already_completed.
// Blobs of a refused result, and the second copies of a repeat, are
// deleted; after an ambiguous failure (the write may have applied) they
// are kept if the coordinator references them.
func (s *Server) taskResult(w http.ResponseWriter, r *http.Request) error {
	executorID, taskID := r.PathValue("executor_id"), r.PathValue("task_id")
	if err := validateIDs("executor id", executorID, "task id", taskID); err != nil {
		return err
	}
	// Linearizable: the executor learned of the assignment from the leader,
	// and a lagging replica must not make us reject a valid result.
	resp, err := call(r.Context(), s, func(ctx context.Context) (*pb.GetTaskResponse, error) {
		return s.cfg.Coordinator.GetTask(ctx, &pb.GetTaskRequest{TaskId: taskID, Consistency: pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE})
	})
	if err != nil {
		return err
	}
	task := resp.GetTask()
	if task == nil {
		return notFound("task %q not found", taskID)
	}
	if task.GetExecutorId() != executorID {
		return newError(http.StatusConflict, codeConflict, "task %q is not assigned to executor %q", taskID, executorID)
	}

	res, staged, err := s.receiveResult(w, r, task)
	if err != nil {
		return err
	}
	// Children in index order: child i is ChildContentID(task, i) in the FSM.
	ordered := make([]wire.ResultContent, len(res.Content))
	for _, rc := range res.Content {
		ordered[rc.Index] = rc
	}
	children := make([]*pb.Content, 0, len(ordered))
	ids := make([]string, 0, len(ordered))
	for _, rc := range ordered {
		children = append(children, childContent(task, rc, staged[rc.Index]))
		ids = append(ids, children[len(children)-1].GetId())
	}
	outcome := pb.TaskOutcome_TASK_OUTCOME_SUCCESS
	if res.Outcome == wire.OutcomeFailed {
		outcome = pb.TaskOutcome_TASK_OUTCOME_FAILED
	}
	// Once bytes are stored, finish the commit even if the client leaves.
	ctx := context.WithoutCancel(r.Context())
	features := wire.FeaturesToProto(res.Features, task.GetPolicyName())
	if outcome == pb.TaskOutcome_TASK_OUTCOME_SUCCESS && task.GetOutcome() == pb.TaskOutcome_TASK_OUTCOME_UNKNOWN {
		// Vectors and metadata rows go to the retrieval stores before the
		// completion, so a finished task's features are searchable; a store
		// outage is a 503 and the executor retries. A task that already
		// finished never writes them again (a repeat changes nothing, a
		// forged result is refused below and must not touch the stores).
		if err := s.storeFeatures(ctx, task, featureTargets(task, features, children)); err != nil {
			for _, c := range children {
				s.discard(ctx, c.GetStorageUrl())
			}
			return err
		}
	}
	// The Raft state keeps a reference to each embedding, not the vector.
	features = withoutVectors(task, features)
	for _, c := range children {
		c.Features = withoutVectors(task, c.GetFeatures())
	}
	reqID := newRequestID()
	done, err := call(ctx, s, func(ctx context.Context) (*pb.CompleteTaskResponse, error) {
		return s.cfg.Coordinator.CompleteTask(ctx, &pb.CompleteTaskRequest{
			TaskId:     taskID,
			ExecutorId: executorID,
			Outcome:    outcome,
			Error:      res.Error,
			Features:   features,
			RequestId:  reqID,
			Children:   children,
		})
	})
	if err != nil {
		for _, c := range children {
			// Children carry no namespace (the FSM sets it): probe with it.
			probe := &pb.Content{Id: c.GetId(), Namespace: task.GetNamespace(), StorageUrl: c.GetStorageUrl()}
			if !errcode.NotApplied(err) && s.referenced(ctx, probe) {
				continue
			}
			s.discard(ctx, c.GetStorageUrl())
		}
		return err
	}
	refs := done.GetContents()
	for i, c := range children {
		// A repeat (or a child whose bytes were already stored) keeps the
		// first blob; without a ref the effect is unknown and the blob stays.
		if i < len(refs) && refs[i].GetId() == c.GetId() && !refs[i].GetCreated() {
			s.discard(ctx, c.GetStorageUrl())
		}
	}
	writeJSON(w, http.StatusOK, wire.ResultAccepted{TaskID: taskID, ContentIDs: ids, Duplicate: done.GetDuplicate()})
	return nil
}

// childContent is what the executor decides about one child: bytes
// metadata, labels and features. Where it belongs (namespace, parent, root,
// source, graph, source task, creation time) is set by the state machine
// from the task, so a result cannot place content elsewhere.
func childContent(task *pb.Task, rc wire.ResultContent, f *stagedFile) *pb.Content {
	mt := mediaType(rc.MimeType)
	if mt == "" {
		mt = f.mimeType
	}
	return &pb.Content{
		Id:         state.ChildContentID(task.GetId(), rc.Index),
		MimeType:   mt,
		Labels:     wire.LabelsToProto(rc.Labels),
		StorageUrl: f.info.URL,
		SizeBytes:  uint64(f.info.Size),
		Hash:       f.info.SHA256,
		Features:   wire.FeaturesToProto(rc.Features, task.GetPolicyName()),
	}
}

// receiveResult reads the multipart upload: the `result` JSON field and one
// file part per child content, in any order. Child blobs are staged as they
// stream in; on any error they are all deleted.
func (s *Server) receiveResult(w http.ResponseWriter, r *http.Request, task *pb.Task) (*wire.TaskResult, map[int]*stagedFile, error) {
	limit := s.cfg.MaxUploadBytes + maxResultJSON
	if r.ContentLength > limit {
		return nil, nil, tooLarge(limit)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, badRequest(codeInvalidMultipart, "expected a multipart/form-data body with a %q part: %v", wire.ResultField, err)
	}
	staged := make(map[int]*stagedFile)
	ok := false
	defer func() {
		if !ok {
			for _, f := range staged {
				s.discard(r.Context(), f.info.URL)
			}
		}
	}()
	var resultJSON []byte
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, nil, tooLarge(limit)
			}
			return nil, nil, badRequest(codeInvalidMultipart, "malformed multipart body: %v", err)
		}
		name := part.FormName()
		if name == wire.ResultField {
			if resultJSON != nil {
				err = badRequest(codeInvalidMultipart, "more than one %q part", name)
			} else {
				resultJSON, err = io.ReadAll(io.LimitReader(part, maxResultJSON+1))
				err = partReadError(err, limit)
				if err == nil && len(resultJSON) > maxResultJSON {
					err = tooLarge(maxResultJSON)
				}
			}
		} else if i, isContent := wire.ParseContentPartName(name); isContent {
			if staged[i] != nil {
				err = badRequest(codeInvalidMultipart, "more than one %q part", name)
			} else {
				var f *stagedFile
				f, err = s.stage(r.Context(), task.GetNamespace(), state.ChildContentID(task.GetId(), i), part, part.Header.Get("Content-Type"), "", codeInvalidMultipart)
				if f != nil {
					staged[i] = f
				}
			}
		} else {
			_, err = io.Copy(io.Discard, part)
			err = partReadError(err, limit)
		}
		part.Close()
		if err != nil {
			return nil, nil, err
		}
	}
	if resultJSON == nil {
		return nil, nil, badRequest(codeInvalidMultipart, "multipart body has no %q part", wire.ResultField)
	}
	res, err := wire.ParseTaskResult(resultJSON)
	if err != nil {
		return nil, nil, badRequest(codeInvalidArgument, "%v", err)
	}
	if res.Outcome == wire.OutcomeFailed && len(res.Content) > 0 {
		return nil, nil, badRequest(codeInvalidArgument, "a failed result has no child content")
	}
	want := make(map[int]bool, len(res.Content))
	for _, c := range res.Content {
		want[c.Index] = true
		if staged[c.Index] == nil {
			return nil, nil, badRequest(codeMissingFile, "content index %d has no %q part", c.Index, wire.ContentPartName(c.Index))
		}
	}
	var extra []int
	for i := range staged {
		if !want[i] {
			extra = append(extra, i)
		}
	}
	if len(extra) > 0 {
		sort.Ints(extra)
		return nil, nil, badRequest(codeInvalidMultipart, "part %q has no entry in the result's content list", wire.ContentPartName(extra[0]))
	}
	ok = true
	return res, staged, nil
}
