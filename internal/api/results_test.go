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

	"github.com/indexify-go/indexify/internal/executor"
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
	on(e.fake, "CompleteTask", func(r *pb.CompleteTaskRequest) (*pb.CompleteTaskResponse, error) {
		return &pb.CompleteTaskResponse{}, nil
	})
}

func resultPart(t *testing.T, res executor.TaskResult) formPart {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return formPart{name: executor.ResultField, data: b}
}

func contentPart(i int, data string) formPart {
	return formPart{name: executor.ContentPartName(i), filename: "blob", data: []byte(data)}
}

func TestTaskResultSuccess(t *testing.T) {
	e := newEnv(t)
	withTask(e, sampleTask())
	acceptContent(e, true)
	res := executor.TaskResult{
		Outcome:  executor.OutcomeSuccess,
		Features: []executor.ResultFeature{{Name: "summary", Value: json.RawMessage(`{"words":3}`)}},
		Content: []executor.ResultContent{
			{Index: 0, MimeType: "text/plain", Labels: map[string]json.RawMessage{"chunk": json.RawMessage(`0`)},
				Features: []executor.ResultFeature{{Name: "embedding", Embedding: true, Value: json.RawMessage(`[1,2]`)}}},
			{Index: 1, MimeType: "text/plain; charset=utf-8"},
		},
	}
	// File parts before the result field: the order must not matter.
	r := e.upload(http.MethodPost, executor.ResultPath("ex1", "task1"),
		contentPart(1, "second chunk"), contentPart(0, "first chunk"), resultPart(t, res))
	if r.status != 200 {
		t.Fatalf("result = %d %s", r.status, r.body)
	}
	id0, id1 := childContentID("task1", 0), childContentID("task1", 1)
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
	cc := requests[*pb.CreateContentRequest](e.fake, "CreateContent")
	if len(cc) != 1 || len(cc[0].GetContents()) != 2 || cc[0].GetRequestId() == "" {
		t.Fatalf("CreateContent %v", cc)
	}
	for i, c := range cc[0].GetContents() {
		data := []string{"first chunk", "second chunk"}[i]
		if c.GetId() != childContentID("task1", i) || c.GetNamespace() != "ns" || c.GetParentId() != "parent" ||
			c.GetRootContentId() != "root" || c.GetSource() != "chunks" || strings.Join(c.GetGraphNames(), ",") != "g1" ||
			c.GetSourceTaskId() != "task1" || c.GetMimeType() != "text/plain" || c.GetHash() != sha([]byte(data)) ||
			c.GetSizeBytes() != uint64(len(data)) {
			t.Fatalf("child %d: %v", i, c)
		}
		if got := string(e.readURL(c.GetStorageUrl())); got != data {
			t.Fatalf("child %d bytes %q", i, got)
		}
	}
	c0 := cc[0].GetContents()[0]
	if c0.GetLabels()["chunk"] != "0" || len(c0.GetFeatures()) != 1 ||
		!proto.Equal(c0.GetFeatures()[0], &pb.Feature{Name: "embedding", Policy: "chunks", Embedding: true, ValueJson: "[1,2]"}) {
		t.Fatalf("child 0 labels/features %v", c0)
	}

	ct := requests[*pb.CompleteTaskRequest](e.fake, "CompleteTask")
	want := &pb.CompleteTaskRequest{
		TaskId: "task1", ExecutorId: "ex1", Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS,
		Features:  []*pb.Feature{{Name: "summary", Policy: "chunks", ValueJson: `{"words":3}`}},
		RequestId: ct[0].GetRequestId(),
	}
	if len(ct) != 1 || !proto.Equal(ct[0], want) || ct[0].GetRequestId() == "" {
		t.Fatalf("CompleteTask %v", ct)
	}
}

func TestTaskResultFailed(t *testing.T) {
	e := newEnv(t)
	withTask(e, sampleTask())
	r := e.upload(http.MethodPost, executor.ResultPath("ex1", "task1"),
		resultPart(t, executor.TaskResult{Outcome: executor.OutcomeFailed, Error: "extractor crashed"}))
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
	ok := executor.TaskResult{Outcome: executor.OutcomeSuccess, Content: []executor.ResultContent{{Index: 0, MimeType: "text/plain"}}}

	// Reassigned (visible on the linearizable read): refused before storing.
	r := e.upload(http.MethodPost, executor.ResultPath("ex2", "task1"), contentPart(0, "x"), resultPart(t, ok))
	expectError(t, r, 409, codeConflict)
	if len(e.blobFiles()) != 0 || e.fake.count("CreateContent") != 0 || e.fake.count("CompleteTask") != 0 {
		t.Fatal("stale executor's upload was processed")
	}

	// Reassigned between our read and the completion: the coordinator says so.
	for _, code := range []codes.Code{codes.FailedPrecondition, codes.Aborted} {
		on(e.fake, "CompleteTask", func(r *pb.CompleteTaskRequest) (*pb.CompleteTaskResponse, error) {
			return nil, status.Error(code, "task is assigned to another executor")
		})
		r = e.upload(http.MethodPost, executor.ResultPath("ex1", "task1"), resultPart(t, executor.TaskResult{Outcome: executor.OutcomeSuccess}))
		expectError(t, r, 409, codeConflict)
	}

	expectError(t, e.upload(http.MethodPost, executor.ResultPath("ex1", "nope"), resultPart(t, ok)), 404, codeNotFound)
}

func TestTaskResultBadUploads(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxUploadBytes = 1000 })
	withTask(e, sampleTask())
	acceptContent(e, true)
	one := executor.TaskResult{Outcome: executor.OutcomeSuccess, Content: []executor.ResultContent{{Index: 0, MimeType: "text/plain"}}}
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
		{"bad outcome", []formPart{resultPart(t, executor.TaskResult{Outcome: "maybe"})}, 400, codeInvalidArgument},
		{"too large", []formPart{contentPart(0, strings.Repeat("z", 1001)), resultPart(t, one)}, 413, codeTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectError(t, e.upload(http.MethodPost, executor.ResultPath("ex1", "task1"), c.parts...), c.status, c.code)
		})
	}
	expectError(t, e.upload(http.MethodPost, "/internal/executors/ex1/tasks/a%2Fb/result", resultPart(t, one)), 400, codeInvalidID)
	expectError(t, e.upload(http.MethodPost, "/internal/executors/e..x/tasks/task1/result", resultPart(t, one)), 400, codeInvalidID)
	expectError(t, e.do(http.MethodPost, executor.ResultPath("ex1", "task1"), bytes.NewReader([]byte("{}")), "application/json"), 400, codeInvalidMultipart)
	if f := e.blobFiles(); len(f) != 0 {
		t.Fatalf("bad uploads left blobs %v", f)
	}
	if e.fake.count("CreateContent")+e.fake.count("CompleteTask") != 0 {
		t.Fatal("bad uploads reached the coordinator")
	}
}

func TestTaskResultCreateContentFailureDeletesBlobs(t *testing.T) {
	e := newEnv(t)
	withTask(e, sampleTask())
	on(e.fake, "CreateContent", func(r *pb.CreateContentRequest) (*pb.CreateContentResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "bad child")
	})
	res := executor.TaskResult{Outcome: executor.OutcomeSuccess, Content: []executor.ResultContent{{Index: 0}, {Index: 1}}}
	r := e.upload(http.MethodPost, executor.ResultPath("ex1", "task1"), resultPart(t, res), contentPart(0, "a"), contentPart(1, "b"))
	expectError(t, r, 400, codeInvalidArgument)
	if f := e.blobFiles(); len(f) != 0 {
		t.Fatalf("blobs left %v", f)
	}
	if e.fake.count("CompleteTask") != 0 {
		t.Fatal("task completed although its outputs were not stored")
	}
}

// A retried upload of the same output: the coordinator reports the children
// as existing (created=false), and the second copies of the blobs go away.
func TestTaskResultRetryDedups(t *testing.T) {
	e := newEnv(t)
	withTask(e, sampleTask())
	acceptContent(e, true)
	res := executor.TaskResult{Outcome: executor.OutcomeSuccess, Content: []executor.ResultContent{{Index: 0, MimeType: "text/plain"}}}
	if r := e.upload(http.MethodPost, executor.ResultPath("ex1", "task1"), resultPart(t, res), contentPart(0, "a")); r.status != 200 {
		t.Fatalf("first = %d %s", r.status, r.body)
	}
	acceptContent(e, false)
	if r := e.upload(http.MethodPost, executor.ResultPath("ex1", "task1"), resultPart(t, res), contentPart(0, "a")); r.status != 200 {
		t.Fatalf("retry = %d %s", r.status, r.body)
	}
	cc := requests[*pb.CreateContentRequest](e.fake, "CreateContent")
	if cc[0].GetContents()[0].GetId() != cc[1].GetContents()[0].GetId() {
		t.Fatal("retry produced a different child id")
	}
	if f := e.blobFiles(); len(f) != 1 {
		t.Fatalf("blobs after retry: %v", f)
	}
}
