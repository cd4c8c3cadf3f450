package state

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// A new task is stored as a shallow copy of the command's: what the store
// keeps must still never alias the caller's message (ApplyCommand hands the
// FSM the caller's own objects). Fields unknown to this binary are dropped,
// as a snapshot restore drops them: the state after applying the entry and
// after restoring past it are the same (checkIndexes compares the dumps).
func TestNewTaskStoredWithoutAliasingTheCommand(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(contentCmd(content("ns", "doc", "h", "g")))
	// One task on the stored version, one on a version never stored (it
	// keeps its own copy of the content it names).
	onStored := h.newTask("ns", "g", "chunker", "chunk", "doc", 1)
	onStored.Content = &pb.Content{Id: "doc", Namespace: "ns", Version: 1, Name: "from the command"}
	onStored.ResultDigest = []byte{1, 2, 3}
	var unknown []byte
	unknown = protowire.AppendTag(unknown, 999, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 7)
	onStored.ProtoReflect().SetUnknown(unknown)
	elsewhere := h.newTask("ns", "g", "chunker", "chunk", "doc", 9)
	elsewhere.Content = &pb.Content{Id: "doc", Namespace: "ns", Version: 9, Name: "only here"}

	h.idx++
	h.fsm.ApplyCommand(h.idx, &pb.Command{Timestamp: 5, Rules: CurrentRules, Op: &pb.Command_SchedulerUpdate{
		SchedulerUpdate: &pb.SchedulerUpdateCmd{NewTasks: []*pb.Task{onStored, elsewhere}}}})
	// The caller scribbles over its messages afterwards.
	onStored.Content.Name, onStored.ResultDigest[0], onStored.Extractor = "changed", 9, "changed"
	elsewhere.Content.Name = "changed"

	a, _ := h.store().Task(onStored.Id)
	if c, _ := h.store().Content("ns", "doc"); a.GetContent() != c {
		t.Fatal("task on the stored version does not share the stored content message")
	}
	if a.GetExtractor() != "chunk" || !bytes.Equal(a.GetResultDigest(), []byte{1, 2, 3}) {
		t.Fatalf("stored task changed with the command: extractor %q digest %v", a.GetExtractor(), a.GetResultDigest())
	}
	if len(a.ProtoReflect().GetUnknown()) != 0 {
		t.Fatalf("unknown fields %v kept; a restored replica would not have them", a.ProtoReflect().GetUnknown())
	}
	b, _ := h.store().Task(elsewhere.Id)
	if b.GetContent() == elsewhere.Content || b.GetContent().GetName() != "only here" {
		t.Fatalf("task on an unstored version aliases the command's content (name %q)", b.GetContent().GetName())
	}
	h.checkIndexes()
}

// Content from a decoded entry is stored as decoded (nobody else holds
// it); content handed in through ApplyCommand is copied, since its caller
// keeps it.
func TestContentFromApplyCommandIsCopied(t *testing.T) {
	h := newHarness(t)
	h.setup()
	in := content("ns", "doc", "h", "g")
	in.Labels = map[string]string{"k": `"v"`}
	h.idx++
	if r := h.fsm.ApplyCommand(h.idx, &pb.Command{Timestamp: 5, Rules: CurrentRules, Op: &pb.Command_CreateContent{
		CreateContent: &pb.CreateContentCmd{Contents: []*pb.Content{in}}}}); r.GetErrorCode() != pb.ErrorCode_ERROR_CODE_OK {
		t.Fatalf("create: %v %s", r.GetErrorCode(), r.GetError())
	}
	in.Name, in.Labels["k"] = "changed", "changed"
	c, _ := h.store().Content("ns", "doc")
	if c == in || c.GetName() == "changed" || c.GetLabels()["k"] != `"v"` {
		t.Fatalf("stored content aliases the caller's message: %v", c)
	}
	if in.GetVersion() != 0 || in.GetChangeOffset() != 0 {
		t.Fatalf("the caller's message was written to: %v", in)
	}
	h.checkIndexes()
}
