package state

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// randomCommand draws a command from a small universe of ids so that
// operations collide often (versions, trees, retries, purges, removals).
func randomCommand(r *rand.Rand, s *Store) *pb.Command {
	pick := func(xs ...string) string { return xs[r.Intn(len(xs))] }
	cid := func() string { return fmt.Sprintf("c%d", r.Intn(12)) }
	ex := func() string { return pick("ex1", "ex2", "ex3") }
	switch r.Intn(14) {
	case 0:
		return registerCmd(ex(), "chunk", "embed")
	case 1:
		return &pb.Command{Op: &pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: ex()}}}
	case 2:
		return graphCmd("ns", pick("g", "g2"), &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"})
	case 3:
		if r.Intn(4) == 0 {
			return &pb.Command{Op: &pb.Command_DeleteGraph{DeleteGraph: &pb.DeleteExtractionGraphCmd{Namespace: "ns", Name: pick("g", "g2")}}}
		}
		fallthrough
	case 4, 5:
		var cs []*pb.Content
		graphs := []string{}
		for _, g := range s.Graphs("ns") {
			graphs = append(graphs, g.Name)
		}
		live, _, _ := s.ListContent(ContentQuery{Namespace: "ns"})
		for i := r.Intn(2); i >= 0; i-- {
			c := content("ns", cid(), pick("h1", "h2", "h3"))
			if len(graphs) > 0 {
				c.GraphNames = []string{pick(graphs...)}
			}
			if len(live) > 0 && r.Intn(2) == 0 {
				c.ParentId = live[r.Intn(len(live))].Id
				if ts := s.PendingTasks(); len(ts) > 0 && r.Intn(2) == 0 {
					c.SourceTaskId = ts[r.Intn(len(ts))].Id
				}
			}
			cs = append(cs, c)
		}
		return contentCmd(cs...)
	case 6:
		return &pb.Command{Op: &pb.Command_UpdateLabels{UpdateLabels: &pb.UpdateLabelsCmd{Namespace: "ns", ContentId: cid(), Labels: map[string]string{"k": fmt.Sprint(r.Intn(5))}}}}
	case 7:
		return &pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: []string{cid()}}}}
	case 8, 9:
		u := &pb.SchedulerUpdateCmd{}
		for _, ch := range s.UnprocessedChanges(3) {
			u.ProcessedChangeIds = append(u.ProcessedChangeIds, ch.Id)
		}
		for i := r.Intn(3); i > 0; i-- {
			id := cid()
			v := uint64(1 + r.Intn(3))
			u.NewTasks = append(u.NewTasks, &pb.Task{Id: TaskID("ns", "g", "p", id, v), Namespace: "ns", GraphName: "g",
				PolicyName: "p", Extractor: "chunk", ContentId: id, ContentVersion: v})
		}
		for _, t := range s.PendingTasks() {
			if r.Intn(2) == 0 {
				u.Assignments = append(u.Assignments, &pb.Assignment{TaskId: t.Id, ExecutorId: ex()})
			}
		}
		if r.Intn(3) == 0 {
			u.TombstoneContentIds = append(u.TombstoneContentIds, VersionRef("ns", cid(), uint64(1+r.Intn(3))))
		}
		if r.Intn(3) == 0 {
			u.NewGcTasks = append(u.NewGcTasks, &pb.GCTask{Id: fmt.Sprintf("gc%d", r.Intn(20)), Namespace: "ns", ContentId: cid(), ContentVersion: uint64(1 + r.Intn(3))})
		}
		return schedCmd(u)
	case 10, 11:
		ts, _ := s.ListTasks(TaskQuery{})
		if len(ts) == 0 {
			return nsCmd("ns")
		}
		t := ts[r.Intn(len(ts))]
		e := t.ExecutorId
		if r.Intn(5) == 0 {
			e = ex()
		}
		out := pb.TaskOutcome_TASK_OUTCOME_SUCCESS
		if r.Intn(2) == 0 {
			out = pb.TaskOutcome_TASK_OUTCOME_FAILED
		}
		if r.Intn(2) == 0 {
			// The atomic completion with children (sometimes a repeat or
			// a forgery of an earlier result, as the universe is small).
			cmd := completeCmd(t.Id, e, out, 2, 10, &pb.Feature{Name: "f", ValueJson: "1"})
			c := cmd.GetCompleteTask()
			if out == pb.TaskOutcome_TASK_OUTCOME_SUCCESS {
				for i := r.Intn(3); i > 0; i-- {
					c.Children = append(c.Children, child(pick("h1", "h2"), map[string]string{"k": fmt.Sprint(r.Intn(2))}))
				}
			}
			return &pb.Command{Op: &pb.Command_CompleteTaskV2{CompleteTaskV2: c}}
		}
		return completeCmd(t.Id, e, out, 2, 10, &pb.Feature{Name: "f", ValueJson: "1"})
	case 12:
		var ids []string
		for _, g := range s.GCTasks(0) {
			if r.Intn(2) == 0 {
				ids = append(ids, g.Id)
			}
		}
		return &pb.Command{Op: &pb.Command_AckGcTasks{AckGcTasks: &pb.AckGCTasksCmd{Ids: ids}}}
	default:
		c := &pb.Command{Op: &pb.Command_ExecutorHeartbeat{ExecutorHeartbeat: &pb.ExecutorHeartbeatCmd{ExecutorIds: []string{ex()}}}}
		c.RequestId = fmt.Sprintf("rq%d", r.Intn(30))
		return c
	}
}

// Random histories: two replicas applying the same log stay identical, a
// replica restored from a mid-way snapshot catches up to the same state,
// and the incrementally maintained indexes always match rebuilt ones.
func TestRandomHistoriesDeterministic(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		r := rand.New(rand.NewSource(seed))
		a, b := NewFSM(NewStore(), nil), NewFSM(NewStore(), nil)
		var restored *FSM
		setup := []*pb.Command{nsCmd("ns"), registerCmd("ex1", "chunk", "embed"),
			graphCmd("ns", "g", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"})}
		idx := uint64(0)
		step := func(c *pb.Command) {
			idx++
			c.Timestamp = int64(1000 * idx)
			buf, err := EncodeCommand(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []*FSM{a, b, restored} {
				if f != nil {
					f.Apply(rafLog(idx, buf))
				}
			}
		}
		for _, c := range setup {
			step(c)
		}
		for i := 0; i < 300; i++ {
			step(randomCommand(r, a.Store()))
			if i == 150 {
				restored = NewFSM(NewStore(), nil)
				var snap bytesBuffer
				if err := a.Store().WriteSnapshot(&snap); err != nil {
					t.Fatal(err)
				}
				if err := restored.Store().Restore(&snap); err != nil {
					t.Fatal(err)
				}
			}
			if i%50 == 49 {
				if err := verifyIndexes(a.Store()); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, i, err)
				}
			}
		}
		da := a.Store().Dump()
		if da != b.Store().Dump() {
			t.Fatalf("seed %d: replicas diverged", seed)
		}
		if da != restored.Store().Dump() {
			t.Fatalf("seed %d: restored replica diverged:\n%s\n----\n%s", seed, da, restored.Store().Dump())
		}
		if err := verifyIndexes(restored.Store()); err != nil {
			t.Fatalf("seed %d restored: %v", seed, err)
		}
	}
}

func FuzzApplyNeverPanics(f *testing.F) {
	for _, c := range scenario() {
		b, _ := EncodeCommand(c)
		f.Add(b)
		// The same under the current rules (RulesBounded checks).
		c = proto.Clone(c).(*pb.Command)
		c.Rules = CurrentRules
		b, _ = EncodeCommand(c)
		f.Add(b)
	}
	for _, c := range hostileCmds() {
		c.Rules = CurrentRules
		b, _ := EncodeCommand(c)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM(NewStore(), nil)
		applyAll(t, fsm, scenario(), 1)
		res, ok := fsm.Apply(rafLog(1000, data)).(*pb.CommandResult)
		if !ok || res == nil || fsm.Store().AppliedIndex() != 1000 {
			t.Fatalf("result %v, applied %d", res, fsm.Store().AppliedIndex())
		}
		if err := verifyIndexes(fsm.Store()); err != nil {
			t.Fatal(err)
		}
	})
}

type bytesBuffer = bytes.Buffer
