package state

import (
	"bytes"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

type seen struct {
	batches [][]TaskChange
	resets  int
}

func (s *seen) observe(changes []TaskChange, reset bool) {
	if reset {
		s.resets++
		return
	}
	s.batches = append(s.batches, changes)
}

func TestTaskObserverSeesEachBatchsTaskWrites(t *testing.T) {
	h := newHarness(t)
	var o seen
	h.store().ObserveTasks(o.observe)
	h.ok(&pb.Command{Op: &pb.Command_RegisterExecutor{RegisterExecutor: &pb.RegisterExecutorCmd{Executor: &pb.Executor{Id: "e1"}}}})
	if len(o.batches) != 0 {
		t.Fatalf("a command writing no task was observed: %v", o.batches)
	}
	h.ok(&pb.Command{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{
		NewTasks: []*pb.Task{{Id: "t1", Namespace: "ns", ContentId: "c"}, {Id: "t2", Namespace: "ns", ContentId: "c", ExecutorId: "e1"}}}}})
	h.ok(&pb.Command{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{
		Assignments: []*pb.Assignment{{TaskId: "t1", ExecutorId: "e1"}}}}})
	if len(o.batches) != 2 || len(o.batches[0]) != 2 || len(o.batches[1]) != 1 {
		t.Fatalf("batches %v, want 2 then 1 change", o.batches)
	}
	if c := o.batches[0][1]; c.Prev != nil || c.Cur.GetId() != "t2" || c.Cur.GetExecutorId() != "e1" {
		t.Fatalf("new task change %v", c)
	}
	c := o.batches[1][0]
	if c.Prev.GetExecutorId() != "" || c.Cur.GetExecutorId() != "e1" || c.Cur.GetAssignedIndex() != 3 {
		t.Fatalf("assignment change %v -> %v", c.Prev, c.Cur)
	}
	if cur, _ := h.store().Task("t1"); cur != c.Cur {
		t.Fatal("observer was not handed the stored message")
	}

	// A restore replaces everything: observers are told to re-read.
	var buf bytes.Buffer
	snap, _ := h.fsm.Snapshot()
	if err := snap.(*storeSnapshot).write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := h.store().Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if o.resets != 1 {
		t.Fatalf("%d resets after a restore, want 1", o.resets)
	}
	h.ok(&pb.Command{Op: &pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: "e1"}}})
	if len(o.batches) != 3 || len(o.batches[2]) != 2 {
		t.Fatalf("after restore: batches %v, want a third with both tasks unassigned", o.batches)
	}
}

func TestContentVersionFallsBackToTheTasksCopy(t *testing.T) {
	h := newHarness(t)
	v1 := &pb.Content{Namespace: "ns", Id: "doc", Version: 1, StorageUrl: "file:///v1"}
	// A task made for version 1 holds its copy; the store has no version 1.
	h.ok(&pb.Command{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{
		NewTasks: []*pb.Task{{Id: "t1", Namespace: "ns", ContentId: "doc", ContentVersion: 1, Content: v1}}}}})
	c, ok := h.store().ContentVersion("ns", "doc", 1)
	if !ok || c.GetStorageUrl() != "file:///v1" {
		t.Fatalf("version 1 = %v %v, want the task's copy", c, ok)
	}
	if _, ok := h.store().ContentVersion("ns", "doc", 2); ok {
		t.Fatal("a version nothing holds was found")
	}
}
