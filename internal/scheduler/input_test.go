package scheduler

import (
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// New tasks go into the scheduler's entry without their content; once
// applied, each holds the stored version it names (features included: the
// stored message itself), so what an executor is pushed is unchanged.
func TestNewTasksTravelWithoutContentAndGetTheStoredVersion(t *testing.T) {
	e := newEnv(t)
	e.executor("ex", 0, ext("x"))
	e.graph("g", pol("p", "x", ""))
	e.upload("plain", "text/plain", "h", nil, "g")
	e.do(&pb.Command_CreateContent{CreateContent: &pb.CreateContentCmd{Contents: []*pb.Content{{
		Id: "feat", Namespace: ns, Name: "feat", MimeType: "text/plain", Hash: "h2", Source: "ingestion",
		StorageUrl: "file:///blobs/feat", GraphNames: []string{"g"}, SizeBytes: 3,
		Features: []*pb.Feature{{Name: "emb", Embedding: true, ValueJson: "[1,2,3]"}},
	}}}})
	cmd := e.plan()
	if len(cmd.GetNewTasks()) != 2 {
		t.Fatalf("%d new tasks, want 2", len(cmd.GetNewTasks()))
	}
	for _, tk := range cmd.GetNewTasks() {
		if tk.GetContent() != nil {
			t.Fatalf("task %s carries its content in the entry", tk.GetId())
		}
		stored := e.task(tk.GetId())
		c, _ := e.store.Content(ns, tk.GetContentId())
		if stored.GetContent() != c {
			t.Fatalf("stored task %s does not hold the stored content version", tk.GetId())
		}
	}
	if c, _ := e.store.Content(ns, "feat"); len(c.GetFeatures()) != 1 {
		t.Fatalf("stored content lost its features: %v", c.GetFeatures())
	}
}
