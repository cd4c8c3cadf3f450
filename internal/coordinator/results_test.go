package coordinator_test

// Task results through a real API server and a real one-node coordinator:
// completion is one FSM command under the executor fence, so a stale
// executor publishes nothing, the same result again is a no-op, and a
// different result for a finished task is 409 task_already_completed with
// the real output left as it was.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func post(t *testing.T, url, ctype string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, ctype, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// resultBody is the multipart upload an executor sends for a result with
// one child whose bytes are data.
func resultBody(t *testing.T, data string, labels string) ([]byte, string) {
	t.Helper()
	res := wire.TaskResult{Outcome: wire.OutcomeSuccess, Content: []wire.ResultContent{
		{Index: 0, MimeType: "text/plain", Labels: map[string]json.RawMessage{"chunk": json.RawMessage(labels)}}}}
	j, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if err := mw.WriteField(wire.ResultField, string(j)); err != nil {
		t.Fatal(err)
	}
	fw, err := mw.CreateFormFile(wire.ContentPartName(0), "chunk")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte(data))
	mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

func TestTaskResultIsFencedAndAcceptedOnce(t *testing.T) {
	s := startStack(t)
	conn, err := coordclient.Dial([]string{s.node.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	coord := pb.NewCoordinatorServiceClient(conn)
	ctx := context.Background()
	for _, id := range []string{"ex1", "ex2"} {
		if _, err := coord.RegisterExecutor(ctx, &pb.RegisterExecutorRequest{Executor: &pb.Executor{
			Id: id, Address: "127.0.0.1:1", MaxPendingTasks: 10,
			Extractors: []*pb.ExtractorDescription{{Name: "chunk"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if code, b := post(t, s.api.URL+"/namespaces", "application/json", []byte(`{"name":"ns"}`)); code != 200 {
		t.Fatalf("namespace: %d %s", code, b)
	}
	if code, b := post(t, s.api.URL+"/namespaces/ns/extraction_graphs", "application/json",
		[]byte(`{"name":"g","extraction_policies":[{"extractor":"chunk","name":"chunks"}]}`)); code != 200 {
		t.Fatalf("graph: %d %s", code, b)
	}
	var up bytes.Buffer
	mw := multipart.NewWriter(&up)
	fw, _ := mw.CreateFormFile("file", "doc.txt")
	fw.Write([]byte("some text to chunk"))
	mw.Close()
	code, b := post(t, s.api.URL+"/namespaces/ns/extraction_graphs/g/extract", mw.FormDataContentType(), up.Bytes())
	if code != 200 {
		t.Fatalf("upload: %d %s", code, b)
	}
	var uploaded struct {
		ContentID string `json:"content_id"`
	}
	if err := json.Unmarshal(b, &uploaded); err != nil {
		t.Fatal(err)
	}
	store := s.node.Store()
	var task *pb.Task
	waitFor(t, "the chunk task is assigned", func() error {
		tasks, _ := store.ListTasks(state.TaskQuery{Namespace: "ns", ContentID: uploaded.ContentID})
		for _, tk := range tasks {
			if tk.GetExecutorId() != "" {
				task = tk
				return nil
			}
		}
		return fmt.Errorf("no assigned task yet")
	})
	owner, stale := task.GetExecutorId(), "ex1"
	if owner == "ex1" {
		stale = "ex2"
	}
	childID := state.ChildContentID(task.GetId(), 0)
	send := func(exec, data, labels string) (int, string) {
		body, ctype := resultBody(t, data, labels)
		code, b := post(t, s.api.URL+wire.ResultPath(exec, task.GetId()), ctype, body)
		return code, string(b)
	}
	download := func() string {
		resp, b := get(t, s.api.URL+"/namespaces/ns/content/"+childID+"/download", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("download: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	versions := func() []*pb.Content { return store.ContentVersions("ns", childID) }

	// The executor that does not own the task publishes nothing.
	if code, body := send(stale, "stale bytes", "0"); code != 409 || !strings.Contains(body, `"code":"conflict"`) {
		t.Fatalf("stale executor: %d %s", code, body)
	}
	if len(versions()) != 0 {
		t.Fatal("stale executor created a child")
	}
	// The same at the coordinator, past the API server's early check: the
	// state machine's fence refuses it, with the state code as a detail.
	_, err = coord.CompleteTask(ctx, &pb.CompleteTaskRequest{TaskId: task.GetId(), ExecutorId: stale,
		Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS, Children: []*pb.Content{{Hash: "x", StorageUrl: "file:///x", MimeType: "text/plain"}}})
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || len(st.Details()) != 1 ||
		st.Details()[0].(*pb.CommandResult).GetErrorCode() != pb.ErrorCode_ERROR_CODE_CONFLICT {
		t.Fatalf("stale CompleteTask at the coordinator: %v", err)
	}
	if len(versions()) != 0 {
		t.Fatal("stale executor created a child through the coordinator")
	}

	// The owner's result: one child, version 1.
	if code, body := send(owner, "real chunk", "0"); code != 200 || !strings.Contains(body, childID) {
		t.Fatalf("owner: %d %s", code, body)
	}
	sum := sha256.Sum256([]byte("real chunk"))
	check := func(when string) {
		t.Helper()
		vs := versions()
		if len(vs) != 1 || vs[0].GetVersion() != 1 || vs[0].GetHash() != hex.EncodeToString(sum[:]) ||
			vs[0].GetLabels()["chunk"] != "0" || vs[0].GetParentId() != uploaded.ContentID || vs[0].GetSource() != "chunks" {
			t.Fatalf("%s: child versions %v", when, vs)
		}
		if got := download(); got != "real chunk" {
			t.Fatalf("%s: child bytes %q", when, got)
		}
		tk, _ := store.Task(task.GetId())
		if tk.GetOutcome() != pb.TaskOutcome_TASK_OUTCOME_SUCCESS {
			t.Fatalf("%s: task %v", when, tk)
		}
	}
	check("after the result")

	// The same result again (an executor retry): 200, nothing changes.
	if code, body := send(owner, "real chunk", "0"); code != 200 || !strings.Contains(body, `"duplicate":true`) {
		t.Fatalf("same result again: %d %s", code, body)
	}
	check("after the repeat")

	// A forged result for the finished task: other bytes, other labels.
	for _, forged := range []struct{ data, labels string }{{"forged bytes", "0"}, {"real chunk", "99"}} {
		code, body := send(owner, forged.data, forged.labels)
		if code != 409 || !strings.Contains(body, `"code":"task_already_completed"`) {
			t.Fatalf("forged %v: %d %s", forged, code, body)
		}
		check("after a forged result")
	}
	// The stale executor is refused for the finished task too.
	if code, body := send(stale, "stale bytes", "0"); code != 409 {
		t.Fatalf("stale after completion: %d %s", code, body)
	}
	check("after a stale result")
}
