package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// applyUpd applies a scheduler entry that must succeed.
func (e *env) applyUpd(upd *pb.SchedulerUpdateCmd) {
	e.t.Helper()
	e.do(&pb.Command_SchedulerUpdate{SchedulerUpdate: upd})
}

// aheadEqualsAfter plans a pass with the first pass in flight, applies the
// first, plans again and requires the same command: planning ahead decides
// what the serial loop decides.
func aheadEqualsAfter(t *testing.T, e *env) (first, ahead *pb.SchedulerUpdateCmd) {
	t.Helper()
	first = Plan(e.store, e.clock.Now(), e.cfg)
	if first == nil {
		t.Fatal("nothing planned")
	}
	ahead = PlanAhead(e.store, e.clock.Now(), e.cfg, []*pb.SchedulerUpdateCmd{first})
	e.applyUpd(first)
	after := Plan(e.store, e.clock.Now(), e.cfg)
	if !proto.Equal(ahead, after) {
		t.Fatalf("planned ahead:\n%v\nplanned after the first pass applied:\n%v", ahead, after)
	}
	return first, ahead
}

func TestPlanAheadDecidesWhatThePassAfterDecides(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchChanges = 7
	// Capped executors: the in-flight pass's tasks count against their
	// room. Labels split the content between two policies.
	e.executor("a", 5, ext("embed"))
	e.executor("b", 9, ext("embed"), ext("ocr", "application/pdf"))
	e.graph("g", pol("p", "embed", ""), pol("q", "ocr", "", "kind=scan"))
	for i := range 30 {
		mime, lbls := "text/plain", map[string]string(nil)
		if i%3 == 0 {
			mime, lbls = "application/pdf", map[string]string{"kind": `"scan"`}
		}
		e.upload(fmt.Sprint("doc", i), mime, "h", lbls, "g")
	}
	first, ahead := aheadEqualsAfter(t, e)
	if len(first.GetProcessedChangeIds()) != 7 || len(ahead.GetProcessedChangeIds()) != 7 {
		t.Fatalf("processed %d then %d changes, want two batches of 7",
			len(first.GetProcessedChangeIds()), len(ahead.GetProcessedChangeIds()))
	}
	assigned := 0
	for _, t := range ahead.GetNewTasks() {
		if t.GetExecutorId() != "" {
			assigned++
		}
	}
	if assigned == 0 || assigned == len(ahead.GetNewTasks()) {
		t.Fatalf("%d of %d tasks planned ahead assigned: the test should fill the executors' room", assigned, len(ahead.GetNewTasks()))
	}
}

func TestPlanAheadLeavesStoredTasksTheInFlightPassAssigns(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchChanges = 4
	e.executor("z", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.removeExecutor("z")
	for i := range 6 {
		e.upload(fmt.Sprint("doc", i), "text/plain", "h", nil, "g")
	}
	e.plan() // no executor: six pending tasks
	e.plan()
	if n := len(e.store.PendingTasks()); n != 6 {
		t.Fatalf("%d pending tasks, want 6", n)
	}
	e.executor("a", 0, ext("embed")) // no cap: room for every pending task
	for i := range 6 {
		e.upload(fmt.Sprint("new", i), "text/plain", "h", nil, "g")
	}
	first, ahead := aheadEqualsAfter(t, e)
	if len(first.GetAssignments()) != 6 {
		t.Fatalf("first pass assigned %d stored tasks, want all 6", len(first.GetAssignments()))
	}
	if len(ahead.GetAssignments()) != 0 {
		t.Fatalf("the pass planned ahead assigned %v again", ahead.GetAssignments())
	}
}

func TestPlanAheadDoesNotRepeatTheInFlightPassTasks(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchChanges = 1
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.plan()
	e.plan()
	e.upload("doc", "text/plain", "h", nil, "g")
	// New labels: a CONTENT_UPDATED change, which plans every graph of the
	// content again, right behind the upload's change.
	e.do(&pb.Command_UpdateLabels{UpdateLabels: &pb.UpdateLabelsCmd{Namespace: ns, ContentId: "doc",
		Labels: map[string]string{"k": `"v"`}}})
	first, ahead := aheadEqualsAfter(t, e)
	if len(first.GetNewTasks()) != 1 || len(ahead.GetNewTasks()) != 0 || len(ahead.GetProcessedChangeIds()) != 1 {
		t.Fatalf("first pass %v, planned ahead %v: want the task once", first, ahead)
	}
}

// A version the in-flight pass tombstones counts as tombstoned: a change in
// a tree whose only older live version is being superseded is planned
// ahead, as the pass after would plan it (without the overlay's tombstones
// the older version looks live and planning stops there).
func TestPlanAheadSeesTheInFlightPassTombstones(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchChanges = 1
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", "", "keep=true"))
	drain := func() {
		for e.plan() != nil {
		}
	}
	e.upload("doc", "text/plain", "v1", map[string]string{"keep": "true"}, "g")
	drain()
	t1 := e.taskFor("g", "p", "doc")
	e.upload("doc", "text/plain", "v2", map[string]string{"keep": "true"}, "g")
	drain()
	e.succeed(e.taskFor("g", "p", "doc").GetId()) // v2 done: the completion supersedes v1
	// Then v1's task uploads an output: a change in doc's tree behind the
	// completion, about content the supersession collects.
	e.extract(t1, 0, "text/plain")
	first, ahead := aheadEqualsAfter(t, e)
	if !slices.Equal(first.GetTombstoneContentIds(), []string{state.VersionRef(ns, "doc", 1)}) {
		t.Fatalf("first pass %v: want v1 superseded", first)
	}
	if len(ahead.GetProcessedChangeIds()) != 1 || len(ahead.GetTombstoneContentIds()) != 0 {
		t.Fatalf("planned ahead %v: want the output's change processed, nothing tombstoned again", ahead)
	}
}

func TestPlanAheadStopsAtChangesThatReadTheWholeTree(t *testing.T) {
	e := newEnv(t)
	e.cfg.BatchChanges = 100
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	e.upload("old", "text/plain", "h1", nil, "g")
	e.plan()
	e.succeed(e.taskFor("g", "p", "old").GetId())
	e.upload("doc0", "text/plain", "h", nil, "g")
	e.upload("old", "text/plain", "h2", nil, "g") // a second version: supersession pending
	e.upload("doc1", "text/plain", "h", nil, "g")

	inflight := &pb.SchedulerUpdateCmd{} // nothing decided, but in flight
	ahead := PlanAhead(e.store, e.clock.Now(), e.cfg, []*pb.SchedulerUpdateCmd{inflight})
	// The completion comes first in the queue: nothing is planned ahead.
	if ahead != nil {
		t.Fatalf("planned ahead past a task completion: %v", ahead)
	}
	// Planned serially, the completion is processed; then doc0 is taken
	// ahead and the new version of "old" (a live older version) is not.
	first := Plan(e.store, e.clock.Now(), e.cfg)
	firstOnly := &pb.SchedulerUpdateCmd{ProcessedChangeIds: first.GetProcessedChangeIds()[:1]}
	ahead = PlanAhead(e.store, e.clock.Now(), e.cfg, []*pb.SchedulerUpdateCmd{firstOnly})
	if got := len(ahead.GetProcessedChangeIds()); got != 1 {
		t.Fatalf("planned ahead %d changes, want only doc0's (then the new version)", got)
	}
	if len(ahead.GetNewTasks()) != 1 || ahead.GetNewTasks()[0].GetContentId() != "doc0" {
		t.Fatalf("tasks planned ahead: %v", ahead.GetNewTasks())
	}
}

func TestPlanAheadRandomBurstsMatchTheSerialPlan(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			e := newEnv(t)
			e.cfg.BatchChanges = 1 + rng.IntN(10)
			e.cfg.MaxUnfinishedTasks = 5 + rng.IntN(40)
			for i := range 1 + rng.IntN(3) {
				e.executor(fmt.Sprint("x", i), uint32(rng.IntN(6)), ext("embed"), ext("ocr"))
			}
			e.graph("g", pol("p", "embed", ""), pol("q", "ocr", "", "k=v"))
			e.graph("h", pol("r", "ocr", ""))
			for i := range 10 + rng.IntN(40) {
				var lbls map[string]string
				if rng.IntN(2) == 0 {
					lbls = map[string]string{"k": `"v"`}
				}
				graphs := []string{"g"}
				if rng.IntN(3) == 0 {
					graphs = append(graphs, "h")
				}
				e.upload(fmt.Sprint("d", i), "text/plain", "h", lbls, graphs...)
			}
			for range 20 {
				if len(e.store.UnprocessedChanges(0)) == 0 {
					break
				}
				first := Plan(e.store, e.clock.Now(), e.cfg)
				if first == nil {
					break // held back by the namespace bound
				}
				ahead := PlanAhead(e.store, e.clock.Now(), e.cfg, []*pb.SchedulerUpdateCmd{first})
				e.applyUpd(first)
				after := Plan(e.store, e.clock.Now(), e.cfg)
				if !proto.Equal(ahead, after) {
					t.Fatalf("planned ahead:\n%v\nafter:\n%v", ahead, after)
				}
				if ahead != nil {
					e.applyUpd(ahead)
				}
			}
		})
	}
}

// slowApplier holds each Apply until released, to see passes overlap.
type slowApplier struct {
	inner   *fsmApplier
	mu      sync.Mutex
	open    int // Apply calls in progress
	maxOpen int
	gate    chan struct{}
}

func (a *slowApplier) Apply(ctx context.Context, cmd *pb.Command) (*pb.CommandResult, error) {
	a.mu.Lock()
	a.open++
	a.maxOpen = max(a.maxOpen, a.open)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.open--
		a.mu.Unlock()
	}()
	if cmd.GetSchedulerUpdate() != nil {
		select {
		case <-a.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return a.inner.Apply(ctx, cmd)
}

func TestRunPlansTheNextBatchWhileOneCommits(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	for i := range 40 {
		e.upload(fmt.Sprint("doc", i), "text/plain", "h", nil, "g")
	}
	app := &slowApplier{inner: e.app, gate: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := New(e.store, app, Config{NodeID: "n1", BatchChanges: 4, InFlight: 3, Tick: time.Hour, Now: e.clock.Now}, nil)
	done := make(chan struct{})
	go func() { s.Run(ctx, 3); close(done) }()
	defer func() { cancel(); <-done }()
	// Nothing applies until three entries are in flight at once: the loop
	// planned two batches ahead of the first.
	waitFor(t, "three entries in flight", func() bool {
		app.mu.Lock()
		defer app.mu.Unlock()
		return app.open == 3
	})
	// Then release them one at a time until the backlog is drained.
	drained := func() bool {
		return len(e.store.UnprocessedChanges(0)) == 0 && len(e.store.TasksAssignedTo("a")) == 40
	}
	deadline := time.Now().Add(10 * time.Second)
	for !drained() && time.Now().Before(deadline) {
		select {
		case app.gate <- struct{}{}:
		case <-time.After(10 * time.Millisecond): // the loop is planning; offer again
		}
	}
	if !drained() {
		t.Fatalf("backlog not drained: %d changes left", len(e.store.UnprocessedChanges(0)))
	}
	app.mu.Lock()
	maxOpen := app.maxOpen
	app.mu.Unlock()
	if maxOpen != 3 {
		t.Fatalf("up to %d entries were in flight at once, want at most 3", maxOpen)
	}
	// Every content got exactly its one task, and request ids are unique.
	seen := map[string]bool{}
	for _, c := range e.app.schedulerCmds() {
		if seen[c.GetRequestId()] {
			t.Fatalf("request id %s proposed twice", c.GetRequestId())
		}
		seen[c.GetRequestId()] = true
	}
	tasks, _ := e.store.ListTasks(state.TaskQuery{Namespace: ns})
	if len(tasks) != 40 {
		t.Fatalf("%d tasks, want 40", len(tasks))
	}
}

// delayApplier makes every scheduler entry take a while to commit, like a
// loaded cluster (a stand-in for the commit's latency, not a wait for
// anything).
type delayApplier struct {
	inner *fsmApplier
	delay time.Duration
}

func (a *delayApplier) Apply(ctx context.Context, cmd *pb.Command) (*pb.CommandResult, error) {
	if cmd.GetSchedulerUpdate() != nil {
		t := time.NewTimer(a.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return a.inner.Apply(ctx, cmd)
}

func TestRunRemovesSilentExecutorsWhileABacklogDrains(t *testing.T) {
	e := newEnv(t)
	e.executor("a", 0, ext("embed"))
	e.executor("b", 0, ext("embed"))
	e.graph("g", pol("p", "embed", ""))
	for i := range 3000 {
		e.upload(fmt.Sprint("doc", i), "text/plain", "h", nil, "g")
	}
	app := &delayApplier{inner: e.app, delay: 2 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	s := New(e.store, app, Config{NodeID: "n1", BatchChanges: 1, Tick: time.Hour, Now: e.clock.Now}, nil)
	done := make(chan struct{})
	go func() { s.Run(ctx, 3); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the backlog to start draining", func() bool { return len(e.store.TasksAssignedTo("a")) > 0 })
	// "a" goes silent under this leader; "b" keeps heart-beating.
	e.clock.Advance(DefaultExecutorTimeout + time.Second)
	e.do(&pb.Command_ExecutorHeartbeat{ExecutorHeartbeat: &pb.ExecutorHeartbeatCmd{ExecutorIds: []string{"b"}}})
	waitFor(t, "executor a removed", func() bool {
		_, ok := e.store.Executor("a")
		return !ok
	})
	// Removed while passes were still being planned ahead: one pipeline
	// does not hold off the loop's other duties until the backlog is gone
	// (3,000 entries of 2 ms each, two at a time, take about 3 s).
	uploads := 0
	for _, ch := range e.store.UnprocessedChanges(0) {
		if state.IsContentChange(ch.GetType()) {
			uploads++
		}
	}
	if uploads == 0 {
		t.Fatal("the silent executor was removed only after the whole backlog drained")
	}
}

func TestRunRetriesAFailedEntryOfAPipeline(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			e := newEnv(t)
			e.executor("a", 0, ext("embed"))
			e.graph("g", pol("p", "embed", ""))
			for i := range 30 {
				e.upload(fmt.Sprint("doc", i), "text/plain", "h", nil, "g")
			}
			// The second scheduler entry fails: it is one planned ahead,
			// proposed while the first is in flight.
			var calls int
			e.app.onApply = func(cmd *pb.Command) {
				if cmd.GetSchedulerUpdate() == nil {
					return
				}
				e.app.mu.Lock()
				defer e.app.mu.Unlock()
				calls++
				if calls == 2 {
					e.app.failNext, e.app.failApplied = 1, applied
				}
			}
			e.startRun(t, Config{BatchChanges: 4, Tick: time.Hour})
			waitFor(t, "backlog drained", func() bool {
				return len(e.store.UnprocessedChanges(0)) == 0 && len(e.store.TasksAssignedTo("a")) == 30
			})
			ids := map[string]int{}
			for _, c := range e.app.schedulerCmds() {
				ids[c.GetRequestId()]++
			}
			retried := 0
			for _, n := range ids {
				if n > 1 {
					retried++
				}
			}
			if retried != 1 {
				t.Fatalf("%d request ids proposed more than once, want the failed one: %v", retried, ids)
			}
			tasks, _ := e.store.ListTasks(state.TaskQuery{Namespace: ns})
			if len(tasks) != 30 {
				t.Fatalf("%d tasks, want one per content (30)", len(tasks))
			}
		})
	}
}
