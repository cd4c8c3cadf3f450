package push

// The per-stream queue under churn: many batches, a snapshot restore in the
// middle of them, a stream that ends and comes back. Each case checks that
// every task assigned to the executor reaches it, none twice on one
// stream, and in push order.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// batchCmds are n commands each creating per tasks assigned to executor,
// created_at increasing across commands and ids out of order within one.
func batchCmds(executor string, n, per int) []*pb.Command {
	var out []*pb.Command
	for b := range n {
		var ts []*pb.Task
		for i := per - 1; i >= 0; i-- {
			id := fmt.Sprintf("t%03d-%03d", b, i)
			ts = append(ts, &pb.Task{Id: id, Namespace: "ns", ContentId: "c-" + id, Extractor: "x/noop",
				GraphName: "g", PolicyName: "p", CreatedAt: int64(1000 + b), ExecutorId: executor})
		}
		out = append(out, &pb.Command{Timestamp: 1, Rules: state.CurrentRules,
			Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{NewTasks: ts}}})
	}
	return out
}

// collector receives a stream's pushes until it has want distinct tasks.
type collector struct {
	mu    sync.Mutex
	got   []string // in arrival order, duplicates included
	order []string // violations of push order
	done  chan struct{}
	want  int
}

func collect(t *testing.T, st pb.CoordinatorService_HeartbeatClient, want int) *collector {
	c := &collector{done: make(chan struct{}), want: want}
	go func() {
		var last *pb.Task
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			c.mu.Lock()
			for _, tk := range resp.GetTasks() {
				if last != nil && state.TaskOrder(last, tk) >= 0 {
					c.order = append(c.order, last.GetId()+" before "+tk.GetId())
				}
				last = tk
				c.got = append(c.got, tk.GetId())
			}
			n := len(c.got)
			c.mu.Unlock()
			if n >= c.want {
				close(c.done)
				return
			}
		}
	}()
	return c
}

func (c *collector) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(20 * time.Second): // a deadline, not a synchronisation
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("%s: %d of %d tasks pushed", what, len(c.got), c.want)
	}
}

// check: exactly the tasks of cmds, each once, oldest first.
func (c *collector) check(t *testing.T, cmds []*pb.Command) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var want []string
	for _, cmd := range cmds {
		for _, tk := range cmd.GetSchedulerUpdate().GetNewTasks() {
			want = append(want, tk.GetId())
		}
	}
	slices.Sort(want)
	got := slices.Clone(c.got)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		dup := 0
		for i := 1; i < len(got); i++ {
			if got[i] == got[i-1] {
				dup++
			}
		}
		t.Fatalf("pushed %d tasks (%d duplicates), want the %d assigned", len(got), dup, len(want))
	}
	if len(c.order) > 0 {
		t.Fatalf("pushed out of order: %v", c.order[:min(len(c.order), 5)])
	}
}

// A replica restored from a snapshot taken ahead of it, while batches keep
// arriving before and after: the stream re-reads after the reset and still
// pushes each task once, oldest first (what it pushed before the restore is
// remembered, what the snapshot brought is new).
func TestQueueRestoreMidStreamLosesAndRepeatsNothing(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := f.connect(ctx, "e1", 1)
	reg := f.store.AppliedIndex() // the registration, applied by the fixture
	cmds := batchCmds("e1", 60, 25)
	col := collect(t, st, 60*25)

	// A twin replica applies the same log (registration included) and is
	// snapshotted ahead of this one, after command 35.
	twin := state.NewFSM(state.NewStore(), nil)
	twin.ApplyCommand(reg, &pb.Command{Timestamp: 1, Rules: state.CurrentRules, Op: &pb.Command_RegisterExecutor{
		RegisterExecutor: &pb.RegisterExecutorCmd{Executor: &pb.Executor{Id: "e1", Extractors: []*pb.ExtractorDescription{{Name: "x/noop"}}}}}})
	for i, cmd := range cmds[:35] {
		twin.ApplyCommand(reg+1+uint64(i), cmd)
	}
	snaps := raft.NewInmemSnapshotStore()
	snap, err := twin.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, twin.Store().AppliedIndex(), 1, raft.Configuration{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	metas, _ := snaps.List()

	// This replica applies the first 20, is restored to the twin's 35,
	// then applies the rest.
	f.log.mu.Lock()
	for _, cmd := range cmds[:20] {
		f.log.idx++
		f.log.fsm.ApplyCommand(f.log.idx, cmd)
	}
	f.log.mu.Unlock()
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.log.fsm.Restore(rc); err != nil {
		t.Fatal(err)
	}
	f.log.mu.Lock()
	f.log.idx = f.store.AppliedIndex()
	for _, cmd := range cmds[35:] {
		f.log.idx++
		f.log.fsm.ApplyCommand(f.log.idx, cmd)
	}
	f.log.mu.Unlock()
	col.wait(t, "after the restore")
	col.check(t, cmds)
}

// An executor whose stream ends and that registers again on a new one gets,
// on the new stream, every task still assigned to it: those pushed before
// (it may have lost them with its process) and those assigned while it was
// away, each once and oldest first.
func TestQueueReRegisterGetsEveryAssignedTaskOnce(t *testing.T) {
	f := newFixture(t, Config{DisconnectGrace: time.Hour})
	ctx1, cancel1 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel1()
	st := f.connect(ctx1, "e1", 1)
	cmds := batchCmds("e1", 30, 10)
	col := collect(t, st, 10*10)
	for _, cmd := range cmds[:10] {
		f.apply(cmd)
	}
	col.wait(t, "first stream")
	col.check(t, cmds[:10])
	cancel1()
	f.eventually("old stream detached", func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.detached) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	for _, cmd := range cmds[10:20] { // while it is away
		f.apply(cmd)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	again := f.connect(ctx2, "e1", 1)
	col2 := collect(t, again, 30*10)
	for _, cmd := range cmds[20:] {
		f.apply(cmd)
	}
	col2.wait(t, "new stream")
	col2.check(t, cmds)
}
