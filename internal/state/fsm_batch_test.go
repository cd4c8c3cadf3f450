package state

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// ApplyBatch must give the same results and the same state as applying the
// same entries one at a time, whatever the batch boundaries, including
// non-command entries, undecodable entries and repeated request ids.
func TestApplyBatchMatchesApply(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		r := rand.New(rand.NewSource(seed))
		one, batched := NewFSM(NewStore(), nil), NewFSM(NewStore(), nil)
		var pending []*raft.Log
		var want []interface{}
		idx := uint64(0)
		flush := func() {
			got := batched.ApplyBatch(pending)
			if len(got) != len(pending) {
				t.Fatalf("seed %d: %d results for %d entries", seed, len(got), len(pending))
			}
			for i := range got {
				g, w := got[i].(*pb.CommandResult), want[i].(*pb.CommandResult)
				if fmt.Sprint(g) != fmt.Sprint(w) {
					t.Fatalf("seed %d index %d: batched result %v, one by one %v", seed, pending[i].Index, g, w)
				}
			}
			pending, want = nil, nil
		}
		add := func(l *raft.Log) {
			want = append(want, one.Apply(l))
			pending = append(pending, l)
			if r.Intn(4) == 0 {
				flush()
			}
		}
		cmd := func(c *pb.Command) {
			idx++
			c.Timestamp = int64(1000 * idx)
			if r.Intn(5) == 0 {
				c.RequestId = fmt.Sprint("req-", r.Intn(20)) // some repeat
			}
			b, err := EncodeCommand(c)
			if err != nil {
				t.Fatal(err)
			}
			add(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: b})
		}
		for _, c := range []*pb.Command{nsCmd("ns"), registerCmd("ex1", "chunk", "embed"),
			graphCmd("ns", "g", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"})} {
			cmd(c)
		}
		for i := 0; i < 200; i++ {
			switch r.Intn(20) {
			case 0:
				idx++
				add(&raft.Log{Index: idx, Term: 1, Type: raft.LogNoop})
			case 1:
				idx++
				add(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: []byte{0x7f, 1, 2}})
			default:
				cmd(randomCommand(r, one.Store()))
			}
		}
		flush()
		if one.Store().Dump() != batched.Store().Dump() {
			t.Fatalf("seed %d: batched state differs from one-by-one state", seed)
		}
		if one.Store().AppliedIndex() != batched.Store().AppliedIndex() {
			t.Fatalf("seed %d: applied index %d vs %d", seed, batched.Store().AppliedIndex(), one.Store().AppliedIndex())
		}
	}
}

// One batch wakes watchers once, after every entry is visible.
func TestApplyBatchWakesWatchersOnce(t *testing.T) {
	f := NewFSM(NewStore(), nil)
	w := f.Store().Watch()
	var logs []*raft.Log
	for i, c := range []*pb.Command{nsCmd("a"), nsCmd("b")} {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: b})
	}
	f.ApplyBatch(logs)
	select {
	case <-w:
	default:
		t.Fatal("watch channel not closed after a batch")
	}
	if n := len(f.Store().Namespaces()); n != 2 {
		t.Fatalf("%d namespaces after the batch", n)
	}
	w2 := f.Store().Watch()
	f.ApplyBatch([]*raft.Log{{Index: 3, Type: raft.LogNoop}})
	select {
	case <-w2:
		t.Fatal("a batch without commands woke watchers")
	default:
	}
}

var _ raft.BatchingFSM = (*FSM)(nil)
