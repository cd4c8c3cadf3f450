package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// startRun runs a scheduler for term 7 until the returned stop is called (or
// the test ends); stop waits for Run to return.
func (e *env) startRun(t *testing.T, cfg Config) (*Scheduler, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	if cfg.Tick == 0 {
		cfg.Tick = 2 * time.Millisecond
	}
	cfg.NodeID = "n1"
	cfg.Now = e.clock.Now
	s := New(e.store, e.app, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, 7)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s, cancel, done
}

// waitPasses waits until the scheduler ran n more passes.
func waitPasses(t *testing.T, s *Scheduler, n uint64) {
	t.Helper()
	target := s.Stats().Passes + n
	waitFor(t, fmt.Sprintf("%d scheduler passes", n), func() bool { return s.Stats().Passes >= target })
}

func TestRunPlansAssignsAndNumbersRequests(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.startRun(t, Config{})
	e.upload("doc1", "text/plain", "h1", nil, "g")
	waitFor(t, "doc1's task assigned", func() bool {
		tk, ok := e.store.Task(e.taskIDFor("g", "p", "doc1"))
		return ok && tk.GetExecutorId() == "a"
	})
	e.upload("doc2", "text/plain", "h2", nil, "g")
	waitFor(t, "doc2's task assigned", func() bool {
		tk, ok := e.store.Task(e.taskIDFor("g", "p", "doc2"))
		return ok && tk.GetExecutorId() == "a"
	})
	cmds := e.app.schedulerCmds()
	if len(cmds) < 2 {
		t.Fatalf("scheduler proposed %d commands", len(cmds))
	}
	for i, c := range cmds {
		if want := fmt.Sprintf("sched-n1-7-%d", i+1); c.GetRequestId() != want {
			t.Fatalf("command %d has request id %q, want %q", i, c.GetRequestId(), want)
		}
		if c.GetTimestamp() != e.clock.Now().UnixMilli() {
			t.Fatalf("command %d timestamp %d, want the clock's %d", i, c.GetTimestamp(), e.clock.Now().UnixMilli())
		}
		if u := c.GetSchedulerUpdate(); u == nil || u.GetTerm() != 7 || u.GetSchedulerNode() != "n1" {
			t.Fatalf("command %d is not a scheduler update of term 7 by n1: %v", i, c)
		}
	}
}

func (e *env) taskIDFor(graph, policy, contentID string) string {
	c, _ := e.store.Content(ns, contentID)
	return state.TaskID(ns, graph, policy, contentID, c.GetVersion())
}

func TestRunRemovesSilentExecutors(t *testing.T) {
	e := newEnv(t)
	e.executor("quiet", 0, ext("embed"))
	e.executor("chatty", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.upload("doc1", "text/plain", "h1", nil, "g")
	// The executors were last seen long before this leadership began:
	// they still get a full timeout, since heartbeats may have gone to the
	// previous leader.
	e.clock.Advance(time.Hour)
	s, _, _ := e.startRun(t, Config{ExecutorTimeout: 15 * time.Second})
	taskID := e.taskIDFor("g", "p", "doc1")
	waitFor(t, "task assigned", func() bool { tk, ok := e.store.Task(taskID); return ok && tk.GetExecutorId() != "" })
	if got := e.task(taskID).GetExecutorId(); got != "chatty" {
		t.Fatalf("task assigned to %q, want chatty (tie broken by id)", got)
	}

	e.clock.Advance(15 * time.Second) // exactly the timeout: still alive
	e.do(&pb.Command_ExecutorHeartbeat{ExecutorHeartbeat: &pb.ExecutorHeartbeatCmd{ExecutorIds: []string{"chatty"}}})
	waitPasses(t, s, 3)
	if _, ok := e.store.Executor("quiet"); !ok {
		t.Fatal("executor removed before its timeout passed")
	}
	e.clock.Advance(time.Millisecond)
	waitFor(t, "quiet executor removed", func() bool { _, ok := e.store.Executor("quiet"); return !ok })
	if _, ok := e.store.Executor("chatty"); !ok {
		t.Fatal("executor that heart-beat was removed")
	}

	// chatty times out too; its task goes back to pending.
	e.clock.Advance(16 * time.Second)
	waitFor(t, "chatty removed", func() bool { _, ok := e.store.Executor("chatty"); return !ok })
	waitFor(t, "task back to pending", func() bool { return e.task(taskID).GetExecutorId() == "" })
	var removes int
	for _, c := range e.app.schedulerCmds() {
		if r := c.GetRemoveExecutor(); r != nil {
			removes++
			if r.GetReason() == "" {
				t.Fatalf("remove without a reason: %v", r)
			}
		}
	}
	if removes != 2 {
		t.Fatalf("scheduler proposed %d removals, want 2", removes)
	}
}

func TestRunRetriesFailedApplyWithSameRequestID(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.upload("doc1", "text/plain", "h1", nil, "g")
	// The first proposal is applied but its result lost (like a leader
	// timing out on a commit that still happened).
	e.app.mu.Lock()
	e.app.failNext, e.app.failApplied = 1, true
	e.app.mu.Unlock()
	s, _, _ := e.startRun(t, Config{})
	waitFor(t, "a successful proposal", func() bool { return s.Stats().Proposals >= 1 })
	cmds := e.app.schedulerCmds()
	if len(cmds) < 2 || cmds[0].GetRequestId() != cmds[1].GetRequestId() || cmds[0] != cmds[1] {
		t.Fatalf("retry did not resend the same command: %v", cmds)
	}
	if s.Stats().Failures != 1 {
		t.Fatalf("failures = %d, want 1", s.Stats().Failures)
	}
	if tk := e.task(e.taskIDFor("g", "p", "doc1")); tk.GetExecutorId() != "a" {
		t.Fatalf("task not assigned: %v", tk)
	}
}

func TestRunStopsProposingWhenContextIsCancelled(t *testing.T) {
	e := newEnv(t)
	e.executor("gone", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.upload("doc1", "text/plain", "h1", nil, "g")
	e.plan() // nothing left to plan when the run starts
	// Leadership is lost during the first proposal of a pass (the executor
	// removal); the pass must not go on to propose the re-plan of the
	// removed executor's task.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.app.mu.Lock()
	e.app.onApply = func(cmd *pb.Command) {
		if cmd.GetRequestId() != "" {
			cancel()
		}
	}
	e.app.mu.Unlock()
	cfg := Config{NodeID: "n1", Tick: time.Millisecond, ExecutorTimeout: time.Second, Now: e.clock.Now}
	s := New(e.store, e.app, cfg, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, 9)
	}()
	waitPasses(t, s, 2)
	if n := len(e.app.schedulerCmds()); n != 0 {
		t.Fatalf("%d proposals before anything changed", n)
	}
	e.clock.Advance(2 * time.Second) // the executor times out
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	cmds := e.app.schedulerCmds()
	if len(cmds) != 1 || cmds[0].GetRemoveExecutor() == nil {
		t.Fatalf("proposals = %v, want only the executor removal", cmds)
	}
	e.app.mu.Lock()
	late := e.app.late
	e.app.mu.Unlock()
	if late != 0 {
		t.Fatalf("%d proposals made with a cancelled context", late)
	}
	if len(e.store.UnprocessedChanges(0)) != 1 || len(e.store.PendingTasks()) != 1 {
		t.Fatal("a plan was applied after leadership was lost")
	}
}

func TestRunDrainsLargeBacklog(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	for i := range 9 {
		e.upload(fmt.Sprint("doc", i), "text/plain", "h", nil, "g")
	}
	// A tick far beyond the test's deadline: only the batch loop (and
	// store notifications) can drain the backlog.
	e.startRun(t, Config{BatchChanges: 2, Tick: time.Hour})
	waitFor(t, "backlog drained", func() bool {
		return len(e.store.UnprocessedChanges(0)) == 0 && len(e.store.TasksAssignedTo("a")) == 9
	})
}
