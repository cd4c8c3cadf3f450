package scheduler

import (
	"testing"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// A task's input is its content without features: the stored message
// itself when it has none (no copy per task), a copy with the features
// left out when it has some, and the stored content is never changed.
func TestTaskInputLeavesFeaturesOutAndCopiesOnlyThen(t *testing.T) {
	e := newEnv(t)
	e.executor("ex", 0, ext("x"))
	e.graph("g", pol("p", "x", ""))
	e.upload("plain", "text/plain", "h", nil, "g")
	e.do(&pb.Command_CreateContent{CreateContent: &pb.CreateContentCmd{Contents: []*pb.Content{{
		Id: "feat", Namespace: ns, Name: "feat", MimeType: "text/plain", Hash: "h2", Source: "ingestion",
		StorageUrl: "file:///blobs/feat", GraphNames: []string{"g"}, SizeBytes: 3,
		Features: []*pb.Feature{{Name: "emb", Embedding: true, ValueJson: "[1,2,3]"}},
	}}}})
	cmd := Plan(e.store, e.clock.Now(), e.cfg)
	inputs := map[string]*pb.Content{}
	for _, tk := range cmd.GetNewTasks() {
		inputs[tk.GetContentId()] = tk.GetContent()
	}
	plain, _ := e.store.Content(ns, "plain")
	if inputs["plain"] != plain {
		t.Fatal("the input of content without features is not the stored message")
	}
	feat, _ := e.store.Content(ns, "feat")
	in := inputs["feat"]
	switch {
	case in == nil || in == feat:
		t.Fatalf("input of content with features is %p, stored %p: want a copy", in, feat)
	case len(in.GetFeatures()) != 0:
		t.Fatalf("input carries features %v", in.GetFeatures())
	case len(feat.GetFeatures()) != 1 || in.GetStorageUrl() != feat.GetStorageUrl():
		t.Fatalf("stored content changed (%v) or the copy differs (%q)", feat.GetFeatures(), in.GetStorageUrl())
	}
}
