package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestTaskResultRoundTrip(t *testing.T) {
	in := TaskResult{
		Outcome:  OutcomeSuccess,
		Features: []ResultFeature{{Name: "meta", Value: json.RawMessage(`{"a":1}`)}},
		Content: []ResultContent{
			{Index: 1, MimeType: "text/plain", Labels: map[string]json.RawMessage{"chunk_index": json.RawMessage(`1`)}},
			{Index: 0, MimeType: "text/plain", Features: []ResultFeature{{Name: "e", Embedding: true, Value: json.RawMessage(`[0.5,1]`)}}},
		},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	// The wire names are the contract with the API server.
	for _, want := range []string{`"outcome":"success"`, `"features":[{"name":"meta","embedding":false,"value":{"a":1}}]`, `"index":1`, `"mime_type":"text/plain"`, `"labels":{"chunk_index":1}`, `"embedding":true,"value":[0.5,1]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("encoded %s lacks %s", b, want)
		}
	}
	got, err := ParseTaskResult(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != OutcomeSuccess || len(got.Content) != 2 || got.Content[0].Index != 1 || string(got.Content[0].Labels["chunk_index"]) != "1" {
		t.Fatalf("round trip mismatch: %+v", got)
	}
	p := got.Content[1].Features[0].ToProto("pol")
	if p.GetName() != "e" || !p.GetEmbedding() || p.GetValueJson() != "[0.5,1]" || p.GetPolicy() != "pol" {
		t.Fatalf("ToProto: %v", p)
	}
	if back := FeatureFromProto(p); back.Name != "e" || string(back.Value) != "[0.5,1]" || !back.Embedding {
		t.Fatalf("FeatureFromProto: %+v", back)
	}
	if l := LabelsToProto(got.Content[0].Labels); l["chunk_index"] != "1" {
		t.Fatalf("LabelsToProto: %v", l)
	}
}

func TestParseTaskResultRejects(t *testing.T) {
	cases := map[string]string{
		"bad json":          `{`,
		"trailing":          `{"outcome":"success"} {}`,
		"unknown outcome":   `{"outcome":"ok"}`,
		"failed w/ content": `{"outcome":"failed","content":[{"index":0,"mime_type":"text/plain"}]}`,
		"index range":       `{"outcome":"success","content":[{"index":1,"mime_type":"a"}]}`,
		"dup index":         `{"outcome":"success","content":[{"index":0},{"index":0}]}`,
		"feature no name":   `{"outcome":"success","features":[{"name":"","value":1}]}`,
		"feature no value":  `{"outcome":"success","features":[{"name":"x"}]}`,
		"embedding not arr": `{"outcome":"success","features":[{"name":"x","embedding":true,"value":{"a":1}}]}`,
		"child feature":     `{"outcome":"success","content":[{"index":0,"features":[{"name":"x","embedding":true,"value":["a"]}]}]}`,
		"empty label":       `{"outcome":"success","content":[{"index":0,"labels":{"":1}}]}`,
	}
	for name, in := range cases {
		if _, err := ParseTaskResult([]byte(in)); err == nil {
			t.Errorf("%s: accepted %s", name, in)
		}
	}
	if r, err := ParseTaskResult([]byte(`{"outcome":"failed","error":"boom","future_field":1}`)); err != nil || r.Error != "boom" {
		t.Fatalf("failed result: %v %+v", err, r)
	}
}

func TestContentPartName(t *testing.T) {
	for _, i := range []int{0, 1, 12} {
		n := ContentPartName(i)
		got, ok := ParseContentPartName(n)
		if !ok || got != i {
			t.Fatalf("%s -> %d %v", n, got, ok)
		}
	}
	for _, bad := range []string{"content_", "content_-1", "content_01", "content_+1", "file_1", "content_x"} {
		if _, ok := ParseContentPartName(bad); ok {
			t.Errorf("accepted %q", bad)
		}
	}
	p := ResultPath("ex 1", "t/2")
	if p != "/internal/executors/ex%201/tasks/t%2F2/result" {
		t.Fatalf("ResultPath = %s", p)
	}
	// IsResultPath recognises exactly the paths ResultPath makes.
	if !IsResultPath(p) {
		t.Errorf("IsResultPath(%q) = false", p)
	}
	for _, bad := range []string{"/internal/executors//tasks/t/result", "/internal/executors/e/tasks/t/result/x",
		"/internal/executors/e/tasks/t", "/internal/executors/e/task/t/result", "/namespaces/e/tasks/t/result"} {
		if IsResultPath(bad) {
			t.Errorf("IsResultPath(%q) = true", bad)
		}
	}
}
