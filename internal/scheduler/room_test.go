package scheduler

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// referenceAssignments is allocation as it was before the pending index:
// every pending task copied, sorted, filtered by backoff and by the
// extractors some executor with room offers, then this pass's new tasks.
func referenceAssignments(s *state.Store, cmd *pb.SchedulerUpdateCmd, nowMs int64) []*pb.Assignment {
	executors := s.Executors()
	load := s.UnfinishedTaskCounts()
	offered := map[string]bool{}
	for _, e := range executors {
		if e.GetMaxPendingTasks() == 0 || load[e.GetId()] < int(e.GetMaxPendingTasks()) {
			for _, d := range e.GetExtractors() {
				offered[d.GetName()] = true
			}
		}
	}
	all := slices.Clone(s.PendingTasks())
	slices.SortFunc(all, state.TaskOrder)
	var tasks []*pb.Task
	for _, t := range all {
		if t.GetNotBefore() <= nowMs && offered[t.GetExtractor()] {
			tasks = append(tasks, t)
		}
	}
	for _, t := range cmd.GetNewTasks() {
		if offered[t.GetExtractor()] {
			tasks = append(tasks, t)
		}
	}
	return Allocate(tasks, executors, load)
}

// Reading only as many pending tasks per extractor as its executors can
// take assigns exactly what reading all of them did: random executors
// (capped and not, one to three extractors each) come and go, tasks finish,
// fail into backoff (back into the middle of the order) and arrive, and
// every pass's assignments are compared with the reference.
func TestAllocationReadsOnlyWhatFitsSameAssignments(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		r := rand.New(rand.NewSource(seed))
		e := newEnv(t)
		e.cfg.MaxUnfinishedTasks = 1 << 30
		e.executor("first", 1, ext("a"), ext("b"), ext("c")) // graphs need the extractors offered
		e.graph("g", pol("pa", "a", ""), pol("pb", "b", ""), pol("pc", "c", ""))
		names := []string{"a", "b", "c"}
		live := []string{"first"}
		doc, nextExec, compared := 0, 0, 0
		for round := range 60 {
			for range r.Intn(40) {
				e.upload(fmt.Sprint("doc", doc), "text/plain", "h", nil, "g")
				doc++
			}
			switch k := r.Intn(6); {
			case k < 2 || len(live) == 0:
				var exts []*pb.ExtractorDescription
				for _, n := range names {
					if r.Intn(2) == 0 {
						exts = append(exts, ext(n))
					}
				}
				if len(exts) == 0 {
					exts = append(exts, ext(names[r.Intn(3)]))
				}
				id := fmt.Sprint("ex", nextExec)
				nextExec++
				e.executor(id, uint32(r.Intn(6)), exts...) // 0 = no cap
				live = append(live, id)
			case k == 2 && len(live) > 1:
				i := r.Intn(len(live))
				e.removeExecutor(live[i])
				live = slices.Delete(live, i, i+1)
			default:
				// Finish or fail some assigned tasks.
				for _, id := range live {
					for _, tk := range e.store.TasksAssignedTo(id) {
						if r.Intn(3) != 0 {
							continue
						}
						outcome := pb.TaskOutcome_TASK_OUTCOME_SUCCESS
						if r.Intn(2) == 0 {
							outcome = pb.TaskOutcome_TASK_OUTCOME_FAILED
						}
						e.do(&pb.Command_CompleteTask{CompleteTask: &pb.CompleteTaskCmd{
							TaskId: tk.GetId(), ExecutorId: id, Outcome: outcome,
							MaxAttempts: 3, BackoffMs: int64(r.Intn(3000)),
						}})
					}
				}
			}
			e.clock.Advance(time.Duration(r.Intn(2000)) * time.Millisecond)
			now := e.clock.Now()
			cmd := Plan(e.store, now, e.cfg)
			if cmd == nil {
				continue
			}
			want := referenceAssignments(e.store, cmd, now.UnixMilli())
			got := AllAssignments(cmd)
			if len(got) != len(want) {
				t.Fatalf("seed %d round %d: %d assignments, reference %d", seed, round, len(got), len(want))
			}
			for i := range want {
				if got[i].GetTaskId() != want[i].GetTaskId() || got[i].GetExecutorId() != want[i].GetExecutorId() {
					t.Fatalf("seed %d round %d: assignment %d is %v, reference %v", seed, round, i, got[i], want[i])
				}
			}
			compared += len(want)
			e.do(&pb.Command_SchedulerUpdate{SchedulerUpdate: cmd})
		}
		if compared == 0 {
			t.Fatalf("seed %d: no assignment was compared", seed)
		}
	}
}
