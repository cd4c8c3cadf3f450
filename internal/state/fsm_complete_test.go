package state

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

const cAlreadyCompleted = pb.ErrorCode_ERROR_CODE_ALREADY_COMPLETED

func child(hash string, labels map[string]string) *pb.Content {
	return &pb.Content{MimeType: "text/plain", Hash: hash, SizeBytes: uint64(len(hash)),
		StorageUrl: "file:///blobs/" + hash, Labels: labels}
}

func completeV2(task, executor string, outcome pb.TaskOutcome, children ...*pb.Content) *pb.Command {
	return &pb.Command{Op: &pb.Command_CompleteTaskV2{CompleteTaskV2: &pb.CompleteTaskCmd{
		TaskId: task, ExecutorId: executor, Outcome: outcome, MaxAttempts: 1,
		Features: []*pb.Feature{{Name: "summary", ValueJson: `{"n":2}`}},
		Children: children}}}
}

func TestCompleteTaskV2CreatesChildrenAtomically(t *testing.T) {
	h, task := taskSetup(t)
	// Server-owned fields sent by a client are ignored: the FSM derives them.
	forged := child("h0", map[string]string{"chunk": "0"})
	forged.Namespace, forged.ParentId, forged.RootContentId = "other", "elsewhere", "elsewhere"
	forged.Source, forged.CreatedAt, forged.GraphNames, forged.SourceTaskId = "ingestion", 5, []string{"x"}, "t0"
	forged.Features = []*pb.Feature{{Name: "emb", Embedding: true, ValueJson: "[1,2]"}}
	r := h.ok(completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, forged, child("h1", nil)))
	if r.Noop || len(r.Contents) != 2 || !r.Contents[0].Created || !r.Contents[1].Created {
		t.Fatalf("refs %v", r.Contents)
	}
	ts := h.ts
	for i, hash := range []string{"h0", "h1"} {
		id := ChildContentID(task.Id, i)
		c, ok := h.store().Content("ns", id)
		if !ok || r.Contents[i].Id != id {
			t.Fatalf("child %d (%s) missing, ref %v", i, id, r.Contents[i])
		}
		if c.Namespace != "ns" || c.ParentId != "doc" || c.RootContentId != "doc" || c.Source != "chunker" ||
			c.CreatedAt != ts || strings.Join(c.GraphNames, ",") != "g" || c.SourceTaskId != task.Id ||
			c.Name != id || c.Hash != hash || c.Version != 1 || !c.Latest {
			t.Fatalf("child %d: %v", i, c)
		}
	}
	c0, _ := h.store().Content("ns", ChildContentID(task.Id, 0))
	if c0.Labels["chunk"] != "0" || len(c0.Features) != 1 || c0.Features[0].Policy != "chunker" {
		t.Fatalf("child 0 labels/features %v", c0)
	}
	st, _ := h.store().Task(task.Id)
	if st.Outcome != pb.TaskOutcome_TASK_OUTCOME_SUCCESS || len(st.ResultDigest) != 32 || st.CompletedAt != ts {
		t.Fatalf("task %v", st)
	}
	doc, _ := h.store().Content("ns", "doc")
	if len(doc.Features) != 1 || doc.Features[0].Policy != "chunker" || doc.PolicyCompletionTimes["chunker"] != ts {
		t.Fatalf("input content %v", doc)
	}
	h.checkIndexes()
}

func TestCompleteTaskV2SameResultIsNoOpDifferentIsRefused(t *testing.T) {
	h, task := taskSetup(t)
	kids := func(hash string, labels map[string]string) []*pb.Content {
		return []*pb.Content{child("h0", nil), child(hash, labels)}
	}
	h.ok(completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, kids("h1", nil)...))
	id1 := ChildContentID(task.Id, 1)
	before := h.store().Dump()

	// The same result again (a retry with a new request id and new blob
	// URLs): success, nothing applied.
	again := kids("h1", nil)
	again[1].StorageUrl = "file:///blobs/retry"
	r := h.ok(completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, again...))
	if !r.Noop || len(r.Contents) != 2 || r.Contents[1].Id != id1 || r.Contents[1].Created || r.Contents[1].Version != 1 {
		t.Fatalf("retry refs %v", r.Contents)
	}
	if stripApplied(before) != stripApplied(h.store().Dump()) {
		t.Fatal("the same result again changed the store")
	}

	// A different result for the finished task: refused, the real chunk
	// stays version 1 with its bytes.
	for name, cmd := range map[string]*pb.Command{
		"other bytes":  completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, kids("forged", nil)...),
		"other labels": completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, kids("h1", map[string]string{"x": "1"})...),
		"extra child":  completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, append(kids("h1", nil), child("h2", nil))...),
		"no children":  completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS),
		"failed":       completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED),
		"other exec":   completeV2(task.Id, "ex2", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, kids("h1", nil)...),
		"no features":  {Op: &pb.Command_CompleteTaskV2{CompleteTaskV2: &pb.CompleteTaskCmd{TaskId: task.Id, ExecutorId: "ex1", Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS, Children: kids("h1", nil)}}},
	} {
		r := h.fail(cAlreadyCompleted, cmd)
		if !strings.Contains(r.Error, "already completed") {
			t.Fatalf("%s: %s", name, r.Error)
		}
	}
	if vs := h.store().ContentVersions("ns", id1); len(vs) != 1 || vs[0].Hash != "h1" || vs[0].Version != 1 {
		t.Fatalf("real chunk changed: %v", vs)
	}
	if _, ok := h.store().Content("ns", ChildContentID(task.Id, 2)); ok {
		t.Fatal("a refused result created content")
	}
}

func TestCompleteTaskV2StaleExecutorPublishesNothing(t *testing.T) {
	h, task := taskSetup(t)
	h.ok(registerCmd("ex2", "chunk"))
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex2"}}}))
	r := h.fail(cConflict, completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, child("stale", nil)))
	if !strings.Contains(r.Error, "ex2") {
		t.Fatalf("message %s", r.Error)
	}
	if _, ok := h.store().Content("ns", ChildContentID(task.Id, 0)); ok {
		t.Fatal("stale executor's child was created")
	}
	// Unassigned (e.g. after executor removal): refused too.
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: ""}}}))
	h.fail(cConflict, completeV2(task.Id, "ex2", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, child("stale", nil)))
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex2"}}}))
	h.ok(completeV2(task.Id, "ex2", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, child("real", nil)))
	if c, ok := h.store().Content("ns", ChildContentID(task.Id, 0)); !ok || c.Hash != "real" {
		t.Fatalf("owner's child %v", c)
	}
	h.checkIndexes()
}

func TestCompleteTaskV2Validation(t *testing.T) {
	h, task := taskSetup(t)
	bad := func(mut func(*pb.CompleteTaskCmd)) *pb.Command {
		cmd := completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, child("h0", nil), child("h1", nil))
		mut(cmd.GetCompleteTaskV2())
		return cmd
	}
	h.fail(cNotFound, bad(func(c *pb.CompleteTaskCmd) { c.TaskId = "nope" }))
	h.fail(cInvalid, bad(func(c *pb.CompleteTaskCmd) { c.Outcome = pb.TaskOutcome_TASK_OUTCOME_UNKNOWN }))
	h.fail(cInvalid, bad(func(c *pb.CompleteTaskCmd) { c.Outcome = pb.TaskOutcome_TASK_OUTCOME_FAILED }))
	h.fail(cInvalid, bad(func(c *pb.CompleteTaskCmd) { c.Children[1].Id = ChildContentID(task.Id, 0) }))
	h.fail(cInvalid, bad(func(c *pb.CompleteTaskCmd) { c.Children[1].Hash = "" }))
	h.fail(cInvalid, bad(func(c *pb.CompleteTaskCmd) { c.Children[1].StorageUrl = "" }))
	h.fail(cInvalid, bad(func(c *pb.CompleteTaskCmd) { c.Children[1].Features = []*pb.Feature{{Name: "f", ValueJson: "{"}} }))
	h.fail(cInvalid, bad(func(c *pb.CompleteTaskCmd) { c.Features = []*pb.Feature{{Name: "", ValueJson: "1"}} }))
	h.fail(cInvalid, bad(func(c *pb.CompleteTaskCmd) { c.Children[0] = nil }))
	// The old command never carried children.
	old := bad(func(*pb.CompleteTaskCmd) {}).GetCompleteTaskV2()
	h.fail(cInvalid, &pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: old}})
	// Parent deleted while the task ran: the task was failed by the
	// tombstone, so the late result publishes nothing.
	h.ok(&pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: []string{"doc"}}}})
	h.fail(cAlreadyCompleted, bad(func(*pb.CompleteTaskCmd) {}))
	if _, ok := h.store().Content("ns", ChildContentID(task.Id, 0)); ok {
		t.Fatal("child of a deleted parent created")
	}
}

func TestCompleteTaskV2FailureRetriesThenFinal(t *testing.T) {
	h, task := taskSetup(t)
	fail := func() *pb.Command {
		cmd := completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED)
		cmd.GetCompleteTaskV2().MaxAttempts = 2
		cmd.GetCompleteTaskV2().Error = "boom"
		return cmd
	}
	h.ok(fail())
	st, _ := h.store().Task(task.Id)
	if !unfinished(st) || st.ExecutorId != "" || st.ResultDigest != nil || st.Attempts != 1 || st.LastError != "boom" {
		t.Fatalf("after first failure %v", st)
	}
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex1"}}}))
	h.ok(fail())
	st, _ = h.store().Task(task.Id)
	if st.Outcome != pb.TaskOutcome_TASK_OUTCOME_FAILED || len(st.ResultDigest) != 32 {
		t.Fatalf("after final failure %v", st)
	}
	before := h.store().Dump()
	h.ok(fail()) // the same report again
	if stripApplied(before) != stripApplied(h.store().Dump()) {
		t.Fatal("repeated final failure changed the store")
	}
	other := fail()
	other.GetCompleteTaskV2().Error = "different"
	h.fail(cAlreadyCompleted, other)
}

func TestCompleteTaskV2AfterOldCompletion(t *testing.T) {
	// A task finished by the old command has no digest: any v2 result for
	// it is refused rather than guessed to be the same.
	h, task := taskSetup(t)
	h.ok(completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))
	h.fail(cAlreadyCompleted, completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS))
	// The old command keeps its old answer: same outcome is a no-op.
	h.ok(completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0))
	h.fail(cConflict, completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED, 1, 0))
}

func TestResultDigestCoversTheResult(t *testing.T) {
	base := &pb.CompleteTaskCmd{Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS, Error: "",
		Features: []*pb.Feature{{Name: "f", ValueJson: "1"}},
		Children: []*pb.Content{child("h0", map[string]string{"a": "1", "b": "2"})}}
	d0 := string(ResultDigest("t", base))
	same := proto.Clone(base).(*pb.CompleteTaskCmd)
	same.Children[0].StorageUrl = "file:///elsewhere"
	if string(ResultDigest("t", same)) != d0 {
		t.Fatal("storage url changed the digest")
	}
	muts := map[string]func(*pb.CompleteTaskCmd){
		"outcome":       func(c *pb.CompleteTaskCmd) { c.Outcome = pb.TaskOutcome_TASK_OUTCOME_FAILED },
		"error":         func(c *pb.CompleteTaskCmd) { c.Error = "x" },
		"feature":       func(c *pb.CompleteTaskCmd) { c.Features[0].ValueJson = "2" },
		"feature kind":  func(c *pb.CompleteTaskCmd) { c.Features[0].Embedding = true },
		"hash":          func(c *pb.CompleteTaskCmd) { c.Children[0].Hash = "h9" },
		"size":          func(c *pb.CompleteTaskCmd) { c.Children[0].SizeBytes = 99 },
		"mime":          func(c *pb.CompleteTaskCmd) { c.Children[0].MimeType = "text/html" },
		"label value":   func(c *pb.CompleteTaskCmd) { c.Children[0].Labels["a"] = "3" },
		"label key":     func(c *pb.CompleteTaskCmd) { c.Children[0].Labels = map[string]string{"ab": "12"} },
		"child feature": func(c *pb.CompleteTaskCmd) { c.Children[0].Features = []*pb.Feature{{Name: "f", ValueJson: "1"}} },
		"more children": func(c *pb.CompleteTaskCmd) { c.Children = append(c.Children, child("h1", nil)) },
		"no children":   func(c *pb.CompleteTaskCmd) { c.Children = nil },
	}
	for name, mut := range muts {
		c := proto.Clone(base).(*pb.CompleteTaskCmd)
		mut(c)
		if string(ResultDigest("t", c)) == d0 {
			t.Errorf("%s does not change the digest", name)
		}
	}
	if string(ResultDigest("t2", base)) == d0 {
		t.Error("task id (child ids) does not change the digest")
	}
}

// A result whose children break the bounded rules (here: a label that is
// not JSON) fails the attempt with the reason, rather than leaving the task
// assigned to an executor whose answer will never change; nothing is created.
func TestCompleteTaskV2RuleRefusalFailsTheAttempt(t *testing.T) {
	h, task := taskSetup(t)
	cmd := completeV2(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, child("h0", nil), child("h1", nil))
	cmd.GetCompleteTaskV2().Children[1].Labels = map[string]string{"a": "not json"}
	h.ok(cmd)
	got, ok := h.store().Task(task.Id)
	// (This command allows no retry, so the attempt is the task's last.)
	if !ok || got.Outcome != pb.TaskOutcome_TASK_OUTCOME_FAILED || got.Attempts != 1 || !strings.Contains(got.LastError, "result refused") {
		t.Fatalf("task after a refused result: %v", got)
	}
	if _, ok := h.store().Content("ns", ChildContentID(task.Id, 0)); ok {
		t.Fatal("a refused result created content")
	}
	h.checkIndexes()
}
