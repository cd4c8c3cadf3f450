package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func sampleTask() *pb.Task {
	return &pb.Task{
		Id: "task1", Extractor: "chunker", PolicyName: "chunks", GraphName: "g1", Namespace: "ns",
		ContentId: "parent", ContentVersion: 1, ExecutorId: "ex1",
		Content: &pb.Content{Id: "parent", RootContentId: "root"},
	}
}

func withTask(e *env, task *pb.Task) {
	on(e.fake, "GetTask", func(r *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
		if r.GetTaskId() != task.GetId() {
			return nil, status.Errorf(codes.NotFound, "task %q not found", r.GetTaskId())
		}
		return &pb.GetTaskResponse{Task: task}, nil
	})
	completeAs(e, true)
}

// completeAs answers CompleteTask with one ref per child; created=false is
// the coordinator's answer to a repeated result.
func completeAs(e *env, created bool) {
	on(e.fake, "CompleteTask", func(r *pb.CompleteTaskRequest) (*pb.CompleteTaskResponse, error) {
		resp := &pb.CompleteTaskResponse{Duplicate: !created}
		for _, c := range r.GetChildren() {
			resp.Contents = append(resp.Contents, &pb.ContentRef{Id: c.GetId(), Version: 1, Created: created})
		}
		return resp, nil
	})
}

func resultPart(t *testing.T, res wire.TaskResult) formPart {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return formPart{name: wire.ResultField, data: b}
}

func contentPart(i int, data string) formPart {
	return formPart{name: wire.ContentPartName(i), filename: "blob", data: []byte(data)}
}

func TestTaskResultSuccess(t *testing.T) {
	e := newEnv(t)
	withTask(e, sampleTask())
	acceptContent(e, true)
	res := wire.TaskResult{
		Outcome:  wire.OutcomeSuccess,
		Features: []wire.ResultFeature{{Name: "summary", Value: json.RawMessage(`{"words":3}`)}},
		Content: []wire.ResultContent{
			{Index: 0, MimeType: "text/plain", Labels: map[string]json.RawMessage{"chunk": json.RawMessage(`0`)},
				Features: []wire.ResultFeature{{Name: "embedding", Embedding: true, Value: json.RawMessage(`[1,2]`)}}},
			{Index: 1, MimeType: "text/plain; charset=utf-8"},
		},
	}
	// File parts before the result field: the order must not matter.
	r := e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"),
		contentPart(1, "second chunk"), contentPart(0, "first chunk"), resultPart(t, res))
	if r.status != 200 {
		t.Fatalf("result = %d %s", r.status, r.body)
	}
	id0, id1 := state.ChildContentID("task1", 0), state.ChildContentID("task1", 1)
	if strings.TrimSpace(string(r.body)) != `{"content_ids":["`+id0+`","`+id1+`"],"task_id":"task1"}` {
		t.Fatalf("body %s", r.body)
	}
	if id0 != sha([]byte("task1/0"))[:16] {
		t.Fatalf("child id %s is not sha256(task/index)[:16]", id0)
	}

	gt := requests[*pb.GetTaskRequest](e.fake, "GetTask")[0]
	if gt.GetConsistency() != pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE {
		t.Errorf("GetTask consistency %v", gt.GetConsistency())
	}
	if n := e.fake.count("CreateContent"); n != 0 {
		t.Fatalf("children created by a separate CreateContent (%d calls)", n)
	}
	// One CompleteTask carries outcome, features and children.
	ct := requests[*pb.CompleteTaskRequest](e.fake, "CompleteTask")
	if len(ct) != 1 || len(ct[0].GetChildren()) != 2 || ct[0].GetRequestId() == "" {
		t.Fatalf("CompleteTask %v", ct)
	}
	for i, c := range ct[0].GetChildren() {
		data := []string{"first chunk", "second chunk"}[i]
		if c.GetId() != state.ChildContentID("task1", i) || c.GetMimeType() != "text/plain" || c.GetHash() != sha([]byte(data)) ||
			c.GetSizeBytes() != uint64(len(data)) {
			t.Fatalf("child %d: %v", i, c)
		}
		// Where the child belongs is the state machine's decision.
		if c.GetNamespace() != "" || c.GetParentId() != "" || c.GetRootContentId() != "" || c.GetSource() != "" ||
			c.GetCreatedAt() != 0 || len(c.GetGraphNames()) != 0 || c.GetSourceTaskId() != "" {
			t.Fatalf("child %d carries server-owned fields: %v", i, c)
		}
		if got := string(e.readURL(c.GetStorageUrl())); got != data {
			t.Fatalf("child %d bytes %q", i, got)
		}
	}
	c0 := ct[0].GetChildren()[0]
	if c0.GetLabels()["chunk"] != "0" || len(c0.GetFeatures()) != 1 ||
		// The Raft state gets a reference to the index, not the vector.
		!proto.Equal(c0.GetFeatures()[0], &pb.Feature{Name: "embedding", Policy: "chunks", Embedding: true, ValueJson: `{"dim":2,"index":"g1.chunks.embedding"}`}) {
		t.Fatalf("child 0 labels/features %v", c0)
	}
	want := &pb.CompleteTaskRequest{
		TaskId: "task1", ExecutorId: "ex1", Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS,
		Features:  []*pb.Feature{{Name: "summary", Policy: "chunks", ValueJson: `{"words":3}`}},
		RequestId: ct[0].GetRequestId(),
		Children:  ct[0].GetChildren(),
	}
	if !proto.Equal(ct[0], want) {
		t.Fatalf("CompleteTask %v", ct)
	}
}

func TestTaskResultFailed(t *testing.T) {
	e := newEnv(t)
	withTask(e, sampleTask())
	r := e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"),
		resultPart(t, wire.TaskResult{Outcome: wire.OutcomeFailed, Error: "extractor crashed"}))
	if r.status != 200 {
		t.Fatalf("result = %d %s", r.status, r.body)
	}
	if e.fake.count("CreateContent") != 0 {
		t.Error("CreateContent called for a result without content")
	}
	ct := requests[*pb.CompleteTaskRequest](e.fake, "CompleteTask")[0]
	if ct.GetOutcome() != pb.TaskOutcome_TASK_OUTCOME_FAILED || ct.GetError() != "extractor crashed" || ct.GetExecutorId() != "ex1" {
		t.Fatalf("CompleteTask %v", ct)
	}
}

func TestTaskResultStaleExecutor(t *testing.T) {
	e := newEnv(t)
	withTask(e, sampleTask())
	acceptContent(e, true)
	ok := wire.TaskResult{Outcome: wire.OutcomeSuccess, Content: []wire.ResultContent{{Index: 0, MimeType: "text/plain"}}}

	// Reassigned (visible on the linearizable read): refused before storing.
	r := e.upload(http.MethodPost, wire.ResultPath("ex2", "task1"), contentPart(0, "x"), resultPart(t, ok))
	expectError(t, r, 409, codeConflict)
	if len(e.blobFiles()) != 0 || e.fake.count("CreateContent") != 0 || e.fake.count("CompleteTask") != 0 {
		t.Fatal("stale executor's upload was processed")
	}

	// Reassigned between our read and the completion: the coordinator says so.
	for _, code := range []codes.Code{codes.FailedPrecondition, codes.Aborted} {
		on(e.fake, "CompleteTask", func(r *pb.CompleteTaskRequest) (*pb.CompleteTaskResponse, error) {
			return nil, status.Error(code, "task is assigned to another executor")
		})
		r = e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), resultPart(t, wire.TaskResult{Outcome: wire.OutcomeSuccess}))
		expectError(t, r, 409, codeConflict)
	}

	expectError(t, e.upload(http.MethodPost, wire.ResultPath("ex1", "nope"), resultPart(t, ok)), 404, codeNotFound)
}

func TestTaskResultBadUploads(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxUploadBytes = 1000 })
	withTask(e, sampleTask())
	acceptContent(e, true)
	one := wire.TaskResult{Outcome: wire.OutcomeSuccess, Content: []wire.ResultContent{{Index: 0, MimeType: "text/plain"}}}
	cases := []struct {
		name   string
		parts  []formPart
		status int
		code   string
	}{
		{"no result", []formPart{contentPart(0, "x")}, 400, codeInvalidMultipart},
		{"missing content part", []formPart{resultPart(t, one)}, 400, codeMissingFile},
		{"extra content part", []formPart{resultPart(t, one), contentPart(0, "x"), contentPart(1, "y")}, 400, codeInvalidMultipart},
		{"duplicate content part", []formPart{contentPart(0, "x"), contentPart(0, "y"), resultPart(t, one)}, 400, codeInvalidMultipart},
		{"bad json", []formPart{contentPart(0, "x"), {name: "result", data: []byte(`{"outcome":`)}}, 400, codeInvalidArgument},
		{"bad outcome", []formPart{resultPart(t, wire.TaskResult{Outcome: "maybe"})}, 400, codeInvalidArgument},
		{"failed with content", []formPart{contentPart(0, "x"), resultPart(t, wire.TaskResult{Outcome: wire.OutcomeFailed, Error: "e",
			Content: []wire.ResultContent{{Index: 0}}})}, 400, codeInvalidArgument},
		{"too large", []formPart{contentPart(0, strings.Repeat("z", 1001)), resultPart(t, one)}, 413, codeTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectError(t, e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), c.parts...), c.status, c.code)
		})
	}
	expectError(t, e.upload(http.MethodPost, "/internal/executors/ex1/tasks/a%2Fb/result", resultPart(t, one)), 400, codeInvalidID)
	expectError(t, e.upload(http.MethodPost, "/internal/executors/e..x/tasks/task1/result", resultPart(t, one)), 400, codeInvalidID)
	expectError(t, e.do(http.MethodPost, wire.ResultPath("ex1", "task1"), bytes.NewReader([]byte("{}")), "application/json"), 400, codeInvalidMultipart)
	if f := e.blobFiles(); len(f) != 0 {
		t.Fatalf("bad uploads left blobs %v", f)
	}
	if e.fake.count("CreateContent")+e.fake.count("CompleteTask") != 0 {
		t.Fatal("bad uploads reached the coordinator")
	}
}

func TestTaskResultRefusedDeletesBlobs(t *testing.T) {
	res := wire.TaskResult{Outcome: wire.OutcomeSuccess, Content: []wire.ResultContent{{Index: 0}, {Index: 1}}}
	alreadyDone, err := status.New(codes.FailedPrecondition, `task "task1" already completed (TASK_OUTCOME_SUCCESS) with a different result`).
		WithDetails(&pb.CommandResult{ErrorCode: pb.ErrorCode_ERROR_CODE_ALREADY_COMPLETED})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{status.Error(codes.InvalidArgument, "bad child"), 400, codeInvalidArgument},
		{status.Error(codes.FailedPrecondition, "task is assigned to executor ex2"), 409, codeConflict},
		{alreadyDone.Err(), 409, codeTaskCompleted},
	} {
		e := newEnv(t)
		withTask(e, sampleTask())
		on(e.fake, "CompleteTask", func(r *pb.CompleteTaskRequest) (*pb.CompleteTaskResponse, error) { return nil, c.err })
		r := e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), resultPart(t, res), contentPart(0, "a"), contentPart(1, "b"))
		expectError(t, r, c.status, c.code)
		if f := e.blobFiles(); len(f) != 0 {
			t.Fatalf("%s: blobs left %v", c.code, f)
		}
		if e.fake.count("CreateContent") != 0 {
			t.Fatalf("%s: content created outside the completion", c.code)
		}
	}
}

// A retried upload of the same output: the coordinator reports a repeat
// (created=false), and the second copies of the blobs go away.
func TestTaskResultRetryDedups(t *testing.T) {
	e := newEnv(t)
	withTask(e, sampleTask())
	res := wire.TaskResult{Outcome: wire.OutcomeSuccess, Content: []wire.ResultContent{{Index: 0, MimeType: "text/plain"}}}
	if r := e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), resultPart(t, res), contentPart(0, "a")); r.status != 200 {
		t.Fatalf("first = %d %s", r.status, r.body)
	}
	completeAs(e, false)
	r := e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), resultPart(t, res), contentPart(0, "a"))
	if r.status != 200 || !strings.Contains(string(r.body), `"duplicate":true`) {
		t.Fatalf("retry = %d %s", r.status, r.body)
	}
	ct := requests[*pb.CompleteTaskRequest](e.fake, "CompleteTask")
	if ct[0].GetChildren()[0].GetId() != ct[1].GetChildren()[0].GetId() {
		t.Fatal("retry produced a different child id")
	}
	if ct[0].GetChildren()[0].GetStorageUrl() == ct[1].GetChildren()[0].GetStorageUrl() {
		t.Fatal("retry stored its blob under the first upload's key")
	}
	if f := e.blobFiles(); len(f) != 1 {
		t.Fatalf("blobs after retry: %v", f)
	}
	if got := string(e.readURL(ct[0].GetChildren()[0].GetStorageUrl())); got != "a" {
		t.Fatalf("first blob now %q", got)
	}
}

// After an ambiguous failure (the completion may have applied) a blob is
// kept exactly when the coordinator's content references it.
func TestTaskResultAmbiguousFailureKeepsReferencedBlobs(t *testing.T) {
	res := wire.TaskResult{Outcome: wire.OutcomeSuccess, Content: []wire.ResultContent{{Index: 0}}}
	for _, applied := range []bool{true, false} {
		e := newEnv(t)
		withTask(e, sampleTask())
		var url string
		on(e.fake, "CompleteTask", func(r *pb.CompleteTaskRequest) (*pb.CompleteTaskResponse, error) {
			url = r.GetChildren()[0].GetStorageUrl()
			return nil, status.Error(codes.Internal, "leader lost after append")
		})
		on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
			if r.GetNamespace() != "ns" || len(r.GetIds()) != 1 || r.GetIds()[0] != state.ChildContentID("task1", 0) {
				return nil, status.Errorf(codes.InvalidArgument, "unexpected probe %v", r)
			}
			if !applied {
				return nil, status.Error(codes.NotFound, "no such content")
			}
			return &pb.GetContentResponse{Contents: []*pb.Content{{Id: r.GetIds()[0], StorageUrl: url}}}, nil
		})
		r := e.upload(http.MethodPost, wire.ResultPath("ex1", "task1"), resultPart(t, res), contentPart(0, "a"))
		if r.status != 500 {
			t.Fatalf("applied=%v: %d %s", applied, r.status, r.body)
		}
		if f := e.blobFiles(); (len(f) == 1) != applied {
			t.Fatalf("applied=%v: blobs %v", applied, f)
		}
	}
}
