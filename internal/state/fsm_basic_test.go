package state

import (
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func TestSmokeContentAndTasks(t *testing.T) {
	h := newHarness(t)
	h.setup()
	r := h.ok(contentCmd(content("ns", "doc1", "h1", "g")))
	if len(r.Contents) != 1 || !r.Contents[0].Created || r.Contents[0].Version != 1 {
		t.Fatalf("refs = %v", r.Contents)
	}
	task := h.newTask("ns", "g", "chunker", "chunk", "doc1", 1)
	ch := h.store().UnprocessedChanges(0)
	var ids []uint64
	for _, c := range ch {
		ids = append(ids, c.Id)
	}
	h.ok(schedCmd(&pb.SchedulerUpdateCmd{ProcessedChangeIds: ids, NewTasks: []*pb.Task{task},
		Assignments: []*pb.Assignment{{TaskId: task.Id, ExecutorId: "ex1"}}}))
	if got := h.store().TasksAssignedTo("ex1"); len(got) != 1 {
		t.Fatalf("assigned = %v", got)
	}
	if done, _ := h.store().ContentDone("ns", "doc1"); done {
		t.Fatal("done before task completed")
	}
	h.ok(completeCmd(task.Id, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 3, 100))
	if done, err := h.store().ContentDone("ns", "doc1"); !done || err != nil {
		t.Fatalf("done=%v err=%v", done, err)
	}
	h.checkIndexes()
}
