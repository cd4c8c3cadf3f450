package api

// The executor result route: executors upload extracted content and report
// the task outcome here; metadata is forwarded to the coordinator.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sort"
	"time"

	"github.com/indexify-go/indexify/internal/executor"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// maxResultJSON bounds the `result` field: features (embeddings) are inline.
const maxResultJSON = 64 << 20

// taskResult: POST /internal/executors/{executor_id}/tasks/{task_id}/result.
//
// Order of work: check the task is still this executor's (a stale executor
// gets 409 before uploading anything), stage child blobs, create the child
// content (deterministic ids, so a retried upload dedups), then complete the
// task. Children are committed before the outcome so the scheduler never
// sees a finished task whose outputs are missing.
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
	children := make([]*pb.Content, 0, len(res.Content))
	ids := make([]string, 0, len(res.Content))
	for _, rc := range res.Content {
		children = append(children, s.childContent(task, rc, staged[rc.Index]))
		ids = append(ids, children[len(children)-1].GetId())
	}
	if len(children) > 0 {
		if _, err := s.commitContents(r.Context(), children); err != nil {
			return err
		}
	}
	outcome := pb.TaskOutcome_TASK_OUTCOME_SUCCESS
	if res.Outcome == executor.OutcomeFailed {
		outcome = pb.TaskOutcome_TASK_OUTCOME_FAILED
	}
	reqID := newRequestID()
	if _, err := call(context.WithoutCancel(r.Context()), s, func(ctx context.Context) (*pb.CompleteTaskResponse, error) {
		return s.cfg.Coordinator.CompleteTask(ctx, &pb.CompleteTaskRequest{
			TaskId:     taskID,
			ExecutorId: executorID,
			Outcome:    outcome,
			Error:      res.Error,
			Features:   executor.FeaturesToProto(res.Features, task.GetPolicyName()),
			RequestId:  reqID,
		})
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"task_id": taskID, "content_ids": ids})
	return nil
}

func (s *Server) childContent(task *pb.Task, rc executor.ResultContent, f *stagedFile) *pb.Content {
	root := task.GetContent().GetRootContentId()
	if root == "" {
		root = task.GetContentId()
	}
	mt := mediaType(rc.MimeType)
	if mt == "" {
		mt = f.mimeType
	}
	id := childContentID(task.GetId(), rc.Index)
	return &pb.Content{
		Id:            id,
		Namespace:     task.GetNamespace(),
		ParentId:      task.GetContentId(),
		RootContentId: root,
		Name:          id,
		MimeType:      mt,
		Labels:        executor.LabelsToProto(rc.Labels),
		StorageUrl:    f.info.URL,
		CreatedAt:     time.Now().UnixMilli(),
		Source:        task.GetPolicyName(),
		SizeBytes:     uint64(f.info.Size),
		Hash:          f.info.SHA256,
		GraphNames:    []string{task.GetGraphName()},
		SourceTaskId:  task.GetId(),
		Features:      executor.FeaturesToProto(rc.Features, task.GetPolicyName()),
	}
}

// receiveResult reads the multipart upload: the `result` JSON field and one
// file part per child content, in any order. Child blobs are staged as they
// stream in; on any error they are all deleted.
func (s *Server) receiveResult(w http.ResponseWriter, r *http.Request, task *pb.Task) (*executor.TaskResult, map[int]*stagedFile, error) {
	limit := s.cfg.MaxUploadBytes + maxResultJSON
	if r.ContentLength > limit {
		return nil, nil, tooLarge(limit)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, badRequest(codeInvalidMultipart, "expected a multipart/form-data body with a %q part: %v", executor.ResultField, err)
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
		if name == executor.ResultField {
			if resultJSON != nil {
				err = badRequest(codeInvalidMultipart, "more than one %q part", name)
			} else {
				resultJSON, err = io.ReadAll(io.LimitReader(part, maxResultJSON+1))
				err = partReadError(err, limit)
				if err == nil && len(resultJSON) > maxResultJSON {
					err = tooLarge(maxResultJSON)
				}
			}
		} else if i, isContent := executor.ParseContentPartName(name); isContent {
			if staged[i] != nil {
				err = badRequest(codeInvalidMultipart, "more than one %q part", name)
			} else {
				var f *stagedFile
				f, err = s.stage(r.Context(), task.GetNamespace(), childContentID(task.GetId(), i), part, part.Header.Get("Content-Type"), "", codeInvalidMultipart)
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
		return nil, nil, badRequest(codeInvalidMultipart, "multipart body has no %q part", executor.ResultField)
	}
	res, err := executor.ParseTaskResult(resultJSON)
	if err != nil {
		return nil, nil, badRequest(codeInvalidArgument, "%v", err)
	}
	want := make(map[int]bool, len(res.Content))
	for _, c := range res.Content {
		want[c.Index] = true
		if staged[c.Index] == nil {
			return nil, nil, badRequest(codeMissingFile, "content index %d has no %q part", c.Index, executor.ContentPartName(c.Index))
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
		return nil, nil, badRequest(codeInvalidMultipart, "part %q has no entry in the result's content list", executor.ContentPartName(extra[0]))
	}
	ok = true
	return res, staged, nil
}
