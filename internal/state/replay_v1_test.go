package state

// Replay safety: a log written before complete_task_v2 existed (results as
// CreateContent + complete_task) must apply exactly as it did. The entries
// and the state they produced were recorded with the code of that time
// (testdata/replay_v1.log, testdata/replay_v1.dump, written by this test
// with INDEXIFY_WRITE_GOLDEN=1 on the old tree); this test replays them
// with today's FSM and compares the canonical dump byte for byte.

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// replayV1Commands is the recorded scenario: the old result path (children
// created by an unfenced CreateContent, then complete_task), a forged
// second result that made the real chunk version 2 (the old behaviour is
// replayed as it was, not repaired), a stale executor refused, a retried
// failure and a de-duplicated request id.
func replayV1Commands() []*pb.Command {
	t1 := TaskID("ns", "g", "chunker", "doc", 1)
	t2 := TaskID("ns", "g", "chunker", "doc2", 1)
	kid := func(task, hash string, ts int64) *pb.Content {
		id := ChildContentID(task, 0)
		return &pb.Content{Id: id, Namespace: "ns", ParentId: "doc", RootContentId: "doc", Name: id,
			MimeType: "text/plain", Labels: map[string]string{"chunk": "0"}, StorageUrl: "file:///blobs/" + hash,
			CreatedAt: ts, Source: "chunker", SizeBytes: 5, Hash: hash, GraphNames: []string{"g"}, SourceTaskId: task}
	}
	task := func(id, contentID string) *pb.Task {
		return &pb.Task{Id: id, Extractor: "chunk", PolicyName: "chunker", GraphName: "g", Namespace: "ns",
			ContentId: contentID, ContentVersion: 1, InputParamsJson: "{}"}
	}
	assign := func(id, ex string) *pb.Command {
		return schedCmd(&pb.SchedulerUpdateCmd{Assignments: []*pb.Assignment{{TaskId: id, ExecutorId: ex}}})
	}
	cmds := []*pb.Command{
		nsCmd("ns"),
		registerCmd("ex1", "chunk", "embed"),
		registerCmd("ex2", "chunk"),
		graphCmd("ns", "g", &pb.ExtractionPolicy{Name: "chunker", Extractor: "chunk"}),
		contentCmd(content("ns", "doc", "hdoc", "g"), content("ns", "doc2", "hdoc2", "g")),
		schedCmd(&pb.SchedulerUpdateCmd{ProcessedChangeIds: []uint64{1, 2, 3, 4},
			NewTasks:    []*pb.Task{task(t1, "doc"), task(t2, "doc2")},
			Assignments: []*pb.Assignment{{TaskId: t1, ExecutorId: "ex1"}, {TaskId: t2, ExecutorId: "ex1"}}}),
		contentCmd(kid(t1, "real", 5)),
		completeCmd(t1, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 3, 100, &pb.Feature{Name: "summary", ValueJson: `{"n":1}`}),
		contentCmd(kid(t1, "forged", 6)),
		completeCmd(t1, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 3, 100),
		assign(t2, "ex2"),
		completeCmd(t2, "ex1", pb.TaskOutcome_TASK_OUTCOME_SUCCESS, 3, 100),
		completeCmd(t2, "ex2", pb.TaskOutcome_TASK_OUTCOME_FAILED, 3, 100),
		assign(t2, "ex1"),
		completeCmd(t2, "ex1", pb.TaskOutcome_TASK_OUTCOME_FAILED, 2, 100),
	}
	dup := nsCmd("ns2")
	dup.RequestId = "req-1"
	again := nsCmd("ns3")
	again.RequestId = "req-1"
	cmds = append(cmds, dup, again)
	for i, c := range cmds {
		c.Timestamp = 1_000_000 + int64(i)*1000
	}
	return cmds
}

func TestReplayV1LogGivesRecordedState(t *testing.T) {
	logPath := filepath.Join("testdata", "replay_v1.log")
	dumpPath := filepath.Join("testdata", "replay_v1.dump")
	var enc []byte
	for _, c := range replayV1Commands() {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		enc = binary.AppendUvarint(enc, uint64(len(b)))
		enc = append(enc, b...)
	}
	if os.Getenv("INDEXIFY_WRITE_GOLDEN") == "1" {
		f := NewFSM(NewStore(), nil)
		applyLogFile(t, f, enc)
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(logPath, enc, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dumpPath, []byte(f.Store().Dump()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recorded, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(dumpPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(recorded, enc) {
		t.Fatal("today's encoding of the old commands differs from the recorded log")
	}
	f := NewFSM(NewStore(), nil)
	applyLogFile(t, f, recorded)
	if got := f.Store().Dump(); canonicalDump(got) != canonicalDump(string(want)) {
		t.Fatalf("replayed state differs from the recorded state:\n--- got\n%s\n--- want\n%s", got, want)
	}
	// The old behaviour is kept, bug included: the forged chunk is version 2.
	id := ChildContentID(TaskID("ns", "g", "chunker", "doc", 1), 0)
	if vs := f.Store().ContentVersions("ns", id); len(vs) != 2 {
		t.Fatalf("versions of the chunk after replay: %v", vs)
	}
}

func applyLogFile(t *testing.T, f *FSM, b []byte) {
	t.Helper()
	for idx := uint64(1); len(b) > 0; idx++ {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			t.Fatalf("truncated log at entry %d", idx)
		}
		f.Apply(rafLog(idx, b[k:k+int(n)]))
		b = b[k+int(n):]
	}
}

// canonicalDump removes what prototext varies between builds (it adds a
// random second space between fields to keep its output from being
// relied on byte for byte) and sorts lines, so dumps made by two different
// binaries compare equal exactly when the state is equal.
func canonicalDump(s string) string {
	for strings.Contains(s, "  ") {
		s = strings.ReplaceAll(s, "  ", " ")
	}
	lines := strings.Split(s, "\n")
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
