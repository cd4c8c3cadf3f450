package state

import (
	"fmt"
	"testing"

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
