package state

import (
	"math/rand/v2"
	"slices"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// The change queue against a map model: random inserts (mostly ascending,
// some out of order or repeated, as a snapshot load could give), removals
// mostly from the front and sometimes anywhere, across many compactions.
func TestChangeQueueMatchesAMap(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var q changeQueue
		model := map[uint64]*pb.StateChange{}
		next := uint64(0)
		for step := range 5000 {
			switch r := rng.IntN(10); {
			case r < 5:
				next += 1 + uint64(rng.IntN(3))
				c := &pb.StateChange{Id: next}
				q.insert(c)
				model[c.Id] = c
			case r == 5 && next > 0:
				c := &pb.StateChange{Id: 1 + uint64(rng.Int64N(int64(next)))}
				q.insert(c)
				model[c.Id] = c
			case r < 9:
				var id uint64
				q.each(func(c *pb.StateChange) bool { id = c.Id; return false })
				want := model[id]
				if got := q.remove(id); got != want {
					t.Fatalf("seed %d step %d: remove(%d) = %v, want %v", seed, step, id, got, want)
				}
				delete(model, id)
			default:
				id := uint64(rng.Int64N(int64(next + 2)))
				want := model[id]
				if got := q.remove(id); got != want {
					t.Fatalf("seed %d step %d: remove(%d) = %v, want %v", seed, step, id, got, want)
				}
				delete(model, id)
			}
			if step%25 != 0 {
				continue
			}
			var got []uint64
			q.each(func(c *pb.StateChange) bool { got = append(got, c.Id); return true })
			var want []uint64
			for id := range model {
				want = append(want, id)
			}
			slices.Sort(want)
			if !slices.Equal(got, want) || q.len() != len(want) {
				t.Fatalf("seed %d step %d: queue %v (len %d), want %v", seed, step, got, q.len(), want)
			}
			for i, e := range q.list[:q.head] {
				if e.c != nil {
					t.Fatalf("seed %d step %d: unprocessed change %d at %d, before the head %d", seed, step, e.id, i, q.head)
				}
			}
		}
	}
}
