package state

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func TestExecutors(t *testing.T) {
	h := newHarness(t)
	h.ok(registerCmd("ex1", "chunk"))
	e, ok := h.store().Executor("ex1")
	if !ok || e.RegisteredAt != h.ts || e.LastSeen != h.ts {
		t.Fatalf("executor = %v", e)
	}
	reg := e.RegisteredAt
	h.ok(registerCmd("ex1", "chunk", "embed")) // upsert keeps registered_at
	e2, _ := h.store().Executor("ex1")
	if e2.RegisteredAt != reg || e2.LastSeen != h.ts || len(e2.Extractors) != 2 {
		t.Fatalf("re-registered = %v", e2)
	}
	if x, ok := h.store().Extractor("embed"); !ok || x.InputParamsSchemaJson != embedSchema {
		t.Fatalf("extractor = %v", x)
	}
	h.ok(&pb.Command{Op: &pb.Command_ExecutorHeartbeat{ExecutorHeartbeat: &pb.ExecutorHeartbeatCmd{ExecutorIds: []string{"ex1", "ghost"}}}})
	if e3, _ := h.store().Executor("ex1"); e3.LastSeen != h.ts || e2.LastSeen == h.ts {
		t.Fatalf("heartbeat: new=%v old=%v", e3, e2)
	}
	if _, ok := h.store().Executor("ghost"); ok {
		t.Fatal("heartbeat created an executor")
	}
	added := 0
	for _, c := range h.store().UnprocessedChanges(0) {
		if c.Type == pb.ChangeType_CHANGE_TYPE_EXECUTOR_ADDED {
			added++
		}
	}
	if added != 1 {
		t.Fatalf("EXECUTOR_ADDED changes = %d", added)
	}
	h.fail(cInvalid, registerCmd(""))
	h.fail(cInvalid, registerCmd("ex2", "bad name"))
	h.ok(registerCmd("ex3", "tensorlake/minilm-l6")) // publisher/name style
	if _, ok := h.store().Extractor("tensorlake/minilm-l6"); !ok {
		t.Fatal("slash-named extractor missing")
	}
	h.ok(&pb.Command{Op: &pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: "ex3"}}})
	h.fail(cInvalid, registerCmd("ex2", "chunk", "chunk"))
	bad := registerCmd("ex2", "x")
	bad.GetRegisterExecutor().Executor.Extractors[0].InputParamsSchemaJson = `{"type": 5}`
	h.fail(cInvalid, bad)
	h.ok(&pb.Command{Op: &pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: "nope"}}})
	h.ok(&pb.Command{Op: &pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: "ex1", Reason: "timeout"}}})
	if len(h.store().Executors()) != 0 || len(h.store().Extractors()) != 0 {
		t.Fatal("executor or its extractors survived removal")
	}
}

// taskSetup makes content doc with a chunker task assigned to ex1.
func taskSetup(t *testing.T) (*harness, *pb.Task) {
	h := newHarness(t)
	h.setup()
	h.ok(contentCmd(content("ns", "doc", "h", "g")))
	task := h.newTask("ns", "g", "chunker", "chunk", "doc", 1)
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{NewTasks: []*pb.Task{task},
		Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex1"}}}))
	return h, task
}

func TestSchedulerUpdate(t *testing.T) {
	h, task := taskSetup(t)
	st, _ := h.store().Task(task.Id)
	if st.ExecutorId != "ex1" || st.AssignedIndex != h.idx || st.CreatedAt != h.ts {
		t.Fatalf("task = %v", st)
	}
	if c, _ := h.store().Content("ns", "doc"); st.Content != c {
		t.Fatal("task does not share the stored content version")
	}
	changes := h.store().UnprocessedChanges(0)
	if len(changes) == 0 {
		t.Fatal("no changes")
	}
	first := changes[0]
	// Duplicate task id skipped; invalid assignments skipped; unknown
	// change ids ignored; gc tasks added once.
	dup := h.newTask("ns", "g", "chunker", "chunk", "doc", 1)
	dup.Extractor = "changed"
	other := h.newTask("ns", "g", "embedder", "embed", "doc", 1)
	other.ExecutorId = "ghost"
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{
		ProcessedChangeIds: []uint64{first.Id, 999999},
		NewTasks:           []*pb.Task{dup, other},
		Assignments: []*pb.Assignment{
			{TaskId: "nope", ExecutorId: "ex1"},
			{TaskId: other.Id, ExecutorId: "ghost"},
		},
		NewGcTasks: []*pb.GCTask{{Id: "gc1", Namespace: "ns", ContentId: "doc", ContentVersion: 1}, {Id: ""}},
	}))
	if st2, _ := h.store().Task(task.Id); st2 != st {
		t.Fatal("duplicate new task replaced the existing one")
	}
	ot, _ := h.store().Task(other.Id)
	if ot.ExecutorId != "" || ot.AssignedIndex != 0 {
		t.Fatalf("task for unknown executor = %v", ot)
	}
	if p := h.store().PendingTasks(); len(p) != 1 || p[0].Id != other.Id {
		t.Fatalf("pending = %v", p)
	}
	for _, c := range h.store().UnprocessedChanges(0) {
		if c.Id == first.Id {
			t.Fatal("change not marked processed")
		}
	}
	g := h.store().GCTasks(0)
	if len(g) != 1 || g[0].CreatedAt != h.ts {
		t.Fatalf("gc = %v", g)
	}
	// Unassign and reassign.
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: ""}}}))
	if len(h.store().TasksAssignedTo("ex1")) != 0 || len(h.store().PendingTasks()) != 2 {
		t.Fatal("unassign did not return the task to pending")
	}
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex1"}}}))
	if got := h.store().UnfinishedTaskCounts(); got["ex1"] != 1 {
		t.Fatalf("counts = %v", got)
	}
	h.checkIndexes()
}

func TestCompleteTaskSuccess(t *testing.T) {
	h, task := taskSetup(t)
	before, _ := h.store().Content("ns", "doc")
	h.ok(completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 3, 100,
		&pb.Feature{Name: "summary", ValueJson: `{"words": 3}`}))
	st, _ := h.store().Task(task.Id)
	if st.Outcome != pb.TaskOutcome_TASK_OUTCOME_SUCCESS || st.CompletedAt != h.ts || st.Attempts != 1 {
		t.Fatalf("task = %v", st)
	}
	c, _ := h.store().Content("ns", "doc")
	if len(c.Features) != 1 || c.Features[0].Policy != "chunker" || c.PolicyCompletionTimes["chunker"] != h.ts {
		t.Fatalf("content = %v", c)
	}
	if len(before.Features) != 0 {
		t.Fatal("handed-out content was mutated")
	}
	if len(h.store().TasksAssignedTo("ex1")) != 0 {
		t.Fatal("finished task still assigned")
	}
	n := 0
	for _, ch := range h.store().UnprocessedChanges(0) {
		if ch.Type == pb.ChangeType_CHANGE_TYPE_TASK_COMPLETED && ch.ObjectId == task.Id {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("TASK_COMPLETED changes = %d", n)
	}
	// Same outcome again: OK no-op. Different: CONFLICT.
	dump := stripApplied(h.store().Dump())
	h.ok(completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 3, 100))
	if stripApplied(h.store().Dump()) != dump {
		t.Fatal("repeated completion changed state")
	}
	h.fail(cConflict, completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED, 3, 100))
	a := h.store().Analytics("ns", "g")
	if len(a) != 2 || a[0].Policy != "chunker" || a[0].Success != 1 || a[0].Pending != 0 || a[1].Success != 0 {
		t.Fatalf("analytics = %v", a)
	}
	h.checkIndexes()
}

func TestCompleteTaskRetries(t *testing.T) {
	h, task := taskSetup(t)
	reassign := func() {
		h.ok(schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex1"}}}))
	}
	const backoff = 100
	for attempt := uint32(0); attempt < 2; attempt++ {
		h.ok(completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED, 3, backoff))
		st, _ := h.store().Task(task.Id)
		want := h.ts + backoff<<attempt
		if st.Outcome != pb.TaskOutcome_TASK_OUTCOME_UNKNOWN || st.ExecutorId != "" || st.Attempts != attempt+1 ||
			st.NotBefore != want || st.LastError != "boom" {
			t.Fatalf("after failure %d: %v (want not_before %d)", attempt, st, want)
		}
		if a := h.store().Analytics("ns", "g"); a[0].Pending != 1 || a[0].Failure != 0 {
			t.Fatalf("analytics during retry = %v", a)
		}
		// The retried task cannot be completed until it is assigned again.
		h.fail(cConflict, completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED, 3, backoff))
		reassign()
	}
	h.ok(completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED, 3, backoff))
	st, _ := h.store().Task(task.Id)
	if st.Outcome != pb.TaskOutcome_TASK_OUTCOME_FAILED || st.Attempts != 3 || st.CompletedAt != h.ts {
		t.Fatalf("terminal = %v", st)
	}
	if a := h.store().Analytics("ns", "g"); a[0].Pending != 0 || a[0].Failure != 1 {
		t.Fatalf("analytics = %v", a)
	}
	// max_attempts 0 means a single attempt.
	h2, task2 := taskSetup(t)
	h2.ok(completeCmd(task2.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED, 0, backoff))
	if st, _ := h2.store().Task(task2.Id); st.Outcome != pb.TaskOutcome_TASK_OUTCOME_FAILED {
		t.Fatalf("max_attempts 0: %v", st)
	}
	h.checkIndexes()
}

func TestRetryDelayCapped(t *testing.T) {
	if d := retryDelay(1000, 200); d != maxBackoffMs {
		t.Fatalf("delay = %d", d)
	}
	if d := retryDelay(0, 3); d != 0 {
		t.Fatalf("delay = %d", d)
	}
	if d := retryDelay(50, 2); d != 200 {
		t.Fatalf("delay = %d", d)
	}
}

func TestCompleteTaskErrorsAndStaleExecutor(t *testing.T) {
	h, task := taskSetup(t)
	h.ok(registerCmd("ex2", "chunk"))
	h.fail(cNotFound, completeCmd("nope", "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))
	h.fail(cInvalid, completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_UNKNOWN, 1, 0))
	h.fail(cInvalid, completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0, &pb.Feature{Name: "f", ValueJson: "{"}))
	h.fail(cConflict, completeCmd(task.Id, "ex2", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))
	// ex1 is removed: the task goes back to pending and is reassigned to ex2.
	h.ok(&pb.Command{Op: &pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: "ex1", Reason: "no heartbeat"}}})
	st, _ := h.store().Task(task.Id)
	if st.ExecutorId != "" || st.AssignedIndex != h.idx {
		t.Fatalf("task after executor removal = %v", st)
	}
	var removed *pb.StateChange
	for _, c := range h.store().UnprocessedChanges(0) {
		if c.Type == pb.ChangeType_CHANGE_TYPE_EXECUTOR_REMOVED {
			removed = c
		}
	}
	if removed == nil || removed.ObjectId != "ex1" || removed.Detail != "no heartbeat" {
		t.Fatalf("EXECUTOR_REMOVED = %v", removed)
	}
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex1"}}})) // gone: skipped
	if st, _ := h.store().Task(task.Id); st.ExecutorId != "" {
		t.Fatal("assigned to a removed executor")
	}
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex2"}}}))
	// The stale executor's late report is rejected.
	r := h.fail(cConflict, completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))
	if !strings.Contains(r.Error, "ex2") {
		t.Fatalf("conflict message = %s", r.Error)
	}
	h.ok(completeCmd(task.Id, "ex2", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))
	h.checkIndexes()
}

func TestSchedulerTombstonesSupersededVersion(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(contentCmd(content("ns", "doc", "h1", "g")))
	t1 := h.newTask("ns", "g", "chunker", "chunk", "doc", 1)
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{NewTasks: []*pb.Task{t1}, Assignments: []*pb.Assignment{{TaskId: t1.Id, ExecutorId: "ex1"}}}))
	kid1 := content("ns", ChildContentID(t1.Id, 0), "k1", "g")
	kid1.ParentId, kid1.Source, kid1.SourceTaskId = "doc", "chunker", t1.Id
	h.ok(contentCmd(kid1))
	h.ok(completeCmd(t1.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))

	h.ok(contentCmd(content("ns", "doc", "h2", "g"))) // v2
	t2 := h.newTask("ns", "g", "chunker", "chunk", "doc", 2)
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{NewTasks: []*pb.Task{t2}, Assignments: []*pb.Assignment{{TaskId: t2.Id, ExecutorId: "ex1"}}}))
	kid2 := content("ns", ChildContentID(t2.Id, 0), "k2", "g")
	kid2.ParentId, kid2.Source, kid2.SourceTaskId = "doc", "chunker", t2.Id
	h.ok(contentCmd(kid2))
	h.ok(completeCmd(t2.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))

	h.ok(schedCmd(&pb.SchedulerUpdateCmd{TombstoneContentIds: []string{VersionRef("ns", "doc", 1), "garbage", "ns/doc@x"},
		NewGcTasks: []*pb.GCTask{{Id: "gc-v1", Namespace: "ns", ContentId: "doc", ContentVersion: 1},
			{Id: "gc-k1", Namespace: "ns", ContentId: kid1.Id, ContentVersion: 1},
			{Id: "gc-live", Namespace: "ns", ContentId: "doc", ContentVersion: 2}}}))
	v1, _ := h.store().ContentVersion("ns", "doc", 1)
	v2, _ := h.store().ContentVersion("ns", "doc", 2)
	k1, _ := h.store().Content("ns", kid1.Id)
	k2, _ := h.store().Content("ns", kid2.Id)
	if !v1.Tombstoned || v2.Tombstoned || !k1.Tombstoned || k2.Tombstoned {
		t.Fatalf("v1=%v v2=%v k1=%v k2=%v", v1.Tombstoned, v2.Tombstoned, k1.Tombstoned, k2.Tombstoned)
	}
	tree := h.store().ContentTree("ns", "doc")
	if len(tree) != 2 || tree[1].Id != kid2.Id {
		t.Fatalf("tree = %v", tree)
	}
	// Acknowledged GC purges tombstoned/superseded versions, keeps live ones.
	h.ok(&pb.Command{Op: &pb.Command_AckGcTasks{AckGcTasks: &pb.AckGCTasksCmd{Ids: []string{"gc-v1", "gc-k1", "gc-live", "unknown"}}}})
	if len(h.store().GCTasks(0)) != 0 {
		t.Fatal("gc tasks not removed")
	}
	if _, ok := h.store().ContentVersion("ns", "doc", 1); ok {
		t.Fatal("v1 not purged")
	}
	if _, ok := h.store().Content("ns", kid1.Id); ok {
		t.Fatal("kid1 not purged")
	}
	if _, ok := h.store().Task(t1.Id); ok {
		t.Fatal("finished task of purged version kept")
	}
	if _, ok := h.store().ContentVersion("ns", "doc", 2); !ok {
		t.Fatal("live version purged")
	}
	if got, _, _ := h.store().ListContent(ContentQuery{Namespace: "ns", ParentID: "doc", Tombstoned: true}); len(got) != 1 {
		t.Fatalf("children after purge = %v", got)
	}
	// A new upload after purge continues the version sequence.
	r := h.ok(contentCmd(content("ns", "doc", "h3", "g")))
	if r.Contents[0].Version != 3 {
		t.Fatalf("version after purge = %d", r.Contents[0].Version)
	}
	h.checkIndexes()
}

func TestPurgeWholeContent(t *testing.T) {
	h := newHarness(t)
	h.setup()
	root := content("ns", "root", "h", "g")
	kid := content("ns", "kid", "hk", "g")
	kid.ParentId = "root"
	h.ok(contentCmd(root, kid))
	h.ok(&pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: []string{"root"}}}})
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{NewGcTasks: []*pb.GCTask{
		{Id: "a", Namespace: "ns", ContentId: "root", ContentVersion: 1},
		{Id: "b", Namespace: "ns", ContentId: "kid", ContentVersion: 1}}}))
	h.ok(&pb.Command{Op: &pb.Command_AckGcTasks{AckGcTasks: &pb.AckGCTasksCmd{Ids: []string{"b", "a"}}}})
	if got, total, _ := h.store().ListContent(ContentQuery{Tombstoned: true}); total != 0 {
		t.Fatalf("content after purge = %v", got)
	}
	h.store().mu.RLock()
	n := len(h.store().d.children) + len(h.store().d.content) + len(h.store().d.old)
	h.store().mu.RUnlock()
	if n != 0 {
		t.Fatalf("index entries left after purge: %d", n)
	}
	// Re-create from scratch starts at version 1 again.
	if r := h.ok(contentCmd(content("ns", "root", "h", "g"))); r.Contents[0].Version != 1 {
		t.Fatalf("version = %d", r.Contents[0].Version)
	}
	h.checkIndexes()
}

func TestNodes(t *testing.T) {
	h := newHarness(t)
	up := func(id, addr string) *pb.Command {
		return &pb.Command{Op: &pb.Command_UpsertNode{UpsertNode: &pb.UpsertNodeCmd{Node: &pb.NodeInfo{Id: id, RaftAddr: addr, GrpcAddr: addr}}}}
	}
	h.ok(up("n1", "127.0.0.1:1"))
	h.ok(up("n2", "127.0.0.1:2"))
	h.ok(up("n1", "127.0.0.1:3"))
	if n, _ := h.store().Node("n1"); n.RaftAddr != "127.0.0.1:3" {
		t.Fatalf("node = %v", n)
	}
	h.fail(cInvalid, up("", "x"))
	h.ok(&pb.Command{Op: &pb.Command_RemoveNode{RemoveNode: &pb.RemoveNodeCmd{Id: "n2"}}})
	h.ok(&pb.Command{Op: &pb.Command_RemoveNode{RemoveNode: &pb.RemoveNodeCmd{Id: "zz"}}})
	if ns := h.store().Nodes(); len(ns) != 1 || ns[0].Id != "n1" {
		t.Fatalf("nodes = %v", ns)
	}
}

func TestRequestIDDedupe(t *testing.T) {
	h := newHarness(t)
	h.setup()
	cmd := contentCmd(content("ns", "doc", "h1", "g"))
	cmd.RequestId = "req-1"
	first := h.ok(cmd)
	// A retry with the same id returns the first result, even though the
	// bytes differ (a second version would otherwise be created).
	retry := contentCmd(content("ns", "doc", "h2", "g"))
	retry.RequestId = "req-1"
	again := h.apply(retry)
	if again.Index != first.Index || again.Contents[0].Version != 1 || !again.Contents[0].Created {
		t.Fatalf("retry result = %v, first = %v", again, first)
	}
	if c, _ := h.store().Content("ns", "doc"); c.Version != 1 {
		t.Fatal("retry re-applied")
	}
	// Errors are remembered too.
	bad := nsCmd("-bad")
	bad.RequestId = "req-2"
	r1 := h.apply(bad)
	r2 := h.apply(&pb.Command{RequestId: "req-2", Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: "good"}}})
	if r1.ErrorCode != cInvalid || r2.ErrorCode != cInvalid || r2.Index != r1.Index {
		t.Fatalf("r1=%v r2=%v", r1, r2)
	}
	if _, ok := h.store().Namespace("good"); ok {
		t.Fatal("remembered error re-applied")
	}
	if h.store().AppliedIndex() != h.idx {
		t.Fatal("applied index does not advance on repeats")
	}
}

func TestRequestIDEviction(t *testing.T) {
	// Drive the FSM directly (no encoding) to keep this fast.
	f := NewFSM(NewStore(), nil)
	idx := uint64(0)
	apply := func(rid, ns string) *pb.CommandResult {
		idx++
		return f.ApplyCommand(idx, &pb.Command{RequestId: rid, Timestamp: int64(idx), Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: ns}}})
	}
	first := apply("r0", "n")
	for i := 1; i < maxRequestIDs; i++ {
		apply(fmt.Sprintf("r%d", i), "n")
	}
	if r := apply("r0", "n"); r.Index != first.Index {
		t.Fatal("r0 forgotten before the bound")
	}
	apply("one-more", "n") // evicts r0 (FIFO)
	if r := apply("r0", "n"); r.Index == first.Index {
		t.Fatal("r0 still remembered after eviction")
	}
	f.store.mu.RLock()
	n, m := len(f.store.d.requests), len(f.store.d.requestOrder)
	f.store.mu.RUnlock()
	if n != maxRequestIDs || m != maxRequestIDs {
		t.Fatalf("remembered %d/%d ids", n, m)
	}
}

func TestDecodeCommand(t *testing.T) {
	good, err := EncodeCommand(nsCmd("x"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := DecodeCommand(good); err != nil || c.GetCreateNamespace().GetName() != "x" {
		t.Fatalf("round trip: %v %v", c, err)
	}
	for _, b := range [][]byte{nil, {}, {0x02, 0x0a}, {0x01, 0xff, 0xff, 0xff}, append([]byte{0x01}, []byte("garbage that is not protobuf \x00\xff")...)} {
		if _, err := DecodeCommand(b); err == nil {
			t.Errorf("DecodeCommand(%q) accepted garbage", b)
		}
	}
	if _, err := EncodeCommand(nil); err == nil {
		t.Fatal("encoded nil")
	}
	// Garbage in the log is a failed no-op, not a panic.
	h := newHarness(t)
	res := h.fsm.Apply(rafLog(7, []byte{0x09, 1, 2})).(*pb.CommandResult)
	if res.ErrorCode != cInvalid || res.Index != 7 || h.store().AppliedIndex() != 7 {
		t.Fatalf("garbage result = %v", res)
	}
	// A command without an operation is rejected.
	if r := h.apply(&pb.Command{}); r.ErrorCode != cInvalid {
		t.Fatalf("empty command = %v", r)
	}
}

func TestWatchBroadcast(t *testing.T) {
	h := newHarness(t)
	w1, w2 := h.store().Watch(), h.store().Watch()
	select {
	case <-w1:
		t.Fatal("closed before apply")
	default:
	}
	h.ok(nsCmd("a"))
	for _, w := range []<-chan struct{}{w1, w2} {
		select {
		case <-w:
		default:
			t.Fatal("watch not closed after apply")
		}
	}
	select {
	case <-h.store().Watch():
		t.Fatal("new watch channel already closed")
	default:
	}
}

func TestCloneTaskCopiesEveryField(t *testing.T) {
	src := &pb.Task{}
	m := src.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch fd.Kind() {
		case protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("x"))
		case protoreflect.Uint32Kind:
			m.Set(fd, protoreflect.ValueOfUint32(7))
		case protoreflect.Uint64Kind:
			m.Set(fd, protoreflect.ValueOfUint64(7))
		case protoreflect.Int64Kind:
			m.Set(fd, protoreflect.ValueOfInt64(7))
		case protoreflect.BytesKind:
			m.Set(fd, protoreflect.ValueOfBytes([]byte("x")))
		case protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(1))
		case protoreflect.MessageKind:
			m.Set(fd, protoreflect.ValueOfMessage((&pb.Content{Id: "c"}).ProtoReflect()))
		default:
			t.Fatalf("field %s of kind %v: extend this test", fd.Name(), fd.Kind())
		}
	}
	c := cloneTask(src)
	if !proto.Equal(src, c) {
		t.Fatalf("cloneTask lost fields:\n%v\n%v", src, c)
	}
	if c.Content != src.Content {
		t.Fatal("content not shared")
	}
}

// A new task that carries its executor (the scheduler folds a new task's
// assignment into it) leaves the same state as a new task assigned by an
// Assignment of the same entry, including an executor that left meanwhile;
// the push streams are told of it once, already assigned.
func TestNewTaskCreatedAssignedEqualsAssignedLater(t *testing.T) {
	later, folded := newHarness(t), newHarness(t)
	var seen []TaskChange
	folded.store().ObserveTasks(func(ch []TaskChange, _ bool) { seen = append(seen, ch...) })
	for _, h := range []*harness{later, folded} {
		h.setup()
		h.ok(contentCmd(content("ns", "a", "ha", "g"), content("ns", "b", "hb", "g")))
	}
	executor := map[string]string{"a": "ex1", "b": "gone"} // no executor "gone"
	laterCmd, foldedCmd := &pb.SchedulerUpdateCmd{}, &pb.SchedulerUpdateCmd{}
	for _, id := range []string{"a", "b"} {
		lt := later.newTask("ns", "g", "chunker", "chunk", id, 1)
		laterCmd.NewTasks = append(laterCmd.NewTasks, lt)
		laterCmd.Assignments = append(laterCmd.Assignments, &pb.Assignment{TaskId: lt.Id, ExecutorId: executor[id]})
		ft := folded.newTask("ns", "g", "chunker", "chunk", id, 1)
		ft.ExecutorId = executor[id]
		foldedCmd.NewTasks = append(foldedCmd.NewTasks, ft)
	}
	later.ok(schedCmd(laterCmd))
	folded.ok(schedCmd(foldedCmd))
	if !later.store().Equal(folded.store()) {
		t.Fatalf("states differ:\nassigned later:\n%s\ncreated assigned:\n%s", later.store().Dump(), folded.store().Dump())
	}
	folded.checkIndexes()
	ta, _ := folded.store().Task(TaskID("ns", "g", "chunker", "a", 1))
	if ta.GetExecutorId() != "ex1" || ta.GetAssignedIndex() == 0 {
		t.Fatalf("task a: %v, want assigned to ex1 at the entry's index", ta)
	}
	if tb, _ := folded.store().Task(TaskID("ns", "g", "chunker", "b", 1)); tb.GetExecutorId() != "" {
		t.Fatalf("task b names the missing executor: %v", tb)
	}
	if len(seen) != 2 || seen[0].Prev != nil || seen[0].Cur.GetExecutorId() != "ex1" {
		t.Fatalf("observed %v, want each new task once, a already assigned", seen)
	}
}
