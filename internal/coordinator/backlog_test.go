package coordinator_test

// Issue 18 item 7 (amplification): a namespace's unfinished tasks are
// bounded. At the bound the scheduler makes no new tasks, and uploads into
// that namespace are refused with 429 JSON (and leave no blob); another
// namespace is unaffected, and the namespace takes uploads again once tasks
// finish.

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/coordinator"
	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// chunkStack starts the stack with svc, registers executor ex1 offering
// extractor "chunk", and creates each namespace with a graph "g" of one
// policy "chunks"; it returns a CoordinatorService client.
func chunkStack(t *testing.T, svc coordinator.Config, namespaces ...string) (*stack, pb.CoordinatorServiceClient) {
	t.Helper()
	s := startStackWith(t, svc)
	conn, err := coordclient.Dial([]string{s.node.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	coord := pb.NewCoordinatorServiceClient(conn)
	if _, err := coord.RegisterExecutor(context.Background(), &pb.RegisterExecutorRequest{Executor: &pb.Executor{
		Id: "ex1", Address: "127.0.0.1:1", MaxPendingTasks: 10,
		Extractors: []*pb.ExtractorDescription{{Name: "chunk"}}}}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		if code, b := post(t, s.api.URL+"/namespaces", "application/json", []byte(`{"name":"`+ns+`"}`)); code != 200 {
			t.Fatalf("namespace: %d %s", code, b)
		}
		if code, b := post(t, s.api.URL+"/namespaces/"+ns+"/extraction_graphs", "application/json",
			[]byte(`{"name":"g","extraction_policies":[{"extractor":"chunk","name":"chunks"}]}`)); code != 200 {
			t.Fatalf("graph: %d %s", code, b)
		}
	}
	return s, coord
}

func TestUploadsRefusedWhileANamespaceIsAtItsTaskBound(t *testing.T) {
	s, coord := chunkStack(t, coordinator.Config{MaxUnfinishedTasks: 2}, "busy", "calm")
	ctx := context.Background()
	upload := func(ns, text string) (int, http.Header, string) {
		var up bytes.Buffer
		mw := multipart.NewWriter(&up)
		fw, _ := mw.CreateFormFile("file", "doc.txt")
		fw.Write([]byte(text))
		mw.Close()
		resp, err := http.Post(s.api.URL+"/namespaces/"+ns+"/extraction_graphs/g/extract", mw.FormDataContentType(), &up)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, resp.Header, b.String()
	}
	store := s.node.Store()
	for i := range 2 {
		if code, _, b := upload("busy", fmt.Sprintf("doc %d", i)); code != 200 {
			t.Fatalf("upload %d: %d %s", i, code, b)
		}
	}
	waitFor(t, "two unfinished tasks in busy", func() error {
		if n := store.UnfinishedTasks("busy"); n != 2 {
			return fmt.Errorf("%d unfinished", n)
		}
		return nil
	})
	blobs := countFiles(t, s.blobDir)

	code, hdr, body := upload("busy", "one too many")
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"code":"resource_exhausted"`) ||
		!strings.Contains(body, "2 unfinished tasks") || hdr.Get("Retry-After") == "" {
		t.Fatalf("upload at the bound: %d %v %s; want 429 resource_exhausted naming the count, with Retry-After", code, hdr, body)
	}
	if n := countFiles(t, s.blobDir); n != blobs {
		t.Fatalf("the refused upload left a blob: %d files, was %d", n, blobs)
	}
	if code, _, b := upload("calm", "another namespace"); code != 200 {
		t.Fatalf("another namespace refused: %d %s", code, b)
	}

	// A finished task makes room.
	tasks, err := coord.ListTasks(ctx, &pb.ListTasksRequest{Namespace: "busy", GraphName: "g", Policy: "chunks",
		Consistency: pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE})
	if err != nil || len(tasks.GetTasks()) == 0 {
		t.Fatalf("tasks: %v %v", tasks, err)
	}
	tk := tasks.GetTasks()[0]
	waitFor(t, "the task is assigned", func() error {
		got, err := coord.GetTask(ctx, &pb.GetTaskRequest{TaskId: tk.GetId()})
		if err != nil || got.GetTask().GetExecutorId() == "" {
			return fmt.Errorf("not assigned: %v %v", got, err)
		}
		return nil
	})
	if _, err := coord.CompleteTask(ctx, &pb.CompleteTaskRequest{TaskId: tk.GetId(), ExecutorId: "ex1",
		Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS}); err != nil {
		t.Fatal(err)
	}
	if code, _, b := upload("busy", "room again"); code != 200 {
		t.Fatalf("upload after a task finished: %d %s", code, b)
	}
}

// The coordinator's gRPC list calls follow the HTTP API's page-size rule
// (wire.PageLimit): limit 0 is the default page, not everything, and a
// limit above the maximum page is refused.
func TestGRPCListCallsArePaged(t *testing.T) {
	s, coord := chunkStack(t, coordinator.Config{}, "ns")
	ctx := context.Background()
	const n = wire.MaxPageSize + 1
	var contents []*pb.Content
	for i := range n {
		id := fmt.Sprintf("c%04d", i)
		contents = append(contents, &pb.Content{Id: id, Namespace: "ns", Name: id, MimeType: "text/plain", Hash: id,
			StorageUrl: "file:///nowhere/" + id, Source: state.SourceIngestion, GraphNames: []string{"g"}})
	}
	if _, err := coord.CreateContent(ctx, &pb.CreateContentRequest{Contents: contents}); err != nil {
		t.Fatal(err)
	}
	lin := pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE
	list, err := coord.ListContent(ctx, &pb.ListContentRequest{Namespace: "ns", GraphName: "g", Consistency: lin})
	if err != nil || len(list.GetContents()) != wire.DefaultPageSize || list.GetTotal() != n {
		t.Fatalf("ListContent limit 0: %d items of %d, %v; want %d of %d", len(list.GetContents()), list.GetTotal(), err, wire.DefaultPageSize, n)
	}
	if _, err := coord.ListContent(ctx, &pb.ListContentRequest{Namespace: "ns", GraphName: "g", Limit: n}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ListContent limit %d: %v, want InvalidArgument", n, err)
	}
	waitFor(t, "a task per content", func() error {
		if got := s.node.Store().UnfinishedTasks("ns"); got != n {
			return fmt.Errorf("%d tasks", got)
		}
		return nil
	})
	tasks, err := coord.ListTasks(ctx, &pb.ListTasksRequest{Namespace: "ns", GraphName: "g", Policy: "chunks", Consistency: lin})
	if err != nil || len(tasks.GetTasks()) != wire.DefaultPageSize || tasks.GetTotal() != n {
		t.Fatalf("ListTasks limit 0: %d items of %d, %v; want %d of %d", len(tasks.GetTasks()), tasks.GetTotal(), err, wire.DefaultPageSize, n)
	}
	if _, err := coord.ListTasks(ctx, &pb.ListTasksRequest{Namespace: "ns", GraphName: "g", Policy: "chunks", Limit: 1 << 30}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ListTasks limit 2^30: %v, want InvalidArgument", err)
	}
}
