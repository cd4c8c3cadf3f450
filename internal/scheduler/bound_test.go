package scheduler

import (
	"fmt"
	"slices"
	"testing"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// unfinished counts a namespace's unfinished tasks.
func (e *env) unfinished(namespace string) int { return e.store.UnfinishedTasks(namespace) }

// A namespace at MaxUnfinishedTasks gets no new tasks: its content waits
// unplanned (and not done) until tasks finish, in upload order, while
// another namespace's content behind it is planned at once.
func TestUnfinishedTasksPerNamespaceAreBounded(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxUnfinishedTasks = 3
	e.cfg.BatchChanges = 2
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.do(&pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: "other"}})
	e.do(&pb.Command_CreateGraph{CreateGraph: &pb.CreateExtractionGraphCmd{Graph: &pb.ExtractionGraph{
		Name: "g", Namespace: "other", Policies: []*pb.ExtractionPolicy{pol("p", "embed", "")}}}})
	var docs []string
	for i := range 7 {
		docs = append(docs, fmt.Sprintf("doc%d", i))
		e.upload(docs[i], "text/plain", "h", nil, "g")
	}
	e.do(&pb.Command_CreateContent{CreateContent: &pb.CreateContentCmd{Contents: []*pb.Content{{
		Id: "late", Namespace: "other", Name: "late", MimeType: "text/plain", Hash: "h",
		StorageUrl: "file:///blobs/late", Source: state.SourceIngestion, GraphNames: []string{"g"}}}}})

	drain := func() {
		for range 20 {
			if e.plan() == nil {
				return
			}
		}
		t.Fatal("the planner never settles")
	}
	drain()
	if n := e.unfinished(ns); n != 3 {
		t.Fatalf("%d unfinished tasks in %s, want the bound 3", n, ns)
	}
	if n := e.unfinished("other"); n != 1 {
		t.Fatalf("the other namespace's upload behind the held-back ones got %d tasks, want 1", n)
	}
	planned := func() (with []string) {
		for _, d := range docs {
			if len(e.taskKeys(d)) > 0 {
				with = append(with, d)
			}
		}
		return with
	}
	if got := planned(); !slices.Equal(got, docs[:3]) {
		t.Fatalf("content with tasks %v, want the first three %v", got, docs[:3])
	}
	if done, _ := e.store.ContentDone(ns, "doc5"); done {
		t.Fatal("held-back content reported done")
	}
	if left := e.store.UnprocessedChanges(0); len(left) != 4 {
		t.Fatalf("%d changes unprocessed, want the 4 held back", len(left))
	}

	// Tasks finishing make room, in upload order.
	e.succeed(e.taskFor("g", "p", "doc0").GetId())
	e.succeed(e.taskFor("g", "p", "doc1").GetId())
	drain()
	if got := planned(); !slices.Equal(got, docs[:5]) || e.unfinished(ns) != 3 {
		t.Fatalf("after two finished: content with tasks %v (want %v), %d unfinished", got, docs[:5], e.unfinished(ns))
	}
	for range 10 {
		for _, tk := range e.store.TasksAssignedTo("a") {
			e.succeed(tk.GetId())
		}
		drain()
	}
	if got := planned(); !slices.Equal(got, docs) {
		t.Fatalf("after draining: content with tasks %v, want all %v", got, docs)
	}
	for _, d := range docs {
		if done, _ := e.store.ContentDone(ns, d); !done {
			t.Fatalf("%s not done after draining", d)
		}
	}
}

// A new version held back at the bound is not done: the old version is
// not superseded (tombstoned, its blobs collected) before the new one has
// even been planned. One upload may take a namespace past the bound (it
// gets all its policies' tasks), so a task of the old version can finish
// while the namespace stays at the bound.
func TestHeldBackNewVersionDoesNotSupersedeTheOldOne(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxUnfinishedTasks = 2
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p1", "embed", ""), pol("p2", "embed", ""), pol("p3", "embed", ""))
	e.upload("doc", "text/plain", "v1", nil, "g")
	e.plan()
	if n := e.unfinished(ns); n != 3 {
		t.Fatalf("%d unfinished tasks, want 3 (one upload's policies all get theirs)", n)
	}
	v1p1 := e.taskFor("g", "p1", "doc").GetId()
	e.upload("doc", "text/plain", "v2", nil, "g") // held back: 3 unfinished
	e.plan()
	if len(e.taskKeys("doc")) != 3 {
		t.Fatalf("v2 planned at the bound: %v", e.taskKeys("doc"))
	}
	e.succeed(v1p1) // 2 left: still at the bound
	e.plan()
	if v1, _ := e.store.ContentVersion(ns, "doc", 1); v1.GetTombstoned() {
		t.Fatal("v1 superseded while v2 is not even planned")
	}
	for range 5 {
		for _, tk := range e.store.TasksAssignedTo("a") {
			e.succeed(tk.GetId())
		}
		e.plan()
	}
	if v1, _ := e.store.ContentVersion(ns, "doc", 1); !v1.GetTombstoned() {
		t.Fatal("v1 not superseded once v2 was planned and done")
	}
}
