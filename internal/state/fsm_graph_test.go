package state

import (
	"strings"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

const (
	cInvalid  = pb.ErrorCode_ERROR_CODE_INVALID
	cNotFound = pb.ErrorCode_ERROR_CODE_NOT_FOUND
	cExists   = pb.ErrorCode_ERROR_CODE_ALREADY_EXISTS
	cConflict = pb.ErrorCode_ERROR_CODE_CONFLICT
)

func TestCreateNamespace(t *testing.T) {
	h := newHarness(t)
	h.ok(nsCmd("default"))
	ns, ok := h.store().Namespace("default")
	if !ok || ns.CreatedAt != h.ts {
		t.Fatalf("namespace = %v", ns)
	}
	created := ns.CreatedAt
	h.ok(nsCmd("default")) // existing: no-op
	if ns2, _ := h.store().Namespace("default"); ns2.CreatedAt != created {
		t.Fatal("re-create changed the namespace")
	}
	for _, bad := range []string{"", "-x", "a b", "a/b", strings.Repeat("a", 129), "ü"} {
		h.fail(cInvalid, nsCmd(bad))
	}
	h.ok(nsCmd("a.b_c-1"))
	if got := len(h.store().Namespaces()); got != 2 {
		t.Fatalf("namespaces = %d", got)
	}
}

func TestCreateGraph(t *testing.T) {
	h := newHarness(t)
	h.setup()
	g, ok := h.store().Graph("ns", "g")
	if !ok {
		t.Fatal("graph missing")
	}
	if g.Id != GraphID("ns", "g") || g.CreatedAt == 0 || len(g.Policies) != 2 {
		t.Fatalf("graph = %v", g)
	}
	p := g.Policies[0]
	if p.Id != PolicyID("ns", "g", "chunker") || p.GraphName != "g" || p.Namespace != "ns" || p.InputParamsJson != "{}" {
		t.Fatalf("policy = %v", p)
	}
	// Identical spec: OK and unchanged.
	h.ok(graphCmd("ns", "g",
		&pb.ExtractionPolicy{Name: "chunker", Extractor: "chunk"},
		&pb.ExtractionPolicy{Name: "embedder", Extractor: "embed", InputParamsJson: `{"dim": 3}`, ContentSource: "chunker"},
	))
	if g2, _ := h.store().Graph("ns", "g"); g2 != g {
		t.Fatal("identical re-create replaced the graph")
	}
	h.fail(cExists, graphCmd("ns", "g", &pb.ExtractionPolicy{Name: "chunker", Extractor: "chunk"}))
}

func TestCreateGraphErrors(t *testing.T) {
	h := newHarness(t)
	h.setup()
	pol := func(name, extractor, params, source string, filter ...string) *pb.ExtractionPolicy {
		return &pb.ExtractionPolicy{Name: name, Extractor: extractor, InputParamsJson: params, ContentSource: source, Filter: filter}
	}
	cases := []struct {
		name string
		code pb.ErrorCode
		cmd  *pb.Command
		msg  string
	}{
		{"missing namespace", cNotFound, graphCmd("nope", "x", pol("a", "chunk", "", "")), "namespace"},
		{"bad graph name", cInvalid, graphCmd("ns", "-x", pol("a", "chunk", "", "")), "name"},
		{"no policies", cInvalid, graphCmd("ns", "x"), "no extraction policies"},
		{"bad policy name", cInvalid, graphCmd("ns", "x", pol("a b", "chunk", "", "")), "name"},
		{"duplicate policy", cInvalid, graphCmd("ns", "x", pol("a", "chunk", "", ""), pol("a", "chunk", "", "")), "twice"},
		{"unknown extractor", cNotFound, graphCmd("ns", "x", pol("a", "ocr", "", "")), `"ocr"`},
		{"params violate schema", cInvalid, graphCmd("ns", "x", pol("a", "embed", `{"dim":"x"}`, "")), "schema"},
		{"params extra field", cInvalid, graphCmd("ns", "x", pol("a", "embed", `{"other":1}`, "")), "schema"},
		{"params not object", cInvalid, graphCmd("ns", "x", pol("a", "chunk", `[1]`, "")), "object"},
		{"params not json", cInvalid, graphCmd("ns", "x", pol("a", "chunk", `{`, "")), "JSON"},
		{"bad filter", cInvalid, graphCmd("ns", "x", pol("a", "chunk", "", "", "novalue")), "filter"},
		{"unknown source", cInvalid, graphCmd("ns", "x", pol("a", "chunk", "", "zzz")), "content_source"},
		{"self source", cInvalid, graphCmd("ns", "x", pol("a", "chunk", "", "a")), "content_source"},
		{"source cycle", cInvalid, graphCmd("ns", "x", pol("a", "chunk", "", "b"), pol("b", "chunk", "", "a")), "cycle"},
		{"missing graph", cInvalid, &pb.Command{Op: &pb.Command_CreateGraph{CreateGraph: &pb.CreateExtractionGraphCmd{}}}, "missing"},
	}
	for _, c := range cases {
		r := h.fail(c.code, c.cmd)
		if !strings.Contains(r.Error, c.msg) {
			t.Fatalf("%s: error %q does not mention %q", c.name, r.Error, c.msg)
		}
	}
	// A valid chain and a valid filter work.
	h.ok(graphCmd("ns", "chain", pol("a", "chunk", "", "", "lang=en", "size>=3"), pol("b", "chunk", "", "a"), pol("c", "embed", `{"dim":4}`, "b")))
}

func TestGraphLinks(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(graphCmd("ns", "g2", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	h.ok(graphCmd("ns", "g3", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	link := func(from, source, to string) *pb.Command {
		return &pb.Command{Op: &pb.Command_CreateLink{CreateLink: &pb.CreateGraphLinkCmd{Link: &pb.GraphLink{
			Namespace: "ns", GraphName: from, ContentSource: source, LinkedGraphName: to}}}}
	}
	h.ok(link("g", "chunker", "g2"))
	h.ok(link("g", "chunker", "g2")) // duplicate: no-op
	h.ok(link("g2", "", "g3"))
	if got := h.store().Links("ns", "g"); len(got) != 1 || got[0].LinkedGraphName != "g2" {
		t.Fatalf("links of g = %v", got)
	}
	if got := h.store().Links("ns", ""); len(got) != 2 {
		t.Fatalf("all links = %v", got)
	}
	h.fail(cInvalid, link("g3", "", "g")) // g -> g2 -> g3 -> g
	h.fail(cInvalid, link("g", "", "g"))  // self
	h.fail(cInvalid, link("g", "nope", "g3"))
	h.fail(cNotFound, link("zz", "", "g3"))
	h.fail(cNotFound, link("g", "", "zz"))
	h.fail(cNotFound, &pb.Command{Op: &pb.Command_CreateLink{CreateLink: &pb.CreateGraphLinkCmd{Link: &pb.GraphLink{
		Namespace: "zz", GraphName: "g", LinkedGraphName: "g2"}}}})
	h.fail(cInvalid, &pb.Command{Op: &pb.Command_CreateLink{CreateLink: &pb.CreateGraphLinkCmd{}}})
	h.checkIndexes()
}

func TestDeleteGraph(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(graphCmd("ns", "g2", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	h.ok(&pb.Command{Op: &pb.Command_CreateLink{CreateLink: &pb.CreateGraphLinkCmd{Link: &pb.GraphLink{
		Namespace: "ns", GraphName: "g2", LinkedGraphName: "g"}}}})
	// only-g loses its only graph; both-g keeps g2.
	h.ok(contentCmd(content("ns", "only-g", "h1", "g"), content("ns", "both", "h2", "g", "g2")))
	child := content("ns", "kid", "h3", "g")
	child.ParentId = "only-g"
	h.ok(contentCmd(child))
	task := h.newTask("ns", "g", "chunker", "chunk", "both", 1)
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{NewTasks: []*pb.Task{task}, Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex1"}}}))

	h.fail(cNotFound, &pb.Command{Op: &pb.Command_DeleteGraph{DeleteGraph: &pb.DeleteExtractionGraphCmd{Namespace: "ns", Name: "zz"}}})
	h.ok(&pb.Command{Op: &pb.Command_DeleteGraph{DeleteGraph: &pb.DeleteExtractionGraphCmd{Namespace: "ns", Name: "g"}}})

	if _, ok := h.store().Graph("ns", "g"); ok {
		t.Fatal("graph still there")
	}
	if l := h.store().Links("ns", ""); len(l) != 0 {
		t.Fatalf("links survived: %v", l)
	}
	c, _ := h.store().Content("ns", "only-g")
	k, _ := h.store().Content("ns", "kid")
	if !c.Tombstoned || !k.Tombstoned {
		t.Fatalf("orphan tree not tombstoned: %v %v", c, k)
	}
	b, _ := h.store().Content("ns", "both")
	if b.Tombstoned || len(b.GraphNames) != 1 || b.GraphNames[0] != "g2" {
		t.Fatalf("content of two graphs = %v", b)
	}
	tk, _ := h.store().Task(task.Id)
	if tk.Outcome != pb.TaskOutcome_TASK_OUTCOME_FAILED || tk.ExecutorId != "" || len(h.store().TasksAssignedTo("ex1")) != 0 {
		t.Fatalf("task of deleted graph = %v", tk)
	}
	var sawDelete, sawTomb bool
	for _, ch := range h.store().UnprocessedChanges(0) {
		sawDelete = sawDelete || (ch.Type == pb.ChangeType_CHANGE_TYPE_EXTRACTION_GRAPH_DELETED && ch.ObjectId == "g")
		sawTomb = sawTomb || (ch.Type == pb.ChangeType_CHANGE_TYPE_TOMBSTONE_CONTENT_TREE && ch.ObjectId == "only-g")
	}
	if !sawDelete || !sawTomb {
		t.Fatalf("changes: delete=%v tombstone=%v", sawDelete, sawTomb)
	}
	h.checkIndexes()
}
