package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// fsmApplier applies commands to the real state machine at increasing log
// indexes, like a one-node Raft log would.
type fsmApplier struct {
	mu    sync.Mutex
	fsm   *state.FSM
	index uint64
	cmds  []*pb.Command // every command applied, in order
	late  int           // Apply calls made with a context already done
	// failNext makes the next n calls fail with an error after applying
	// (applied=true) or without applying.
	failNext    int
	failApplied bool
	// onApply, if set, runs at the start of each call (outside the lock).
	onApply func(cmd *pb.Command)
}

var errInjected = errors.New("injected apply failure")

func (a *fsmApplier) Apply(ctx context.Context, cmd *pb.Command) (*pb.CommandResult, error) {
	a.mu.Lock()
	hook := a.onApply
	if ctx.Err() != nil {
		a.late++
	}
	a.mu.Unlock()
	if hook != nil {
		hook(cmd)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cmds = append(a.cmds, cmd)
	if a.failNext > 0 {
		a.failNext--
		if !a.failApplied {
			return nil, errInjected
		}
		a.index++
		a.fsm.ApplyCommand(a.index, cmd)
		return nil, errInjected
	}
	a.index++
	return a.fsm.ApplyCommand(a.index, cmd), nil
}

func (a *fsmApplier) applied() []*pb.Command {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*pb.Command(nil), a.cmds...)
}

// schedulerCmds returns the request ids of the commands the scheduler
// proposed (the test's own commands carry no request id).
func (a *fsmApplier) schedulerCmds() []*pb.Command {
	var out []*pb.Command
	for _, c := range a.applied() {
		if c.GetRequestId() != "" {
			out = append(out, c)
		}
	}
	return out
}

// clock is an injectable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const ns = "default"

// env is a coordinator state driven through the real FSM.
type env struct {
	t     testing.TB
	store *state.Store
	app   *fsmApplier
	clock *clock
	cfg   Config
}

func newEnv(t testing.TB) *env {
	t.Helper()
	store := state.NewStore()
	e := &env{
		t:     t,
		store: store,
		app:   &fsmApplier{fsm: state.NewFSM(store, nil)},
		clock: &clock{t: time.UnixMilli(1_700_000_000_000)},
	}
	e.cfg = Config{NodeID: "n1", Term: 3, Now: e.clock.Now}
	e.do(&pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: ns}})
	return e
}

// try applies a command stamped with the test clock and returns the result.
func (e *env) try(op any) *pb.CommandResult {
	e.t.Helper()
	cmd := &pb.Command{Timestamp: e.clock.Now().UnixMilli()}
	switch o := op.(type) {
	case *pb.Command_CreateNamespace:
		cmd.Op = o
	case *pb.Command_CreateGraph:
		cmd.Op = o
	case *pb.Command_DeleteGraph:
		cmd.Op = o
	case *pb.Command_CreateLink:
		cmd.Op = o
	case *pb.Command_CreateContent:
		cmd.Op = o
	case *pb.Command_UpdateLabels:
		cmd.Op = o
	case *pb.Command_TombstoneContent:
		cmd.Op = o
	case *pb.Command_RegisterExecutor:
		cmd.Op = o
	case *pb.Command_ExecutorHeartbeat:
		cmd.Op = o
	case *pb.Command_RemoveExecutor:
		cmd.Op = o
	case *pb.Command_SchedulerUpdate:
		cmd.Op = o
	case *pb.Command_CompleteTask:
		cmd.Op = o
	case *pb.Command_AckGcTasks:
		cmd.Op = o
	default:
		e.t.Fatalf("unsupported op %T", op)
	}
	res, err := e.app.Apply(context.Background(), cmd)
	if err != nil {
		e.t.Fatalf("apply %T: %v", op, err)
	}
	return res
}

// do applies a command that must succeed.
func (e *env) do(op any) *pb.CommandResult {
	e.t.Helper()
	res := e.try(op)
	if res.GetErrorCode() != pb.ErrorCode_ERROR_CODE_OK {
		e.t.Fatalf("apply %T: %s: %s", op, res.GetErrorCode(), res.GetError())
	}
	return res
}

func ext(name string, mimes ...string) *pb.ExtractorDescription {
	return &pb.ExtractorDescription{Name: name, InputMimeTypes: mimes}
}

func (e *env) executor(id string, maxPending uint32, exts ...*pb.ExtractorDescription) {
	e.t.Helper()
	e.do(&pb.Command_RegisterExecutor{RegisterExecutor: &pb.RegisterExecutorCmd{Executor: &pb.Executor{
		Id: id, Address: "127.0.0.1:1", Extractors: exts, MaxPendingTasks: maxPending,
	}}})
}

func (e *env) removeExecutor(id string) {
	e.t.Helper()
	e.do(&pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: id, Reason: "test"}})
}

func pol(name, extractor, source string, filter ...string) *pb.ExtractionPolicy {
	return &pb.ExtractionPolicy{Name: name, Extractor: extractor, ContentSource: source, Filter: filter,
		InputParamsJson: `{"k":"` + name + `"}`}
}

func (e *env) graph(name string, policies ...*pb.ExtractionPolicy) {
	e.t.Helper()
	e.do(&pb.Command_CreateGraph{CreateGraph: &pb.CreateExtractionGraphCmd{Graph: &pb.ExtractionGraph{
		Name: name, Namespace: ns, Policies: policies,
	}}})
}

func (e *env) link(from, source, to string) {
	e.t.Helper()
	e.do(&pb.Command_CreateLink{CreateLink: &pb.CreateGraphLinkCmd{Link: &pb.GraphLink{
		Namespace: ns, GraphName: from, ContentSource: source, LinkedGraphName: to,
	}}})
}

// upload creates (a new version of) ingested content; the hash stands for
// the bytes, so a new hash makes a new version.
func (e *env) upload(id, mime, hash string, lbls map[string]string, graphs ...string) *pb.ContentRef {
	e.t.Helper()
	res := e.do(&pb.Command_CreateContent{CreateContent: &pb.CreateContentCmd{Contents: []*pb.Content{{
		Id: id, Namespace: ns, Name: id, MimeType: mime, Labels: lbls, Hash: hash,
		StorageUrl: "file:///blobs/" + id + "-" + hash, Source: "ingestion", GraphNames: graphs, SizeBytes: 3,
	}}}})
	return res.GetContents()[0]
}

// extract creates the index-th content task t produced, as an executor's
// upload through the API server would.
func (e *env) extract(t *pb.Task, index int, mime string) string {
	e.t.Helper()
	id := state.ChildContentID(t.GetId(), index)
	e.do(&pb.Command_CreateContent{CreateContent: &pb.CreateContentCmd{Contents: []*pb.Content{{
		Id: id, Namespace: ns, MimeType: mime, ParentId: t.GetContentId(), Source: t.GetPolicyName(),
		SourceTaskId: t.GetId(), GraphNames: []string{t.GetGraphName()}, Hash: "h-" + id,
		StorageUrl: "file:///blobs/" + id,
	}}}})
	return id
}

// complete reports a task outcome from the executor it is assigned to.
func (e *env) complete(taskID string, outcome pb.TaskOutcome, maxAttempts uint32, backoff time.Duration) {
	e.t.Helper()
	t := e.task(taskID)
	e.do(&pb.Command_CompleteTask{CompleteTask: &pb.CompleteTaskCmd{
		TaskId: taskID, ExecutorId: t.GetExecutorId(), Outcome: outcome, Error: "boom",
		MaxAttempts: maxAttempts, BackoffMs: backoff.Milliseconds(),
	}})
}

func (e *env) succeed(taskID string) {
	e.t.Helper()
	e.complete(taskID, pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 1, 0)
}

// plan runs one planner pass at the test clock and applies its command.
func (e *env) plan() *pb.SchedulerUpdateCmd {
	e.t.Helper()
	cmd := Plan(e.store, e.clock.Now(), e.cfg)
	if cmd != nil {
		e.do(&pb.Command_SchedulerUpdate{SchedulerUpdate: cmd})
	}
	return cmd
}

func (e *env) task(id string) *pb.Task {
	e.t.Helper()
	t, ok := e.store.Task(id)
	if !ok {
		e.t.Fatalf("task %s not found", id)
	}
	return t
}

// taskFor returns the task of (graph, policy) on the content's latest
// version, failing the test when it does not exist.
func (e *env) taskFor(graph, policy, contentID string) *pb.Task {
	e.t.Helper()
	c, ok := e.store.Content(ns, contentID)
	if !ok {
		e.t.Fatalf("content %s not found", contentID)
	}
	return e.task(state.TaskID(ns, graph, policy, contentID, c.GetVersion()))
}

// taskKeys lists "graph/policy" of every task of a content id.
func (e *env) taskKeys(contentID string) []string {
	tasks, _ := e.store.ListTasks(state.TaskQuery{Namespace: ns, ContentID: contentID})
	var out []string
	for _, t := range tasks {
		out = append(out, t.GetGraphName()+"/"+t.GetPolicyName())
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !retry.PollUntil(10*time.Second, time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func jsonStr(s string) string { return fmt.Sprintf("%q", s) }
