package state

import (
	"strings"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func TestCreateContentDefaultsAndVersions(t *testing.T) {
	h := newHarness(t)
	h.setup()
	in := content("ns", "doc", "h1", "g")
	in.Labels = map[string]string{"lang": `"en"`}
	r := h.ok(contentCmd(in))
	ts1 := h.ts
	in.Labels["lang"] = `"mutated by caller"` // the store must not alias inputs
	c, ok := h.store().Content("ns", "doc")
	if !ok || c.Version != 1 || !c.Latest || c.Source != SourceIngestion || c.RootContentId != "doc" ||
		c.CreatedAt != ts1 || c.ChangeOffset != 1 || c.Labels["lang"] != `"en"` {
		t.Fatalf("content = %v", c)
	}
	if r.Contents[0].Id != "doc" || !r.Contents[0].Created {
		t.Fatalf("ref = %v", r.Contents[0])
	}

	// Same hash: no-op.
	r = h.ok(contentCmd(content("ns", "doc", "h1", "g")))
	if r.Contents[0].Created || r.Contents[0].Version != 1 {
		t.Fatalf("dedupe ref = %v", r.Contents[0])
	}
	if c2, _ := h.store().Content("ns", "doc"); c2 != c {
		t.Fatal("dedupe replaced the message")
	}

	// Different hash: version 2, v1 demoted with a new message.
	r = h.ok(contentCmd(content("ns", "doc", "h2", "g")))
	if !r.Contents[0].Created || r.Contents[0].Version != 2 {
		t.Fatalf("new version ref = %v", r.Contents[0])
	}
	if !c.Latest {
		t.Fatal("handed-out v1 message was mutated")
	}
	v1, _ := h.store().ContentVersion("ns", "doc", 1)
	v2, _ := h.store().Content("ns", "doc")
	if v1.Latest || !v2.Latest || v2.Version != 2 || v2.ChangeOffset != 2 {
		t.Fatalf("v1=%v v2=%v", v1, v2)
	}
	if vs := h.store().ContentVersions("ns", "doc"); len(vs) != 2 || vs[0].Version != 1 || vs[1].Version != 2 {
		t.Fatalf("versions = %v", vs)
	}

	// Tombstoned content with the same hash comes back as a new version.
	h.ok(&pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: []string{"doc"}}}})
	r = h.ok(contentCmd(content("ns", "doc", "h2", "g")))
	if !r.Contents[0].Created || r.Contents[0].Version != 3 {
		t.Fatalf("after tombstone ref = %v", r.Contents[0])
	}
	if c3, _ := h.store().Content("ns", "doc"); c3.Tombstoned {
		t.Fatal("new version is tombstoned")
	}

	// One NEW_CONTENT change per created version, detail = version.
	var versions []string
	for _, ch := range h.store().UnprocessedChanges(0) {
		if ch.Type == pb.ChangeType_CHANGE_TYPE_NEW_CONTENT {
			versions = append(versions, ch.Detail)
		}
	}
	if strings.Join(versions, ",") != "1,2,3" {
		t.Fatalf("NEW_CONTENT details = %v", versions)
	}
	h.checkIndexes()
}

func TestCreateContentChildAndAddGraph(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(graphCmd("ns", "g2", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	parent := content("ns", "root", "h1", "g")
	kid := content("ns", "kid", "h2", "g")
	kid.ParentId, kid.Source = "root", "chunker"
	grandkid := content("ns", "gk", "h3", "g")
	grandkid.ParentId, grandkid.Source = "kid", "embedder"
	// Parent created earlier in the same batch counts.
	h.ok(contentCmd(parent, kid, grandkid))
	gk, _ := h.store().Content("ns", "gk")
	if gk.RootContentId != "root" || gk.Source != "embedder" {
		t.Fatalf("grandkid = %v", gk)
	}
	tree := h.store().ContentTree("ns", "root")
	if len(tree) != 3 || tree[0].Id != "root" || tree[1].Id != "kid" || tree[2].Id != "gk" {
		t.Fatalf("tree = %v", tree)
	}
	// Same bytes into a second graph: no new version, graph added.
	r := h.ok(contentCmd(content("ns", "root", "h1", "g2")))
	if r.Contents[0].Created {
		t.Fatal("same hash created a version")
	}
	c, _ := h.store().Content("ns", "root")
	if strings.Join(c.GraphNames, ",") != "g,g2" || c.Version != 1 {
		t.Fatalf("graphs = %v", c.GraphNames)
	}
	found := false
	for _, ch := range h.store().UnprocessedChanges(0) {
		found = found || (ch.Type == pb.ChangeType_CHANGE_TYPE_ADD_GRAPH_TO_CONTENT && ch.ObjectId == "root" && ch.Detail == "g2")
	}
	if !found {
		t.Fatal("no ADD_GRAPH_TO_CONTENT change")
	}
	h.checkIndexes()
}

func TestCreateContentErrors(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(contentCmd(content("ns", "dead", "h", "g")))
	h.ok(&pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: []string{"dead"}}}})
	withParent := func(id, parent string) *pb.Content {
		c := content("ns", id, "h", "g")
		c.ParentId = parent
		return c
	}
	withLabels := func(l map[string]string) *pb.Content {
		c := content("ns", "l", "h", "g")
		c.Labels = l
		return c
	}
	cases := []struct {
		name string
		code pb.ErrorCode
		cmd  *pb.Command
	}{
		{"empty", cInvalid, contentCmd()},
		{"nil entry", cNotFound, contentCmd(nil)}, // decodes as an empty entry
		{"no namespace", cNotFound, contentCmd(content("zz", "a", "h"))},
		{"unknown graph", cNotFound, contentCmd(content("ns", "a", "h", "nope"))},
		{"empty id", cInvalid, contentCmd(content("ns", "", "h"))},
		{"slash", cInvalid, contentCmd(content("ns", "a/b", "h"))},
		{"dotdot", cInvalid, contentCmd(content("ns", "a..b", "h"))},
		{"space", cInvalid, contentCmd(content("ns", "a b", "h"))},
		{"control", cInvalid, contentCmd(content("ns", "a\x01", "h"))},
		{"too long", cInvalid, contentCmd(content("ns", strings.Repeat("x", 129), "h"))},
		{"missing parent", cNotFound, contentCmd(withParent("a", "nope"))},
		{"tombstoned parent", cNotFound, contentCmd(withParent("a", "dead"))},
		{"own parent", cInvalid, contentCmd(withParent("a", "a"))},
		{"label not json", cInvalid, contentCmd(withLabels(map[string]string{"k": "en"}))},
		{"label empty key", cInvalid, contentCmd(withLabels(map[string]string{"": `1`}))},
		// Atomic batch: the valid first entry must not be created.
		{"batch", cNotFound, contentCmd(content("ns", "ok1", "h", "g"), content("ns", "bad", "h", "nope"))},
	}
	for _, c := range cases {
		t.Log(c.name)
		h.fail(c.code, c.cmd)
	}
	if _, ok := h.store().Content("ns", "ok1"); ok {
		t.Fatal("half-applied batch")
	}
	h.ok(contentCmd(content("ns", strings.Repeat("x", 128), "h")))
}

func TestUpdateLabels(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(contentCmd(content("ns", "doc", "h", "g")))
	upd := func(id string, l map[string]string) *pb.Command {
		return &pb.Command{Op: &pb.Command_UpdateLabels{UpdateLabels: &pb.UpdateLabelsCmd{Namespace: "ns", ContentId: id, Labels: l}}}
	}
	before, _ := h.store().Content("ns", "doc")
	h.ok(upd("doc", map[string]string{"size": "10", "lang": `"en"`}))
	after, _ := h.store().Content("ns", "doc")
	if len(before.Labels) != 0 || after.Labels["size"] != "10" || after.Version != 1 {
		t.Fatalf("before=%v after=%v", before, after)
	}
	h.ok(upd("doc", map[string]string{"x": "true"})) // replace, not merge
	if c, _ := h.store().Content("ns", "doc"); len(c.Labels) != 1 {
		t.Fatalf("labels = %v", c.Labels)
	}
	h.fail(cNotFound, upd("nope", nil))
	h.fail(cInvalid, upd("doc", map[string]string{"x": "not json"}))
	n := 0
	for _, ch := range h.store().UnprocessedChanges(0) {
		if ch.Type == pb.ChangeType_CHANGE_TYPE_CONTENT_UPDATED && ch.ObjectId == "doc" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("CONTENT_UPDATED changes = %d", n)
	}
}

func TestTombstoneTree(t *testing.T) {
	h := newHarness(t)
	h.setup()
	root := content("ns", "root", "h1", "g")
	kid := content("ns", "kid", "h2", "g")
	kid.ParentId = "root"
	gk := content("ns", "gk", "h3", "g")
	gk.ParentId = "kid"
	other := content("ns", "other", "h4", "g")
	h.ok(contentCmd(root, kid, gk, other))
	h.ok(contentCmd(content("ns", "root", "h1b", "g"))) // v2
	task := h.newTask("ns", "g", "embedder", "embed", "gk", 1)
	done := h.newTask("ns", "g", "chunker", "chunk", "root", 2)
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{NewTasks: []*pb.Task{task, done},
		Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex1"}, {TaskId: done.Id, ExecutorId: "ex1"}}}))
	h.ok(completeCmd(done.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))

	tomb := func(ids ...string) *pb.Command {
		return &pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: ids}}}
	}
	r := h.fail(cNotFound, tomb("root", "missing1", "missing2"))
	if !strings.Contains(r.Error, "missing1, missing2") {
		t.Fatalf("error does not list missing ids: %s", r.Error)
	}
	h.fail(cInvalid, tomb())
	h.fail(cNotFound, &pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "zz", ContentIds: []string{"root"}}}})
	h.ok(tomb("root"))

	for _, id := range []string{"root", "kid", "gk"} {
		for _, v := range h.store().ContentVersions("ns", id) {
			if !v.Tombstoned {
				t.Fatalf("%s v%d not tombstoned", id, v.Version)
			}
		}
	}
	if o, _ := h.store().Content("ns", "other"); o.Tombstoned {
		t.Fatal("unrelated content tombstoned")
	}
	tk, _ := h.store().Task(task.Id)
	if tk.Outcome != pb.TaskOutcome_TASK_OUTCOME_FAILED || tk.LastError != "content deleted" || tk.ExecutorId != "" {
		t.Fatalf("task of deleted content = %v", tk)
	}
	if dk, _ := h.store().Task(done.Id); dk.Outcome != pb.TaskOutcome_TASK_OUTCOME_SUCCESS {
		t.Fatalf("finished task changed: %v", dk)
	}
	if tr := h.store().ContentTree("ns", "root"); tr != nil {
		t.Fatalf("tree of deleted content = %v", tr)
	}
	if done, err := h.store().ContentDone("ns", "root"); !done || err != nil {
		t.Fatalf("deleted content done=%v err=%v", done, err)
	}
	n := 0
	for _, ch := range h.store().UnprocessedChanges(0) {
		if ch.Type == pb.ChangeType_CHANGE_TYPE_TOMBSTONE_CONTENT_TREE {
			n++
			if ch.ObjectId != "root" {
				t.Fatalf("tombstone change for %s", ch.ObjectId)
			}
		}
	}
	if n != 1 {
		t.Fatalf("tombstone changes = %d", n)
	}
	h.checkIndexes()
}

func TestListContent(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(graphCmd("ns", "g2", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	var cs []*pb.Content
	for _, id := range []string{"e", "a", "c", "b", "d"} {
		c := content("ns", id, "h"+id, "g")
		c.Labels = map[string]string{"n": map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}[id]}
		cs = append(cs, c)
	}
	kid := content("ns", "k1", "hk", "g2")
	kid.ParentId, kid.Source = "a", "chunker"
	cs = append(cs, kid)
	h.ok(contentCmd(cs...))
	h.ok(&pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: []string{"e"}}}})

	ids := func(cs []*pb.Content) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.Id)
		}
		return strings.Join(s, ",")
	}
	cases := []struct {
		q     ContentQuery
		want  string
		total uint64
	}{
		{ContentQuery{Namespace: "ns"}, "a,b,c,d,k1", 5},
		{ContentQuery{Namespace: "ns", Tombstoned: true}, "a,b,c,d,e,k1", 6},
		{ContentQuery{Namespace: "ns", Limit: 2}, "a,b", 5},
		{ContentQuery{Namespace: "ns", StartID: "b", Limit: 2}, "c,d", 5},
		{ContentQuery{Namespace: "ns", StartID: "bb"}, "c,d,k1", 5},
		{ContentQuery{Namespace: "ns", Graph: "g2"}, "k1", 1},
		{ContentQuery{Namespace: "ns", Source: "ingestion"}, "a,b,c,d", 4},
		{ContentQuery{Namespace: "ns", Source: "chunker"}, "k1", 1},
		{ContentQuery{Namespace: "ns", ParentID: "a"}, "k1", 1},
		{ContentQuery{Namespace: "ns", RootID: "a"}, "a,k1", 2},
		{ContentQuery{Namespace: "ns", Labels: []string{"n>2"}}, "c,d", 2},
		{ContentQuery{Namespace: "ns", Labels: []string{"n>=2", "n!=4"}}, "b,c", 2},
		{ContentQuery{Namespace: "other"}, "", 0},
		{ContentQuery{}, "a,b,c,d,k1", 5},
	}
	for _, c := range cases {
		got, total, err := h.store().ListContent(c.q)
		if err != nil {
			t.Fatalf("%+v: %v", c.q, err)
		}
		if ids(got) != c.want || total != c.total {
			t.Errorf("%+v: got %s (total %d), want %s (total %d)", c.q, ids(got), total, c.want, c.total)
		}
	}
	_, _, err := h.store().ListContent(ContentQuery{Namespace: "ns", Labels: []string{"bad"}})
	var se *Error
	if err == nil || !asError(err, &se) || se.Code != cInvalid {
		t.Fatalf("bad filter err = %v", err)
	}
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}

func TestContentSince(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(contentCmd(content("ns", "a", "h1", "g")))
	kid := content("ns", "b", "h2", "g")
	kid.ParentId, kid.Source = "a", "chunker"
	h.ok(contentCmd(kid))
	h.ok(contentCmd(content("ns", "c", "h3", "g")))
	h.ok(contentCmd(content("ns", "a", "h1-new", "g"))) // a moves to offset 4
	h.ok(&pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: []string{"c"}}}})
	got := h.store().ContentSince("ns", "", "", 0, 0)
	var s []string
	for _, c := range got {
		s = append(s, c.Id)
	}
	if strings.Join(s, ",") != "b,a" {
		t.Fatalf("since 0 = %v", s)
	}
	if got := h.store().ContentSince("ns", "g", "chunker", 0, 0); len(got) != 1 || got[0].Id != "b" {
		t.Fatalf("policy filter = %v", got)
	}
	if got := h.store().ContentSince("ns", "", "", 2, 0); len(got) != 1 || got[0].Id != "a" {
		t.Fatalf("after 2 = %v", got)
	}
	if got := h.store().ContentSince("ns", "", "", 0, 1); len(got) != 1 {
		t.Fatalf("limit = %v", got)
	}
	if got := h.store().ContentSince("ns", "other", "", 0, 0); len(got) != 0 {
		t.Fatalf("graph filter = %v", got)
	}
}

func TestContentDone(t *testing.T) {
	h := newHarness(t)
	h.setup()
	if _, err := h.store().ContentDone("ns", "nope"); err == nil {
		t.Fatal("want NOT_FOUND")
	}
	h.ok(contentCmd(content("ns", "doc", "h", "g")))
	done := func() bool {
		d, err := h.store().ContentDone("ns", "doc")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if done() {
		t.Fatal("done before the scheduler processed NEW_CONTENT")
	}
	processAll := func(tasks ...*pb.Task) {
		var ids []uint64
		for _, c := range h.store().UnprocessedChanges(0) {
			ids = append(ids, c.Id)
		}
		var as []*pb.Assignment
		for _, t := range tasks {
			as = append(as, &pb.Assignment{TaskId: t.Id, ExecutorId: "ex1"})
		}
		h.ok(schedCmd(&pb.SchedulerUpdateCmd{ProcessedChangeIds: ids, NewTasks: tasks, Assignments: as}))
	}
	t1 := h.newTask("ns", "g", "chunker", "chunk", "doc", 1)
	processAll(t1)
	if done() {
		t.Fatal("done with an unfinished task")
	}
	// The task produces a child; the child's NEW_CONTENT is unprocessed.
	kid := content("ns", ChildContentID(t1.Id, 0), "hk", "g")
	kid.ParentId, kid.Source, kid.SourceTaskId = "doc", "chunker", t1.Id
	h.ok(contentCmd(kid))
	h.ok(completeCmd(t1.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))
	if done() {
		t.Fatal("done while the child's change is unprocessed")
	}
	t2 := h.newTask("ns", "g", "embedder", "embed", kid.Id, 1)
	processAll(t2)
	if done() {
		t.Fatal("done while the child's task runs")
	}
	h.ok(completeCmd(t2.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED, 1, 0))
	if !done() {
		t.Fatal("not done after every task is terminal")
	}
	// A label update makes it not done until the scheduler looked at it.
	h.ok(&pb.Command{Op: &pb.Command_UpdateLabels{UpdateLabels: &pb.UpdateLabelsCmd{Namespace: "ns", ContentId: "doc", Labels: map[string]string{"a": "1"}}}})
	if done() {
		t.Fatal("done with an unprocessed CONTENT_UPDATED")
	}
	processAll()
	if !done() {
		t.Fatal("not done after processing")
	}
}

// Uploading the same bytes into a second graph records ADD_GRAPH_TO_CONTENT;
// the scheduler treats it as a content change (it plans g2's policies), so
// ContentDone must too (issue 13, item 3: one rule for both).
func TestContentDoneWaitsForAddedGraph(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(graphCmd("ns", "g2", &pb.ExtractionPolicy{Name: "chunker2", Extractor: "chunk"}))
	h.ok(contentCmd(content("ns", "doc", "h", "g")))
	var ids []uint64
	for _, c := range h.store().UnprocessedChanges(0) {
		ids = append(ids, c.Id)
	}
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{ProcessedChangeIds: ids}))
	if d, err := h.store().ContentDone("ns", "doc"); !d || err != nil {
		t.Fatalf("done = %v, %v after processing NEW_CONTENT", d, err)
	}
	h.ok(contentCmd(content("ns", "doc", "h", "g2")))
	pending := h.store().UnprocessedChanges(0)
	if len(pending) != 1 || pending[0].Type != pb.ChangeType_CHANGE_TYPE_ADD_GRAPH_TO_CONTENT {
		t.Fatalf("pending changes %v, want one ADD_GRAPH_TO_CONTENT", pending)
	}
	if !IsContentChange(pending[0].Type) {
		t.Fatal("ADD_GRAPH_TO_CONTENT is not a content change")
	}
	if d, _ := h.store().ContentDone("ns", "doc"); d {
		t.Fatal("done while the second graph's change is unprocessed")
	}
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{ProcessedChangeIds: []uint64{pending[0].Id}}))
	if d, _ := h.store().ContentDone("ns", "doc"); !d {
		t.Fatal("not done after processing ADD_GRAPH_TO_CONTENT")
	}
	h.checkIndexes()
}
