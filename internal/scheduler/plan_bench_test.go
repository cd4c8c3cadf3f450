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
		if len(cmd.GetNewTasks()) != 2000 || len(cmd.GetAssignments()) != 2000 {
			b.Fatalf("plan made %d tasks, %d assignments", len(cmd.GetNewTasks()), len(cmd.GetAssignments()))
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
