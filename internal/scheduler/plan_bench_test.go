package scheduler

import (
	"fmt"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// benchEnv builds a store with n uploads into a graph of two policies and
// 10 executors offering both extractors.
func benchEnv(b *testing.B, n int) *env {
	e := newEnv(b)
	// The backlogs here are larger than the default bound on a
	// namespace's unfinished tasks (10,000), which would hold planning
	// back: lift it, these measure the passes.
	e.cfg.MaxUnfinishedTasks = 1 << 30
	for i := range 10 {
		e.executor(fmt.Sprint("ex", i), 0, ext("embed"), ext("chunk"))
	}
	e.graph("g", pol("p1", "embed", ""), pol("p2", "chunk", ""))
	e.plan() // the executors' changes
	for i := range n {
		e.upload(fmt.Sprint("doc", i), "text/plain", "h", nil, "g")
	}
	return e
}

// One full pass over 1000 NEW_CONTENT changes: 2000 tasks created and
// allocated over 10 executors (the command is not applied).
func BenchmarkPlan1000NewContent(b *testing.B) {
	e := benchEnv(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		cmd := Plan(e.store, e.clock.Now(), e.cfg)
		if len(cmd.GetNewTasks()) != 2000 || len(AllAssignments(cmd)) != 2000 {
			b.Fatalf("plan made %d tasks, %d assignments", len(cmd.GetNewTasks()), len(AllAssignments(cmd)))
		}
	}
}

// An idle pass over a backlog: 20,000 pending tasks and executors with room
// (so the pending set is read and allocated every pass).
func BenchmarkPlanAllocate20kPending(b *testing.B) {
	e := benchEnv(b, 10_000)
	e.do(&pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: "ex0"}})
	for i := 1; i < 10; i++ {
		e.do(&pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: fmt.Sprint("ex", i)}})
	}
	for e.plan() != nil {
	}
	e.executor("late", 0, ext("embed"), ext("chunk"))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		cmd := Plan(e.store, e.clock.Now(), e.cfg)
		if len(cmd.GetAssignments()) != 20_000 {
			b.Fatalf("plan made %d assignments", len(cmd.GetAssignments()))
		}
	}
}

// A pass over a backlog the executors can take little of: 20,000 pending
// tasks, 10 executors of the default cap (20) with 5 free slots each. The
// pass can assign 50 tasks; what it costs to find them is the point.
func BenchmarkPlanAllocate20kPendingCapped(b *testing.B) {
	e := benchEnv(b, 10_000)
	for i := range 10 {
		e.do(&pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: fmt.Sprint("ex", i)}})
	}
	for e.plan() != nil {
	}
	for i := range 10 {
		e.executor(fmt.Sprint("capped", i), 20, ext("embed"), ext("chunk"))
	}
	// Fill each executor to 15 of its 20 by assigning pending tasks.
	var as []*pb.Assignment
	for i, t := range e.store.PendingTasks()[:150] {
		as = append(as, &pb.Assignment{TaskId: t.GetId(), ExecutorId: fmt.Sprint("capped", i%10)})
	}
	e.do(&pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{Assignments: as}})
	for _, ch := range e.store.UnprocessedChanges(0) {
		e.do(&pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{ProcessedChangeIds: []uint64{ch.GetId()}}})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		cmd := Plan(e.store, e.clock.Now(), e.cfg)
		if len(cmd.GetAssignments()) != 50 {
			b.Fatalf("plan made %d assignments", len(cmd.GetAssignments()))
		}
	}
}
