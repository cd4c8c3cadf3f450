package state

import (
	"fmt"
	"runtime"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// heapPerItem loads n ingested items, each with one finished task, in
// batches like the API server would, and returns heap bytes per item.
func heapPerItem(t testing.TB, n int) float64 {
	f := NewFSM(NewStore(), nil)
	idx := uint64(0)
	apply := func(c *pb.Command) {
		idx++
		c.Timestamp = int64(1_000_000 + idx)
		// Through encode/decode, as from the Raft log: every string in the
		// store is then its own allocation, as in production.
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		if r := f.Apply(rafLog(idx, b)).(*pb.CommandResult); r.ErrorCode != pb.ErrorCode_ERROR_CODE_OK {
			t.Fatalf("%v", r)
		}
	}
	apply(nsCmd("default"))
	apply(registerCmd("ex1", "chunk"))
	apply(graphCmd("default", "g", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const batch = 500
	for i := 0; i < n; i += batch {
		var cs []*pb.Content
		var tasks []*pb.Task
		for j := i; j < i+batch && j < n; j++ {
			id := fmt.Sprintf("%016x", j*7919)
			cs = append(cs, &pb.Content{Namespace: "default", Id: id, Name: "file.pdf", MimeType: "application/pdf",
				StorageUrl: "file:///var/lib/indexify/blobs/" + id, SizeBytes: 12345,
				Hash: fmt.Sprintf("%064x", j), GraphNames: []string{"g"}})
			tasks = append(tasks, &pb.Task{Id: TaskID("default", "g", "p", id, 1), Extractor: "chunk", PolicyName: "p",
				GraphName: "g", Namespace: "default", ContentId: id, ContentVersion: 1, InputParamsJson: "{}"})
		}
		apply(contentCmd(cs...))
		var ids []uint64
		for _, c := range f.Store().UnprocessedChanges(0) {
			ids = append(ids, c.Id)
		}
		apply(schedCmd(&pb.SchedulerUpdateCmd{ProcessedChangeIds: ids, NewTasks: tasks}))
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(f)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// The project targets <= 1 KiB per ingested item at 1M items; this checks a
// scaled-down load (content + its task + every index) stays well under.
func TestMemoryPerItem(t *testing.T) {
	per := heapPerItem(t, 50_000)
	t.Logf("heap per item (content + task + indexes): %.0f bytes", per)
	if per > 1280 {
		t.Fatalf("%.0f bytes per item", per)
	}
}

func BenchmarkApplyCreateContent(b *testing.B) {
	f := NewFSM(NewStore(), nil)
	idx := uint64(0)
	apply := func(c *pb.Command) {
		idx++
		c.Timestamp = int64(idx)
		buf, err := EncodeCommand(c)
		if err != nil {
			b.Fatal(err)
		}
		f.Apply(rafLog(idx, buf))
	}
	apply(nsCmd("default"))
	apply(registerCmd("ex1", "chunk"))
	apply(graphCmd("default", "g", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("c%d", i)
		apply(contentCmd(&pb.Content{Namespace: "default", Id: id, Hash: id, GraphNames: []string{"g"}}))
	}
}
