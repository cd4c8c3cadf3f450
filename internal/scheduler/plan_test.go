package scheduler

import (
	"slices"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"google.golang.org/protobuf/proto"
)

func TestUploadCreatesTasksForMatchingPolicies(t *testing.T) {
	e := newEnv(t)
	e.executor("ex1", 0, ext("embed"), ext("summarize"))
	e.graph("g", pol("p-embed", "embed", ""), pol("p-sum", "summarize", ""), pol("p-chained", "embed", "p-sum"))
	e.graph("other", pol("o1", "embed", ""))
	e.upload("doc1", "text/plain", "h1", nil, "g")

	cmd := e.plan()
	if cmd == nil || len(cmd.GetProcessedChangeIds()) == 0 {
		t.Fatalf("plan did nothing: %v", cmd)
	}
	if cmd.GetSchedulerNode() != "n1" || cmd.GetTerm() != 3 {
		t.Fatalf("scheduler_node/term = %q/%d, want n1/3", cmd.GetSchedulerNode(), cmd.GetTerm())
	}
	got := e.taskKeys("doc1")
	want := []string{"g/p-embed", "g/p-sum"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("tasks = %v, want %v (chained policy and other graph must not run on ingested content)", got, want)
	}
	tk := e.taskFor("g", "p-embed", "doc1")
	if tk.GetId() != state.TaskID(ns, "g", "p-embed", "doc1", 1) || tk.GetExtractor() != "embed" ||
		tk.GetNamespace() != ns || tk.GetContentVersion() != 1 || tk.GetContent().GetId() != "doc1" ||
		tk.GetInputParamsJson() != `{"k":"p-embed"}` || tk.GetCreatedAt() != e.clock.Now().UnixMilli() {
		t.Fatalf("task fields wrong: %v", tk)
	}
	if tk.GetExecutorId() != "ex1" {
		t.Fatalf("task not assigned to the only executor: %q", tk.GetExecutorId())
	}
	if left := e.store.UnprocessedChanges(0); len(left) != 0 {
		t.Fatalf("changes left unprocessed: %v", left)
	}
	// Nothing new: the next pass has nothing to do, and re-planning the
	// same content does not duplicate tasks.
	if cmd := e.plan(); cmd != nil {
		t.Fatalf("second pass not empty: %v", cmd)
	}
	e.do(&pb.Command_UpdateLabels{UpdateLabels: &pb.UpdateLabelsCmd{Namespace: ns, ContentId: "doc1", Labels: map[string]string{"a": "1"}}})
	if cmd := e.plan(); len(cmd.GetNewTasks()) != 0 || len(cmd.GetProcessedChangeIds()) != 1 {
		t.Fatalf("label update re-created tasks: %v", cmd)
	}
}

func TestChainedPolicyRunsOnExtractedContent(t *testing.T) {
	e := newEnv(t)
	e.executor("ex1", 0, ext("chunk"), ext("embed"))
	e.graph("g", pol("chunks", "chunk", ""), pol("vectors", "embed", "chunks"), pol("direct", "embed", ""))
	e.upload("doc1", "text/plain", "h1", nil, "g")
	e.plan()
	chunkTask := e.taskFor("g", "chunks", "doc1")
	child := e.extract(chunkTask, 0, "text/plain")
	e.succeed(chunkTask.GetId())
	e.plan()

	got := e.taskKeys(child)
	if !slices.Equal(got, []string{"g/vectors"}) {
		t.Fatalf("tasks for extracted content = %v, want [g/vectors]", got)
	}
	vt := e.taskFor("g", "vectors", child)
	if vt.GetContent().GetSource() != "chunks" || vt.GetContent().GetRootContentId() != "doc1" {
		t.Fatalf("chained task content = %v", vt.GetContent())
	}
}

func TestLabelFilter(t *testing.T) {
	e := newEnv(t)
	e.executor("ex1", 0, ext("embed"))
	e.graph("g", pol("english", "embed", "", "lang=en"), pol("big", "embed", "", "size>10"))
	e.upload("de", "text/plain", "h1", map[string]string{"lang": jsonStr("de"), "size": "3"}, "g")
	e.upload("en", "text/plain", "h2", map[string]string{"lang": jsonStr("en"), "size": "30"}, "g")
	e.plan()
	if got := e.taskKeys("de"); len(got) != 0 {
		t.Fatalf("filtered-out content got tasks %v", got)
	}
	if got := e.taskKeys("en"); len(got) != 2 {
		t.Fatalf("matching content got tasks %v, want both policies", got)
	}
	// A label update that makes the filter match creates the task.
	e.do(&pb.Command_UpdateLabels{UpdateLabels: &pb.UpdateLabelsCmd{Namespace: ns, ContentId: "de",
		Labels: map[string]string{"lang": jsonStr("en"), "size": "3"}}})
	e.plan()
	if got := e.taskKeys("de"); !slices.Equal(got, []string{"g/english"}) {
		t.Fatalf("after label update tasks = %v, want [g/english]", got)
	}
}

func TestMimeFilter(t *testing.T) {
	e := newEnv(t)
	e.executor("ex1", 0, ext("text-only", "text/*"), ext("pdf-only", "application/pdf"), ext("any", "*/*"), ext("unrestricted"))
	e.graph("g", pol("t", "text-only", ""), pol("p", "pdf-only", ""), pol("a", "any", ""), pol("u", "unrestricted", ""))
	e.upload("txt", "text/plain; charset=utf-8", "h1", nil, "g")
	e.upload("pdf", "application/pdf", "h2", nil, "g")
	e.plan()
	got := e.taskKeys("txt")
	slices.Sort(got)
	if !slices.Equal(got, []string{"g/a", "g/t", "g/u"}) {
		t.Fatalf("text tasks = %v", got)
	}
	got = e.taskKeys("pdf")
	slices.Sort(got)
	if !slices.Equal(got, []string{"g/a", "g/p", "g/u"}) {
		t.Fatalf("pdf tasks = %v", got)
	}
}

func TestMimeAccepted(t *testing.T) {
	cases := []struct {
		accepted []string
		mime     string
		want     bool
	}{
		{nil, "anything/at-all", true},
		{[]string{"*/*"}, "image/png", true},
		{[]string{"text/*"}, "text/markdown", true},
		{[]string{"text/*"}, "textual/x", false},
		{[]string{"text/plain"}, "Text/Plain; charset=utf-8", true},
		{[]string{"text/plain; charset=utf-8"}, "text/plain", true},
		{[]string{"text/plain"}, "text/html", false},
		{[]string{"application/pdf", "image/*"}, "image/jpeg", true},
		{[]string{"application/pdf"}, "", false},
	}
	for _, c := range cases {
		if got := MimeAccepted(c.accepted, c.mime); got != c.want {
			t.Errorf("MimeAccepted(%v, %q) = %v, want %v", c.accepted, c.mime, got, c.want)
		}
	}
}

func TestGraphLinks(t *testing.T) {
	e := newEnv(t)
	e.executor("ex1", 0, ext("chunk"), ext("embed"))
	e.graph("g1", pol("chunks", "chunk", ""))
	e.graph("g2", pol("root2", "embed", ""), pol("after2", "embed", "root2"))
	e.graph("g3", pol("root3", "embed", ""))
	e.graph("g4", pol("root4", "embed", ""))
	e.link("g1", "", "g2")       // ingested content of g1 also runs g2
	e.link("g1", "chunks", "g3") // chunks of g1 feed g3
	e.link("g2", "", "g4")       // and g2's input feeds g4 (transitively)
	e.upload("doc1", "text/plain", "h1", nil, "g1")
	e.plan()
	got := e.taskKeys("doc1")
	slices.Sort(got)
	if !slices.Equal(got, []string{"g1/chunks", "g2/root2", "g4/root4"}) {
		t.Fatalf("doc tasks = %v, want g1/chunks, g2/root2, g4/root4", got)
	}
	chunk := e.extract(e.taskFor("g1", "chunks", "doc1"), 0, "text/plain")
	e.plan()
	if got := e.taskKeys(chunk); !slices.Equal(got, []string{"g3/root3"}) {
		t.Fatalf("chunk tasks = %v, want [g3/root3]", got)
	}
}

func TestAllocationSpreadsLoad(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.executor("b", 0, ext("embed"))
	e.executor("c", 0, ext("other"))
	e.graph("g", pol("p", "embed", ""))
	for i := range 6 {
		e.upload("doc"+string(rune('0'+i)), "text/plain", "h", nil, "g")
	}
	e.plan()
	counts := e.store.UnfinishedTaskCounts()
	if counts["a"] != 3 || counts["b"] != 3 || counts["c"] != 0 {
		t.Fatalf("load = %v, want a:3 b:3 c:0", counts)
	}
	// New work goes to the executor that finished its tasks.
	for _, tk := range e.store.TasksAssignedTo("a") {
		e.succeed(tk.GetId())
	}
	for i := range 4 {
		e.upload("more"+string(rune('0'+i)), "text/plain", "h", nil, "g")
	}
	e.plan()
	counts = e.store.UnfinishedTaskCounts()
	// a catches up from 0 to 3, then the tie at 3 goes to the smaller id.
	if counts["a"] != 4 || counts["b"] != 3 {
		t.Fatalf("load = %v, want a:4 b:3 (a had 0, b had 3)", counts)
	}
}

func TestCapacityCap(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 2, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	for i := range 5 {
		e.upload("doc"+string(rune('0'+i)), "text/plain", "h", nil, "g")
	}
	e.plan()
	if n := len(e.store.TasksAssignedTo("a")); n != 2 {
		t.Fatalf("assigned %d tasks to an executor with max_pending_tasks 2", n)
	}
	if n := len(e.store.PendingTasks()); n != 3 {
		t.Fatalf("pending = %d, want 3", n)
	}
	e.succeed(e.store.TasksAssignedTo("a")[0].GetId())
	e.plan()
	if n, p := len(e.store.TasksAssignedTo("a")), len(e.store.PendingTasks()); n != 2 || p != 2 {
		t.Fatalf("after one completion: assigned %d pending %d, want 2 and 2", n, p)
	}
}

func TestExecutorAddedLaterPicksUpPendingTasks(t *testing.T) {
	e := newEnv(t)
	e.executor("old", 0, ext("embed", "text/*"))
	e.graph("g", pol("p", "embed", ""))
	e.removeExecutor("old")
	e.upload("doc1", "text/plain", "h1", nil, "g")
	e.plan()
	tk := e.taskFor("g", "p", "doc1") // created although no executor offers the extractor now
	if tk.GetExecutorId() != "" {
		t.Fatalf("task assigned without executors: %v", tk)
	}
	if cmd := e.plan(); cmd != nil {
		t.Fatalf("pass without executors proposed %v", cmd)
	}
	e.executor("new", 0, ext("embed"))
	e.plan()
	if got := e.task(tk.GetId()).GetExecutorId(); got != "new" {
		t.Fatalf("pending task assigned to %q, want new", got)
	}
}

func TestExecutorRemovedTasksReassigned(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.executor("b", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	for i := range 4 {
		e.upload("doc"+string(rune('0'+i)), "text/plain", "h", nil, "g")
	}
	e.plan()
	fromA := e.store.TasksAssignedTo("a")
	if len(fromA) != 2 {
		t.Fatalf("a has %d tasks, want 2", len(fromA))
	}
	e.removeExecutor("a")
	e.plan()
	for _, tk := range fromA {
		if got := e.task(tk.GetId()).GetExecutorId(); got != "b" {
			t.Fatalf("task %s of the removed executor now on %q, want b", tk.GetId(), got)
		}
	}
}

func TestFailedTaskRetriedAfterBackoffThenTerminal(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.upload("doc1", "text/plain", "h1", nil, "g")
	e.plan()
	id := e.taskFor("g", "p", "doc1").GetId()
	const maxAttempts = 3
	backoff := time.Second
	for attempt := 1; attempt < maxAttempts; attempt++ {
		e.complete(id, pb.TaskOutcome_TASK_OUTCOME_FAILED, maxAttempts, backoff)
		tk := e.task(id)
		if tk.GetOutcome() != pb.TaskOutcome_TASK_OUTCOME_UNKNOWN || tk.GetExecutorId() != "" {
			t.Fatalf("attempt %d: failed task not back to pending: %v", attempt, tk)
		}
		wait := time.Duration(tk.GetNotBefore()-e.clock.Now().UnixMilli()) * time.Millisecond
		if wait <= 0 {
			t.Fatalf("attempt %d: no backoff (not_before %d)", attempt, tk.GetNotBefore())
		}
		e.clock.Advance(wait - time.Millisecond)
		e.plan()
		if got := e.task(id).GetExecutorId(); got != "" {
			t.Fatalf("attempt %d: reassigned %v before the backoff expired", attempt, wait)
		}
		e.clock.Advance(time.Millisecond)
		e.plan()
		if got := e.task(id).GetExecutorId(); got != "a" {
			t.Fatalf("attempt %d: not reassigned after the backoff (executor %q)", attempt, got)
		}
	}
	e.complete(id, pb.TaskOutcome_TASK_OUTCOME_FAILED, maxAttempts, backoff)
	if tk := e.task(id); tk.GetOutcome() != pb.TaskOutcome_TASK_OUTCOME_FAILED {
		t.Fatalf("task not terminal after %d attempts: %v", maxAttempts, tk)
	}
	if cmd := e.plan(); len(AllAssignments(cmd)) != 0 {
		t.Fatalf("terminal task assigned again: %v", cmd)
	}
	e.clock.Advance(time.Hour)
	if cmd := e.plan(); cmd != nil {
		t.Fatalf("pass after the terminal failure proposed %v", cmd)
	}
	if got := e.task(id); got.GetOutcome() != pb.TaskOutcome_TASK_OUTCOME_FAILED || got.GetAttempts() != maxAttempts {
		t.Fatalf("terminal task changed: %v", got)
	}
}

func gcURLs(s *state.Store) []string {
	var out []string
	for _, g := range s.GCTasks(0) {
		out = append(out, g.GetStorageUrl())
	}
	slices.Sort(out)
	return out
}

func TestNewVersionSupersedesOldAfterItsTasksFinish(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("chunk"), ext("embed"))
	e.graph("g", pol("chunks", "chunk", ""), pol("vectors", "embed", "chunks"))
	e.upload("doc", "text/plain", "v1", nil, "g")
	e.plan()
	t1 := e.taskFor("g", "chunks", "doc")
	oldChunk := e.extract(t1, 0, "text/plain")
	e.succeed(t1.GetId())
	e.plan()
	e.succeed(e.taskFor("g", "vectors", oldChunk).GetId())
	e.plan()

	if ref := e.upload("doc", "text/plain", "v2", nil, "g"); ref.GetVersion() != 2 {
		t.Fatalf("re-upload made version %d", ref.GetVersion())
	}
	cmd := e.plan()
	if len(cmd.GetTombstoneContentIds()) != 0 || len(gcURLs(e.store)) != 0 {
		t.Fatalf("old version collected before the new version's tasks ran: %v", cmd)
	}
	t2 := e.taskFor("g", "chunks", "doc")
	if t2.GetContentVersion() != 2 {
		t.Fatalf("task for the new version has version %d", t2.GetContentVersion())
	}
	newChunk := e.extract(t2, 0, "text/plain")
	e.succeed(t2.GetId())
	e.plan()
	if v1, _ := e.store.ContentVersion(ns, "doc", 1); v1.GetTombstoned() {
		t.Fatal("v1 tombstoned while the new chunk's task is unfinished")
	}
	e.succeed(e.taskFor("g", "vectors", newChunk).GetId())
	cmd = e.plan()

	if !slices.Equal(cmd.GetTombstoneContentIds(), []string{state.VersionRef(ns, "doc", 1)}) {
		t.Fatalf("tombstones = %v, want [%s]", cmd.GetTombstoneContentIds(), state.VersionRef(ns, "doc", 1))
	}
	want := []string{"file:///blobs/" + oldChunk, "file:///blobs/doc-v1"}
	slices.Sort(want)
	if got := gcURLs(e.store); !slices.Equal(got, want) {
		t.Fatalf("gc urls = %v, want %v", got, want)
	}
	if v1, ok := e.store.ContentVersion(ns, "doc", 1); !ok || !v1.GetTombstoned() {
		t.Fatalf("v1 not tombstoned: %v", v1)
	}
	if c, _ := e.store.Content(ns, oldChunk); !c.GetTombstoned() {
		t.Fatal("content extracted from v1 not tombstoned")
	}
	if c, _ := e.store.Content(ns, newChunk); c.GetTombstoned() {
		t.Fatal("content extracted from v2 tombstoned")
	}
	if cmd := e.plan(); cmd != nil {
		t.Fatalf("supersession repeated: %v", cmd)
	}
}

func TestNewVersionWithoutTasksSupersedesImmediately(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", "", "keep=true"))
	e.upload("doc", "text/plain", "v1", map[string]string{"keep": "true"}, "g")
	e.plan()
	e.upload("doc", "text/plain", "v2", nil, "g") // no policy matches v2
	cmd := e.plan()
	if !slices.Equal(cmd.GetTombstoneContentIds(), []string{state.VersionRef(ns, "doc", 1)}) {
		t.Fatalf("tombstones = %v", cmd.GetTombstoneContentIds())
	}
	if got := gcURLs(e.store); !slices.Equal(got, []string{"file:///blobs/doc-v1"}) {
		t.Fatalf("gc urls = %v", got)
	}
}

func TestDeleteCreatesGCTasks(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("chunk"))
	e.graph("g", pol("chunks", "chunk", ""))
	e.upload("doc", "text/plain", "v1", nil, "g")
	e.upload("keep", "text/plain", "k1", nil, "g")
	e.plan()
	t1 := e.taskFor("g", "chunks", "doc")
	c0 := e.extract(t1, 0, "text/plain")
	c1 := e.extract(t1, 1, "text/plain")
	e.succeed(t1.GetId())
	e.plan()
	e.do(&pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: ns, ContentIds: []string{"doc"}}})
	cmd := e.plan()
	if len(cmd.GetNewGcTasks()) != 3 {
		t.Fatalf("gc tasks = %v, want 3", cmd.GetNewGcTasks())
	}
	want := []string{"file:///blobs/" + c0, "file:///blobs/" + c1, "file:///blobs/doc-v1"}
	slices.Sort(want)
	if got := gcURLs(e.store); !slices.Equal(got, want) {
		t.Fatalf("gc urls = %v, want %v", got, want)
	}
	for _, g := range cmd.GetNewGcTasks() {
		if g.GetId() != GCTaskID(ns, g.GetContentId(), g.GetContentVersion()) {
			t.Fatalf("gc task id %s not deterministic", g.GetId())
		}
	}
}

func TestPlanIsDeterministic(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 3, ext("chunk"), ext("embed"))
	e.executor("b", 0, ext("embed"))
	e.graph("g", pol("chunks", "chunk", ""), pol("vectors", "embed", ""), pol("more", "embed", "chunks"))
	e.graph("g2", pol("x", "embed", ""))
	e.link("g", "", "g2")
	for i := range 8 {
		e.upload("doc"+string(rune('a'+i)), "text/plain", "h", map[string]string{"i": "1"}, "g")
	}
	e.do(&pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: ns, ContentIds: []string{"docc"}}})
	first := Plan(e.store, e.clock.Now(), e.cfg)
	second := Plan(e.store, e.clock.Now(), e.cfg)
	if first == nil || len(AllAssignments(first)) == 0 {
		t.Fatalf("plan made no assignments: %v", first)
	}
	if !proto.Equal(first, second) {
		t.Fatalf("two plans of the same state differ:\n%v\n%v", first, second)
	}
}

func TestBatchLimit(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	for i := range 5 {
		e.upload("doc"+string(rune('0'+i)), "text/plain", "h", nil, "g")
	}
	e.cfg.BatchChanges = 2
	cmd := e.plan()
	if len(cmd.GetProcessedChangeIds()) != 2 {
		t.Fatalf("processed %d changes with BatchChanges 2", len(cmd.GetProcessedChangeIds()))
	}
	if !slices.IsSorted(cmd.GetProcessedChangeIds()) {
		t.Fatalf("changes not in id order: %v", cmd.GetProcessedChangeIds())
	}
	for e.plan() != nil {
	}
	if n := len(e.store.TasksAssignedTo("a")); n != 5 {
		t.Fatalf("assigned %d tasks after draining, want 5", n)
	}
}

func TestSupersessionWaitsForContentPlannedLaterInTheBatch(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("chunk"), ext("embed"))
	e.graph("g", pol("chunks", "chunk", ""), pol("vectors", "embed", "chunks"))
	e.upload("doc", "text/plain", "v1", nil, "g")
	e.plan()
	e.succeed(e.taskFor("g", "chunks", "doc").GetId())
	e.plan()
	e.upload("doc", "text/plain", "v2", nil, "g")
	e.plan()
	t2 := e.taskFor("g", "chunks", "doc")
	// The completion is recorded before the extracted content (a late
	// upload): both changes land in one batch, the completion first. The
	// chunk will get a task when its change is processed, so v2 is not done.
	e.succeed(t2.GetId())
	chunk := e.extract(t2, 0, "text/plain")
	cmd := e.plan()
	if len(cmd.GetTombstoneContentIds()) != 0 {
		t.Fatalf("v1 tombstoned before the chunk's task existed: %v", cmd.GetTombstoneContentIds())
	}
	e.succeed(e.taskFor("g", "vectors", chunk).GetId())
	if cmd := e.plan(); len(cmd.GetTombstoneContentIds()) != 1 {
		t.Fatalf("v1 not tombstoned once everything finished: %v", cmd)
	}
}

func TestSameBytesIntoAnotherGraphRunsThatGraph(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.graph("g1", pol("p1", "embed", ""))
	e.graph("g2", pol("p2", "embed", ""))
	e.upload("doc", "text/plain", "same", nil, "g1")
	e.plan()
	if ref := e.upload("doc", "text/plain", "same", nil, "g2"); ref.GetCreated() {
		t.Fatal("same bytes made a new version")
	}
	cmd := e.plan()
	if len(cmd.GetNewTasks()) != 1 || cmd.GetNewTasks()[0].GetGraphName() != "g2" {
		t.Fatalf("new tasks = %v, want one for g2", cmd.GetNewTasks())
	}
	got := e.taskKeys("doc")
	slices.Sort(got)
	if !slices.Equal(got, []string{"g1/p1", "g2/p2"}) {
		t.Fatalf("tasks = %v", got)
	}
}

func TestGraphDeletionCollectsOrphanedContent(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.graph("other", pol("q", "embed", ""))
	e.upload("only-g", "text/plain", "h1", nil, "g")
	e.upload("both", "text/plain", "h2", nil, "g", "other")
	e.plan()
	e.do(&pb.Command_DeleteGraph{DeleteGraph: &pb.DeleteExtractionGraphCmd{Namespace: ns, Name: "g"}})
	e.plan()
	if got := gcURLs(e.store); !slices.Equal(got, []string{"file:///blobs/only-g-h1"}) {
		t.Fatalf("gc urls = %v, want only the content left without a graph", got)
	}
	if len(e.store.UnprocessedChanges(0)) != 0 {
		t.Fatal("graph deletion changes left unprocessed")
	}
}
