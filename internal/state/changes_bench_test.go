package state

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// The scheduler's read of its work queue halfway through a burst: 100,000
// changes queued, the oldest 49,000 processed (just under the point where
// the order slice is compacted). A pass reads the next 1,000.
func BenchmarkUnprocessedChangesAfterHalfABurst(b *testing.B) {
	s := NewStore()
	s.mu.Lock()
	for i := range 100_000 {
		s.d.addChange(pb.ChangeType_CHANGE_TYPE_NEW_CONTENT, "ns", fmt.Sprint("c", i), "", 1)
	}
	for id := uint64(1); id <= 49_000; id++ {
		s.d.markProcessed(id)
	}
	s.mu.Unlock()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if cs := s.UnprocessedChanges(1000); len(cs) != 1000 || cs[0].GetId() != 49_001 {
			b.Fatalf("read %d changes from %d", len(cs), cs[0].GetId())
		}
	}
}

// One scheduler entry as the leader proposes it during a burst, applied
// through the log's decode path: 1,000 new tasks (each carrying its input
// content, as Plan makes them), their assignments over 10 executors, and
// the 1,000 changes they answer.
func BenchmarkApplySchedulerUpdate1000(b *testing.B) {
	// assigned-later: each new task is created pending and assigned by an
	// Assignment of the same entry (the scheduler's output until
	// 2026-12-06); created-assigned: the new task carries its executor
	// (scheduler.foldNewTasks). Same state after the entry.
	b.Run("assigned-later", func(b *testing.B) { benchSchedulerUpdate(b, false) })
	b.Run("created-assigned", func(b *testing.B) { benchSchedulerUpdate(b, true) })
}

func benchSchedulerUpdate(b *testing.B, folded bool) {
	f := NewFSM(NewStore(), nil)
	// As in a coordinator: the push streams observe task writes.
	f.Store().ObserveTasks(func([]TaskChange, bool) {})
	idx := uint64(0)
	apply := func(c *pb.Command) {
		idx++
		c.Timestamp = int64(idx)
		buf, err := EncodeCommand(c)
		if err != nil {
			b.Fatal(err)
		}
		f.ApplyBatch([]*raft.Log{rafLog(idx, buf)})
	}
	apply(nsCmd("default"))
	for i := range 10 {
		apply(registerCmd(fmt.Sprint("ex", i), "chunk"))
	}
	apply(graphCmd("default", "g", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		var cs []*pb.Content
		for j := range 1000 {
			id := fmt.Sprintf("c%d-%d", i, j)
			cs = append(cs, &pb.Content{Namespace: "default", Id: id, Name: id, MimeType: "text/plain", Hash: id,
				SizeBytes: 1024, StorageUrl: "file:///bench/" + id, GraphNames: []string{"g"}, Source: SourceIngestion})
		}
		apply(contentCmd(cs...))
		up := &pb.SchedulerUpdateCmd{}
		for _, ch := range f.Store().UnprocessedChanges(0) {
			up.ProcessedChangeIds = append(up.ProcessedChangeIds, ch.GetId())
		}
		for j, c := range cs {
			stored, _ := f.Store().Content("default", c.Id)
			id := TaskID("default", "g", "p", c.Id, stored.GetVersion())
			t := &pb.Task{Id: id, Extractor: "chunk", PolicyName: "p", GraphName: "g",
				Namespace: "default", ContentId: c.Id, ContentVersion: stored.GetVersion(), Content: stored, CreatedAt: int64(idx)}
			up.NewTasks = append(up.NewTasks, t)
			if folded {
				t.ExecutorId = fmt.Sprint("ex", j%10)
			} else {
				up.Assignments = append(up.Assignments, &pb.Assignment{TaskId: id, ExecutorId: fmt.Sprint("ex", j%10)})
			}
		}
		cmd := schedCmd(up)
		b.StartTimer()
		apply(cmd)
	}
}
