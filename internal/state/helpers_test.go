package state

import (
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// harness applies commands to a fresh FSM with increasing indexes and
// timestamps (the FSM only sees what the command carries).
type harness struct {
	t     *testing.T
	fsm   *FSM
	idx   uint64
	ts    int64
	rules uint32 // stamped on commands that carry none, as cluster.Node.Apply does
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return &harness{t: t, fsm: NewFSM(NewStore(), nil), ts: 1_000_000, rules: CurrentRules}
}

func (h *harness) store() *Store { return h.fsm.Store() }

// apply runs cmd through the real encode/decode path and Apply.
func (h *harness) apply(cmd *pb.Command) *pb.CommandResult {
	h.t.Helper()
	h.idx++
	h.ts += 1000
	if cmd.Timestamp == 0 {
		cmd.Timestamp = h.ts
	}
	if cmd.Rules == 0 {
		cmd.Rules = h.rules
	}
	b, err := EncodeCommand(cmd)
	if err != nil {
		h.t.Fatalf("encode: %v", err)
	}
	res := h.fsm.Apply(rafLog(h.idx, b))
	r, ok := res.(*pb.CommandResult)
	if !ok {
		h.t.Fatalf("Apply returned %T", res)
	}
	if r.Index != h.idx && cmd.RequestId == "" {
		h.t.Fatalf("result index %d, want %d", r.Index, h.idx)
	}
	return r
}

// ok applies and fails the test on an error result.
func (h *harness) ok(cmd *pb.Command) *pb.CommandResult {
	h.t.Helper()
	r := h.apply(cmd)
	if r.ErrorCode != pb.ErrorCode_ERROR_CODE_OK {
		h.t.Fatalf("command failed: %v %s", r.ErrorCode, r.Error)
	}
	return r
}

// fail applies and requires the given error code; the store must not change.
func (h *harness) fail(code pb.ErrorCode, cmd *pb.Command) *pb.CommandResult {
	h.t.Helper()
	before := h.store().Dump()
	r := h.apply(cmd)
	if r.ErrorCode != code {
		h.t.Fatalf("got %v (%s), want %v", r.ErrorCode, r.Error, code)
	}
	if r.Error == "" {
		h.t.Fatalf("error result without message")
	}
	after := h.store().Dump()
	if stripApplied(before) != stripApplied(after) {
		h.t.Fatalf("failed command changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	return r
}

func stripApplied(dump string) string {
	for i := 0; i < len(dump); i++ {
		if dump[i] == '\n' {
			return dump[i:]
		}
	}
	return dump
}

// setup creates namespace "ns", an executor "ex1" offering extractors
// "chunk" (any params) and "embed" (schema requiring integer "dim") and a
// graph "g" with policies chunker (ingested content) and embedder (output
// of chunker).
func (h *harness) setup() {
	h.t.Helper()
	h.ok(nsCmd("ns"))
	h.ok(registerCmd("ex1", "chunk", "embed"))
	h.ok(graphCmd("ns", "g",
		&pb.ExtractionPolicy{Name: "chunker", Extractor: "chunk"},
		&pb.ExtractionPolicy{Name: "embedder", Extractor: "embed", InputParamsJson: `{"dim": 3}`, ContentSource: "chunker"},
	))
}

const embedSchema = `{"type":"object","properties":{"dim":{"type":"integer"}},"additionalProperties":false}`

func nsCmd(name string) *pb.Command {
	return &pb.Command{Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: name}}}
}

func registerCmd(id string, extractors ...string) *pb.Command {
	e := &pb.Executor{Id: id, Address: "127.0.0.1:9501"}
	for _, x := range extractors {
		d := &pb.ExtractorDescription{Name: x, Description: x + " extractor"}
		if x == "embed" {
			d.InputParamsSchemaJson = embedSchema
		}
		e.Extractors = append(e.Extractors, d)
	}
	return &pb.Command{Op: &pb.Command_RegisterExecutor{RegisterExecutor: &pb.RegisterExecutorCmd{Executor: e}}}
}

func graphCmd(ns, name string, policies ...*pb.ExtractionPolicy) *pb.Command {
	return &pb.Command{Op: &pb.Command_CreateGraph{CreateGraph: &pb.CreateExtractionGraphCmd{
		Graph: &pb.ExtractionGraph{Name: name, Namespace: ns, Policies: policies}}}}
}

func contentCmd(cs ...*pb.Content) *pb.Command {
	return &pb.Command{Op: &pb.Command_CreateContent{CreateContent: &pb.CreateContentCmd{Contents: cs}}}
}

func content(ns, id, hash string, graphs ...string) *pb.Content {
	return &pb.Content{Namespace: ns, Id: id, Hash: hash, Name: id + ".txt", MimeType: "text/plain",
		StorageUrl: "file:///blobs/" + id, SizeBytes: 3, GraphNames: graphs}
}

func schedCmd(u *pb.SchedulerUpdateCmd) *pb.Command {
	return &pb.Command{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: u}}
}

func completeCmd(task, executor string, outcome pb.TaskOutcome, maxAttempts uint32, backoff int64, features ...*pb.Feature) *pb.Command {
	return &pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTaskCmd{
		TaskId: task, ExecutorId: executor, Outcome: outcome, Error: "boom",
		MaxAttempts: maxAttempts, BackoffMs: backoff, Features: features}}}
}

// newTask builds the task the scheduler would make for policy on content.
func (h *harness) newTask(ns, graph, policy, extractor, contentID string, version uint64) *pb.Task {
	return &pb.Task{
		Id: TaskID(ns, graph, policy, contentID, version), Extractor: extractor, PolicyName: policy,
		GraphName: graph, Namespace: ns, ContentId: contentID, ContentVersion: version, InputParamsJson: "{}",
	}
}

// mustChecks verifies the incrementally maintained indexes match indexes
// rebuilt from scratch (via a snapshot round trip).
func (h *harness) checkIndexes() {
	h.t.Helper()
	if err := verifyIndexes(h.store()); err != nil {
		h.t.Fatal(err)
	}
}
