package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// scenario returns commands touching every kind of replicated object:
// namespaces, graphs, links, executors, content versions and trees, tasks in
// every state, changes (processed and not), GC tasks, nodes and request ids.
func scenario() []*pb.Command {
	var cmds []*pb.Command
	add := func(c *pb.Command) { cmds = append(cmds, c) }
	add(nsCmd("ns"))
	add(nsCmd("other"))
	add(registerCmd("ex1", "chunk", "embed"))
	add(registerCmd("ex2", "chunk"))
	add(graphCmd("ns", "g",
		&pb.ExtractionPolicy{Name: "chunker", Extractor: "chunk", Filter: []string{"lang=en"}},
		&pb.ExtractionPolicy{Name: "embedder", Extractor: "embed", InputParamsJson: `{"dim": 3}`, ContentSource: "chunker"}))
	add(graphCmd("ns", "g2", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"}))
	add(&pb.Command{Op: &pb.Command_CreateLink{CreateLink: &pb.CreateGraphLinkCmd{Link: &pb.GraphLink{
		Namespace: "ns", GraphName: "g", ContentSource: "chunker", LinkedGraphName: "g2"}}}})
	for i := 0; i < 20; i++ {
		c := content("ns", fmt.Sprintf("doc%02d", i), fmt.Sprintf("h%d", i), "g")
		c.Labels = map[string]string{"lang": `"en"`, "i": fmt.Sprint(i)}
		cmd := contentCmd(c)
		cmd.RequestId = fmt.Sprintf("upload-%d", i)
		add(cmd)
	}
	add(contentCmd(content("ns", "doc00", "h0-v2", "g"))) // second version
	var tasks []*pb.Task
	var assigns []*pb.Assignment
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("doc%02d", i)
		tk := &pb.Task{Id: TaskID("ns", "g", "chunker", id, 1), Extractor: "chunk", PolicyName: "chunker",
			GraphName: "g", Namespace: "ns", ContentId: id, ContentVersion: 1, InputParamsJson: "{}"}
		tasks = append(tasks, tk)
		if i%3 != 0 {
			ex := "ex1"
			if i%2 == 0 {
				ex = "ex2"
			}
			assigns = append(assigns, &pb.Assignment{TaskId: tk.Id, ExecutorId: ex})
		}
	}
	add(schedCmd(&pb.SchedulerUpdateCmd{ProcessedChangeIds: []uint64{1, 2, 3}, NewTasks: tasks, Assignments: assigns,
		NewGcTasks: []*pb.GCTask{{Id: "gc1", Namespace: "ns", ContentId: "doc19", ContentVersion: 1}}}))
	// doc01 (ex1): success with a child; doc02 (ex2): retry; doc04 (ex2): terminal failure.
	t1 := tasks[1].Id
	kid := content("ns", ChildContentID(t1, 0), "hk", "g")
	kid.ParentId, kid.Source, kid.SourceTaskId = "doc01", "chunker", t1
	add(contentCmd(kid))
	add(completeCmd(t1, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 3, 100, &pb.Feature{Name: "f", ValueJson: "[1,2]", Embedding: true}))
	add(completeCmd(tasks[2].Id, "ex2", pb.TaskOutcome_TASK_OUTCOME_FAILED, 3, 100))
	add(completeCmd(tasks[4].Id, "ex2", pb.TaskOutcome_TASK_OUTCOME_FAILED, 1, 100))
	// doc07 (ex1): the atomic completion, leaving a result digest.
	add(&pb.Command{Op: &pb.Command_CompleteTaskV2{CompleteTaskV2: &pb.CompleteTaskCmd{TaskId: tasks[7].Id, ExecutorId: "ex1",
		Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS, MaxAttempts: 3, Children: []*pb.Content{child("hv2", map[string]string{"n": "1"})}}}})
	add(&pb.Command{Op: &pb.Command_UpdateLabels{UpdateLabels: &pb.UpdateLabelsCmd{Namespace: "ns", ContentId: "doc05", Labels: map[string]string{"x": "1"}}}})
	add(&pb.Command{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: []string{"doc19"}}}})
	add(&pb.Command{Op: &pb.Command_AckGcTasks{AckGcTasks: &pb.AckGCTasksCmd{Ids: []string{"gc1"}}}})
	add(&pb.Command{Op: &pb.Command_ExecutorHeartbeat{ExecutorHeartbeat: &pb.ExecutorHeartbeatCmd{ExecutorIds: []string{"ex1"}}}})
	add(&pb.Command{Op: &pb.Command_UpsertNode{UpsertNode: &pb.UpsertNodeCmd{Node: &pb.NodeInfo{Id: "n1", RaftAddr: "127.0.0.1:8970"}}}})
	add(nsCmd("-invalid")) // a failed command is part of history too
	bad := nsCmd("-x")
	bad.RequestId = "failed-req"
	add(bad)
	for i, c := range cmds {
		c.Timestamp = int64(1_000_000 + i*1000)
	}
	return cmds
}

func applyAll(t *testing.T, f *FSM, cmds []*pb.Command, firstIndex uint64) {
	t.Helper()
	for i, c := range cmds {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		f.Apply(rafLog(firstIndex+uint64(i), b))
	}
}

func TestSnapshotRestoreIdentical(t *testing.T) {
	src := NewFSM(NewStore(), nil)
	cmds := scenario()
	applyAll(t, src, cmds, 1)
	if err := verifyIndexes(src.Store()); err != nil {
		t.Fatal(err)
	}

	// Through the raft.FSM interface and a real (in-memory) snapshot store.
	snaps := raft.NewInmemSnapshotStore()
	fs, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, src.Store().AppliedIndex(), 1, raft.Configuration{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Persist(sink); err != nil {
		t.Fatal(err)
	}
	fs.Release()
	metas, _ := snaps.List()
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}

	// Restore into a store that already holds different state.
	dst := NewFSM(NewStore(), nil)
	applyAll(t, dst, []*pb.Command{nsCmd("stale"), registerCmd("ex9", "chunk")}, 1)
	watch := dst.Store().Watch()
	if err := dst.Restore(rc); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch:
	default:
		t.Fatal("restore did not wake watchers")
	}
	if a, b := src.Store().Dump(), dst.Store().Dump(); a != b {
		t.Fatalf("dumps differ:\n%s\n----\n%s", a, b)
	}
	if !src.Store().Equal(dst.Store()) {
		t.Fatal("Equal disagrees with Dump")
	}
	if _, ok := dst.Store().Namespace("stale"); ok {
		t.Fatal("old state survived restore")
	}
	// Counters survived: applying the same next commands keeps them equal.
	more := []*pb.Command{
		contentCmd(content("ns", "new", "hn", "g")),
		contentCmd(content("ns", "doc03", "h3-v2", "g")),
		{Op: &pb.Command_TombstoneContent{TombstoneContent: &pb.TombstoneContentCmd{Namespace: "ns", ContentIds: []string{"doc01"}}}},
	}
	next := src.Store().AppliedIndex() + 1
	applyAll(t, src, more, next)
	applyAll(t, dst, more, next)
	if !src.Store().Equal(dst.Store()) {
		t.Fatalf("diverged after restore:\n%s\n----\n%s", src.Store().Dump(), dst.Store().Dump())
	}
	if err := verifyIndexes(dst.Store()); err != nil {
		t.Fatal(err)
	}
	// Sanity: the scenario produced what it claims.
	s := dst.Store()
	if len(s.PendingTasks()) == 0 || len(s.UnprocessedChanges(0)) == 0 || len(s.Links("ns", "")) != 1 || len(s.Nodes()) != 1 {
		t.Fatal("scenario too thin")
	}
}

func TestRestoreRejectsCorruptSnapshots(t *testing.T) {
	src := NewFSM(NewStore(), nil)
	applyAll(t, src, scenario(), 1)
	var buf bytes.Buffer
	if err := src.Store().WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()

	dst := NewStore()
	f := NewFSM(dst, nil)
	applyAll(t, f, []*pb.Command{nsCmd("keep")}, 1)
	before := dst.Dump()
	check := func(name string, b []byte) {
		t.Helper()
		if err := dst.Restore(bytes.NewReader(b)); err == nil {
			t.Fatalf("%s: restore accepted a bad snapshot", name)
		}
		if dst.Dump() != before {
			t.Fatalf("%s: failed restore changed the store", name)
		}
	}
	for _, n := range []int{0, 1, 5, len(full) / 2, len(full) - 1} {
		check(fmt.Sprintf("truncated at %d", n), full[:n])
	}
	flipped := append([]byte(nil), full...)
	flipped[len(flipped)/2] ^= 0xff
	flipped[len(flipped)/2+1] ^= 0xff
	// A flipped byte inside a string may still parse; only require no panic
	// and all-or-nothing: either an error with the store unchanged, or success.
	if err := NewStore().Restore(bytes.NewReader(flipped)); err != nil {
		t.Logf("flipped bytes rejected: %v", err)
	}
	// Wrong format version in the header.
	var hdr []byte
	hdr = binary.AppendUvarint(hdr, 3)
	hdr = append(hdr, recHeader, 0x08, 0x09) // field 1 = 9
	check("future format", hdr)
	check("no header", []byte{2, recNamespace, 0})
	check("garbage", []byte("definitely not a snapshot"))
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n <= 0 {
		return 0, io.ErrShortWrite
	}
	w.n -= len(p)
	return len(p), nil
}

func TestWriteSnapshotReportsErrors(t *testing.T) {
	src := NewFSM(NewStore(), nil)
	applyAll(t, src, scenario(), 1)
	if err := src.Store().WriteSnapshot(&failingWriter{n: 0}); err == nil {
		t.Fatal("write error swallowed")
	}
}

// maxWriter records the largest single Write; a snapshot must reach its sink
// in bounded pieces, never as one buffer of the whole state.
type maxWriter struct{ total, max int }

func (w *maxWriter) Write(p []byte) (int, error) {
	w.total += len(p)
	if len(p) > w.max {
		w.max = len(p)
	}
	return len(p), nil
}

func TestSnapshotStreamsInBoundedWrites(t *testing.T) {
	f := NewFSM(NewStore(), nil)
	applyAll(t, f, []*pb.Command{nsCmd("ns"), registerCmd("ex1", "chunk"),
		graphCmd("ns", "g", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk"})}, 1)
	idx := uint64(4)
	for i := 0; i < 40; i++ {
		var cs []*pb.Content
		for j := 0; j < 500; j++ {
			id := fmt.Sprintf("c%05d", i*500+j)
			c := content("ns", id, id, "g")
			c.StorageUrl = "file:///var/lib/indexify/blobs/" + id + "/" + fmt.Sprintf("%064d", j)
			cs = append(cs, c)
		}
		applyAll(t, f, []*pb.Command{contentCmd(cs...)}, idx)
		idx++
	}
	w := &maxWriter{}
	if err := f.Store().WriteSnapshot(w); err != nil {
		t.Fatal(err)
	}
	if w.total < 2<<20 {
		t.Fatalf("snapshot only %d bytes: test too small to show streaming", w.total)
	}
	if w.max > 1<<20 {
		t.Fatalf("largest write %d bytes of %d total", w.max, w.total)
	}
}
