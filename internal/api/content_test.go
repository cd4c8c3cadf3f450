package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func sampleContent() *pb.Content {
	return &pb.Content{
		Id: "c1", Version: 2, ParentId: "p1", RootContentId: "r1", Latest: true, Namespace: "ns", Name: "chunk",
		MimeType: "text/plain", Labels: map[string]string{"lang": `"en"`, "n": "3", "raw": "not json"},
		StorageUrl: "file:///srv/secret/blobs/ns/c1/0a1b", CreatedAt: 1_700_000_123_456, Source: "chunker", SizeBytes: 42, Hash: "abc",
		GraphNames: []string{"g1"}, ChangeOffset: 7,
		Features: []*pb.Feature{
			{Name: "summary", Policy: "chunker", ValueJson: `{"words":12}`},
			{Name: "embedding", Policy: "embed", Embedding: true, ValueJson: `[0.5,1]`},
		},
	}
}

const sampleContentJSON = `{"id":"c1","parent_id":"p1","root_content_id":"r1","namespace":"ns","name":"chunk","mime_type":"text/plain",` +
	`"labels":{"lang":"en","n":3,"raw":"not json"},"extraction_graph_names":["g1"],"storage_url":"file:ns/c1/0a1b","created_at":1700000123,` +
	`"source":"chunker","size":42,"hash":"abc","extracted_metadata":{"embedding":[0.5,1],"summary":{"words":12}},"version":2}`

func TestListContent(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "ListContent", func(r *pb.ListContentRequest) (*pb.ListContentResponse, error) {
		return &pb.ListContentResponse{Contents: []*pb.Content{sampleContent()}, Total: 10}, nil
	})
	r := e.get("/namespaces/ns/extraction_graphs/g1/content?source=chunker&parent_id=p1&labels_filter=lang%3Den&labels_filter=n%3E2" +
		"&ingested_content_id=r1&start_id=c0&limit=5")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"content_list":[`+sampleContentJSON+`],"total":10}` {
		t.Fatalf("list = %d\n%s", r.status, r.body)
	}
	got := requests[*pb.ListContentRequest](e.fake, "ListContent")[0]
	want := &pb.ListContentRequest{Namespace: "ns", GraphName: "g1", Source: "chunker", ParentId: "p1",
		LabelsFilter: []string{"lang=en", "n>2"}, IngestedContentId: "r1", StartId: "c0", Limit: 5}
	if !proto.Equal(got, want) {
		t.Fatalf("request %v\nwant %v", got, want)
	}
	// Empty list is [] not null.
	on(e.fake, "ListContent", func(r *pb.ListContentRequest) (*pb.ListContentResponse, error) {
		return &pb.ListContentResponse{}, nil
	})
	if r := e.get("/namespaces/ns/extraction_graphs/g1/content?source=ingestion"); strings.TrimSpace(string(r.body)) != `{"content_list":[],"total":0}` {
		t.Fatalf("empty list %s", r.body)
	}
	n := e.fake.count("ListContent")
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/content?labels_filter=novalue"), 400, codeInvalidFilter)
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/content?limit=-1"), 400, codeInvalidArgument)
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/content?limit=abc"), 400, codeInvalidArgument)
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/content?parent_id=a%2Fb"), 400, codeInvalidID)
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/content?source=a%2Fb"), 400, codeInvalidID)
	if e.fake.count("ListContent") != n {
		t.Error("bad queries reached the coordinator")
	}
}

func TestContentMetadata(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
		switch r.GetIds()[0] {
		case "c1":
			return &pb.GetContentResponse{Contents: []*pb.Content{sampleContent()}}, nil
		case "gone":
			c := sampleContent()
			c.Id, c.Tombstoned = "gone", true
			return &pb.GetContentResponse{Contents: []*pb.Content{c}}, nil
		}
		return nil, status.Error(codes.NotFound, "content not found")
	})
	r := e.get("/namespaces/ns/content/c1/metadata")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"content_metadata":`+sampleContentJSON+`,"metadata":[]}` {
		t.Fatalf("metadata = %d %s", r.status, r.body)
	}
	expectError(t, e.get("/namespaces/ns/content/gone/metadata"), 404, codeNotFound)
	expectError(t, e.get("/namespaces/ns/content/nope/metadata"), 404, codeNotFound)
	expectError(t, e.get("/namespaces/ns/content/a%2Fb/metadata"), 400, codeInvalidID)
}

func TestDownload(t *testing.T) {
	e := newEnv(t)
	info, err := e.store.Put(t.Context(), "ns/c1/blob", strings.NewReader("the bytes"))
	if err != nil {
		t.Fatal(err)
	}
	on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
		c := sampleContent()
		c.StorageUrl, c.SizeBytes, c.Name = info.URL, uint64(info.Size), "chunk.txt"
		if r.GetIds()[0] == "lost" {
			c.StorageUrl = "file://" + e.store.Dir() + "/ns/lost/blob"
		}
		return &pb.GetContentResponse{Contents: []*pb.Content{c}}, nil
	})
	for _, q := range []string{"", "?version=2"} {
		r := e.get("/namespaces/ns/content/c1/download" + q)
		if r.status != 200 || string(r.body) != "the bytes" || r.header.Get("Content-Type") != "text/plain" ||
			r.header.Get("Content-Disposition") != `attachment; filename=chunk.txt` {
			t.Fatalf("download%s = %d %q %v", q, r.status, r.body, r.header)
		}
	}
	// Version 1 was superseded: the API asks the coordinator for exactly it.
	v1, err := e.store.Put(t.Context(), "ns/c1/blob-v1", strings.NewReader("version one"))
	if err != nil {
		t.Fatal(err)
	}
	on(e.fake, "GetContent", func(r *pb.GetContentRequest) (*pb.GetContentResponse, error) {
		c := sampleContent()
		switch r.GetVersion() {
		case 0:
			c.StorageUrl, c.SizeBytes, c.Name = info.URL, uint64(info.Size), "chunk.txt"
			if r.GetIds()[0] == "lost" {
				c.StorageUrl = "file://" + e.store.Dir() + "/ns/lost/blob"
			}
		case 1:
			c.Version, c.StorageUrl, c.MimeType, c.SizeBytes = 1, v1.URL, "text/x-old", uint64(v1.Size)
		default:
			return nil, status.Errorf(codes.NotFound, "version %d of content %q not found", r.GetVersion(), r.GetIds()[0])
		}
		return &pb.GetContentResponse{Contents: []*pb.Content{c}}, nil
	})
	r := e.get("/namespaces/ns/content/c1/download?version=1")
	if r.status != 200 || string(r.body) != "version one" || r.header.Get("Content-Type") != "text/x-old" {
		t.Fatalf("download v1 = %d %q %v", r.status, r.body, r.header)
	}
	expectError(t, e.get("/namespaces/ns/content/c1/download?version=7"), 404, codeNotFound)
	expectError(t, e.get("/namespaces/ns/content/c1/download?version=x"), 400, codeInvalidArgument)
	expectError(t, e.get("/namespaces/ns/content/c1/download?version=0"), 400, codeInvalidArgument)
	expectError(t, e.get("/namespaces/ns/content/lost/download"), 404, codeNotFound)
}

func TestDeleteContent(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "TombstoneContent", func(r *pb.TombstoneContentRequest) (*pb.TombstoneContentResponse, error) {
		if r.GetContentIds()[0] == "missing" {
			return nil, status.Error(codes.NotFound, `content "missing" not found`)
		}
		return &pb.TombstoneContentResponse{}, nil
	})
	r := e.doJSON(http.MethodDelete, "/namespaces/ns/content", map[string]any{"content_ids": []string{"a", "b"}})
	if r.status != 200 {
		t.Fatalf("delete = %d %s", r.status, r.body)
	}
	got := requests[*pb.TombstoneContentRequest](e.fake, "TombstoneContent")[0]
	if got.GetNamespace() != "ns" || strings.Join(got.GetContentIds(), ",") != "a,b" || got.GetRequestId() == "" {
		t.Fatalf("request %v", got)
	}
	expectError(t, e.doJSON(http.MethodDelete, "/namespaces/ns/content", map[string]any{"content_ids": []string{"missing"}}), 404, codeNotFound)
	expectError(t, e.doJSON(http.MethodDelete, "/namespaces/ns/content", map[string]any{"content_ids": []string{}}), 400, codeInvalidArgument)
	expectError(t, e.doJSON(http.MethodDelete, "/namespaces/ns/content", map[string]any{"content_ids": []string{"ok", "../x"}}), 400, codeInvalidID)
	expectError(t, e.doJSON(http.MethodDelete, "/namespaces/ns/content", `{"content_ids": "a"}`), 400, codeInvalidJSON)
	if n := e.fake.count("TombstoneContent"); n != 2 {
		t.Fatalf("%d tombstone calls, want 2", n)
	}
}

func TestUpdateLabels(t *testing.T) {
	e := newEnv(t)
	on(e.fake, "UpdateLabels", func(r *pb.UpdateLabelsRequest) (*pb.UpdateLabelsResponse, error) {
		return &pb.UpdateLabelsResponse{}, nil
	})
	r := e.doJSON(http.MethodPut, "/namespaces/ns/content/c1/labels", `{"labels": {"a": "x", "b": 2.5, "c": {"d": [true, null]}}}`)
	if r.status != 200 {
		t.Fatalf("labels = %d %s", r.status, r.body)
	}
	got := requests[*pb.UpdateLabelsRequest](e.fake, "UpdateLabels")[0]
	want := &pb.UpdateLabelsRequest{Namespace: "ns", ContentId: "c1", RequestId: got.GetRequestId(),
		Labels: map[string]string{"a": `"x"`, "b": "2.5", "c": `{"d":[true,null]}`}}
	if !proto.Equal(got, want) || got.GetRequestId() == "" {
		t.Fatalf("request %v", got)
	}
	// An empty object clears the labels.
	if r := e.doJSON(http.MethodPut, "/namespaces/ns/content/c1/labels", `{"labels": {}}`); r.status != 200 {
		t.Fatalf("clear = %d %s", r.status, r.body)
	}
	expectError(t, e.doJSON(http.MethodPut, "/namespaces/ns/content/c1/labels", `{}`), 400, codeInvalidArgument)
	expectError(t, e.doJSON(http.MethodPut, "/namespaces/ns/content/c1/labels", `{"labels": [1]}`), 400, codeInvalidJSON)
	expectError(t, e.doJSON(http.MethodPut, "/namespaces/ns/content/c1/labels", `{"labels": {"": 1}}`), 400, codeInvalidArgument)
	expectError(t, e.doJSON(http.MethodPut, "/namespaces/ns/content/x..y/labels", `{"labels": {}}`), 400, codeInvalidID)
}

func TestWaitContent(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.RequestTimeout = 2 * time.Second })
	var calls atomic.Int32
	onCtx(e.fake, "WaitContent", func(ctx context.Context, r *pb.WaitContentRequest) (*pb.WaitContentResponse, error) {
		if r.GetContentId() == "missing" {
			return nil, status.Error(codes.NotFound, "content not found")
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Error("WaitContent called without a deadline")
		}
		switch calls.Add(1) {
		case 1:
			return &pb.WaitContentResponse{Done: false}, nil // deadline passed on the coordinator
		case 2:
			return nil, status.Error(codes.DeadlineExceeded, "deadline")
		}
		return &pb.WaitContentResponse{Done: true}, nil
	})
	r := e.get("/namespaces/ns/content/c1/wait")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"content_id":"c1","done":true}` {
		t.Fatalf("wait = %d %s", r.status, r.body)
	}
	if calls.Load() != 3 {
		t.Fatalf("%d WaitContent calls, want 3", calls.Load())
	}
	expectError(t, e.get("/namespaces/ns/content/missing/wait"), 404, codeNotFound)
	expectError(t, e.get("/namespaces/ns/content/a%2Fb/wait"), 400, codeInvalidID)
}

func withGraphs(e *env) {
	on(e.fake, "ListExtractionGraphs", func(r *pb.ListExtractionGraphsRequest) (*pb.ListExtractionGraphsResponse, error) {
		return &pb.ListExtractionGraphsResponse{Graphs: sampleGraphs()}, nil
	})
}

func TestContentTree(t *testing.T) {
	e := newEnv(t)
	withGraphs(e)
	on(e.fake, "GetContentTree", func(r *pb.GetContentTreeRequest) (*pb.GetContentTreeResponse, error) {
		root := &pb.Content{Id: "r1", Namespace: "ns", Source: "ingestion"}
		return &pb.GetContentTreeResponse{Contents: []*pb.Content{root, sampleContent()}}, nil
	})
	r := e.get("/namespaces/ns/extraction_graphs/g1/content/r1/extraction_policies/embed")
	if r.status != 200 {
		t.Fatalf("tree = %d %s", r.status, r.body)
	}
	var body struct {
		Tree []map[string]any `json:"content_tree_metadata"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || len(body.Tree) != 2 || body.Tree[1]["id"] != "c1" || body.Tree[0]["source"] != "ingestion" {
		t.Fatalf("tree body %s", r.body)
	}
	got := requests[*pb.GetContentTreeRequest](e.fake, "GetContentTree")[0]
	if got.GetNamespace() != "ns" || got.GetGraphName() != "g1" || got.GetContentId() != "r1" {
		t.Fatalf("request %v", got)
	}
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/content/r1/extraction_policies/nope"), 404, codeNotFound)
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g9/content/r1/extraction_policies/embed"), 404, codeNotFound)
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/content/r%2F1/extraction_policies/embed"), 400, codeInvalidID)
}

func TestListTasks(t *testing.T) {
	e := newEnv(t)
	withGraphs(e)
	on(e.fake, "ListTasks", func(r *pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
		return &pb.ListTasksResponse{Total: 3, Tasks: []*pb.Task{
			{Id: "t1", Extractor: "x", PolicyName: "embed", GraphName: "g1", Namespace: "ns", ContentId: "c1", ContentVersion: 2,
				Content: sampleContent(), InputParamsJson: `{"k":1}`, Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS,
				CreatedAt: 5_000, CompletedAt: 9_999, ExecutorId: "ex1", Attempts: 1},
			{Id: "t2", Outcome: pb.TaskOutcome_TASK_OUTCOME_FAILED, LastError: "boom"},
			{Id: "t3"},
		}}, nil
	})
	r := e.get("/namespaces/ns/extraction_graphs/g1/extraction_policies/embed/tasks?content_id=c1&start_id=t0&limit=3")
	if r.status != 200 {
		t.Fatalf("tasks = %d %s", r.status, r.body)
	}
	var body struct {
		Tasks []map[string]any `json:"tasks"`
		Total int              `json:"total"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || body.Total != 3 || len(body.Tasks) != 3 {
		t.Fatalf("body %s", r.body)
	}
	t1 := body.Tasks[0]
	if t1["id"] != "t1" || t1["extractor"] != "x" || t1["extraction_policy_id"] != "embed" || t1["namespace"] != "ns" ||
		t1["outcome"] != "success" || t1["content_metadata"].(map[string]any)["id"] != "c1" ||
		t1["input_params"].(map[string]any)["k"] != 1.0 || t1["created_at"] != 5.0 || t1["completed_at"] != 9.0 {
		t.Fatalf("task JSON %v", t1)
	}
	if body.Tasks[1]["outcome"] != "failed" || body.Tasks[1]["last_error"] != "boom" || body.Tasks[2]["outcome"] != "unknown" {
		t.Fatalf("outcomes %v", body.Tasks)
	}
	got := requests[*pb.ListTasksRequest](e.fake, "ListTasks")[0]
	want := &pb.ListTasksRequest{Namespace: "ns", GraphName: "g1", Policy: "embed", ContentId: "c1", StartId: "t0", Limit: 3}
	if !proto.Equal(got, want) {
		t.Fatalf("request %v", got)
	}
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/extraction_policies/nope/tasks"), 404, codeNotFound)
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/extraction_policies/embed/tasks?limit=x"), 400, codeInvalidArgument)
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/extraction_policies/embed/tasks?content_id=a%2Fb"), 400, codeInvalidID)
}

func TestStreamContent(t *testing.T) {
	e := newEnv(t)
	withGraphs(e)
	e.fake.watch = func(r *pb.WatchContentRequest, ss grpc.ServerStream) error {
		for i, id := range []string{"a", "b"} {
			c := sampleContent()
			c.Id, c.ChangeOffset = id, r.GetAfterOffset()+uint64(i)+1
			if err := ss.SendMsg(c); err != nil {
				return err
			}
		}
		return status.Error(codes.Unavailable, "leader lost")
	}
	req, _ := http.NewRequest(http.MethodGet, e.http.URL+"/namespaces/ns/extraction_graphs/g1/extraction_policies/embed/content/stream", nil)
	req.Header.Set("Last-Event-ID", "40")
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream = %d %v", resp.StatusCode, resp.Header)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	// Two content events, then an error event when the coordinator stream fails.
	if len(lines) != 9 || lines[0] != "id: 41" || lines[3] != "id: 42" || lines[6] != "event: error" {
		t.Fatalf("events:\n%s", strings.Join(lines, "\n"))
	}
	var c map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[4], "data: ")), &c); err != nil || c["id"] != "b" || c["source"] != "chunker" {
		t.Fatalf("event data %q", lines[4])
	}
	if !strings.Contains(lines[7], `"code":"unavailable"`) {
		t.Fatalf("error event %q", lines[7])
	}
	got := requests[*pb.WatchContentRequest](e.fake, "WatchContent")[0]
	if got.GetNamespace() != "ns" || got.GetGraphName() != "g1" || got.GetPolicy() != "embed" || got.GetAfterOffset() != 40 {
		t.Fatalf("watch request %v", got)
	}

	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/extraction_policies/nope/content/stream"), 404, codeNotFound)
	expectError(t, e.get("/namespaces/ns/extraction_graphs/g1/extraction_policies/embed/content/stream?after=x"), 400, codeInvalidArgument)
}
