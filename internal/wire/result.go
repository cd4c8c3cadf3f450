package wire

// This file is the contract between executors and the API server for task
// results: the executor writes these shapes and the API server parses them,
// so keep it free of runtime concerns.
//
// Upload: POST {api}ResultRoute (ResultPath) as multipart/form-data with
//   - a form field "result" (ResultField) holding TaskResult as JSON, and
//   - one file part per child content, form name "content_{i}"
//     (ContentPartName(i)), whose body is the raw bytes of TaskResult.Content
//     entry with Index == i.
//
// Status codes the executor understands:
//   - 2xx: accepted.
//   - 409: the task is no longer assigned to this executor (code "conflict"),
//     or it finished with a different result (code "task_already_completed");
//     it drops the task. The same result again is 200 with "duplicate": true.
//   - 404: the task is unknown; it drops the task.
//   - other 4xx: the upload itself is malformed; it gives up (not retried).
//   - 429, 5xx and network errors: retried with backoff.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Outcome values of TaskResult.Outcome.
const (
	OutcomeSuccess = "success"
	OutcomeFailed  = "failed"
)

// ResultField is the multipart form field that carries the TaskResult JSON.
const ResultField = "result"

// contentPartPrefix prefixes the form names of the child content file parts.
const contentPartPrefix = "content_"

// ContentPartName is the multipart form name of child content i.
func ContentPartName(i int) string { return contentPartPrefix + strconv.Itoa(i) }

// ParseContentPartName returns i for a form name "content_{i}".
func ParseContentPartName(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, contentPartPrefix)
	if !ok || rest == "" {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	// Reject "+1", "01" and negatives so a name maps to exactly one index.
	if err != nil || i < 0 || strconv.Itoa(i) != rest {
		return 0, false
	}
	return i, true
}

// ResultRoute is the result upload's URL path (relative to the API server
// base URL) as an http.ServeMux pattern; ResultPath fills it in for a task.
const ResultRoute = "/internal/executors/{executor_id}/tasks/{task_id}/result"

// ResultPath is the URL path of the result upload for a task.
func ResultPath(executorID, taskID string) string {
	return strings.NewReplacer("{executor_id}", url.PathEscape(executorID), "{task_id}", url.PathEscape(taskID)).Replace(ResultRoute)
}

// IsResultPath reports whether an escaped URL path is a result upload's
// (ResultRoute with non-empty ids).
func IsResultPath(escaped string) bool {
	want := strings.Split(ResultRoute, "/")
	got := strings.Split(escaped, "/")
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		if strings.HasPrefix(w, "{") {
			if got[i] == "" {
				return false
			}
		} else if got[i] != w {
			return false
		}
	}
	return true
}

// TaskResult is what an executor reports for one task.
type TaskResult struct {
	Outcome  string          `json:"outcome"`         // OutcomeSuccess | OutcomeFailed
	Error    string          `json:"error,omitempty"` // set when failed
	Features []ResultFeature `json:"features,omitempty"`
	Content  []ResultContent `json:"content,omitempty"`
}

// ResultAccepted is the 200 answer of a result upload: the ids of the
// child content it created, and Duplicate when it repeated a result the
// task already had.
type ResultAccepted struct {
	ContentIDs []string `json:"content_ids"`
	Duplicate  bool     `json:"duplicate,omitempty"`
	TaskID     string   `json:"task_id"`
}

// ResultFeature is a feature for the task's input content (in
// TaskResult.Features) or for a child content (in ResultContent.Features).
type ResultFeature struct {
	Name      string          `json:"name"`
	Embedding bool            `json:"embedding"`
	Value     json.RawMessage `json:"value"`
}

// ResultContent describes one child content; its bytes travel in the file
// part ContentPartName(Index).
type ResultContent struct {
	Index    int                        `json:"index"`
	MimeType string                     `json:"mime_type"`
	Labels   map[string]json.RawMessage `json:"labels,omitempty"`
	Features []ResultFeature            `json:"features,omitempty"`
}

// ParseTaskResult decodes and validates the "result" field.
func ParseTaskResult(data []byte) (*TaskResult, error) {
	var r TaskResult
	// Unknown fields are tolerated so a newer executor can talk to an older
	// API server during a rolling upgrade.
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("invalid task result JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("invalid task result JSON: trailing data")
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate checks the invariants the API server relies on: a known outcome,
// content indexes exactly 0..n-1, feature names present, values valid JSON,
// embeddings arrays of numbers.
func (r *TaskResult) Validate() error {
	switch r.Outcome {
	case OutcomeSuccess:
	case OutcomeFailed:
		if len(r.Content) > 0 {
			return errors.New("a failed result must not carry content")
		}
	default:
		return fmt.Errorf("invalid outcome %q (want %q or %q)", r.Outcome, OutcomeSuccess, OutcomeFailed)
	}
	if err := validateFeatures(r.Features, "features"); err != nil {
		return err
	}
	seen := make([]bool, len(r.Content))
	for i, c := range r.Content {
		if c.Index < 0 || c.Index >= len(r.Content) {
			return fmt.Errorf("content[%d]: index %d out of range 0..%d", i, c.Index, len(r.Content)-1)
		}
		if seen[c.Index] {
			return fmt.Errorf("content[%d]: duplicate index %d", i, c.Index)
		}
		seen[c.Index] = true
		for k, v := range c.Labels {
			if k == "" {
				return fmt.Errorf("content[%d]: empty label name", i)
			}
			if !json.Valid(v) {
				return fmt.Errorf("content[%d]: label %q is not valid JSON", i, k)
			}
		}
		if err := validateFeatures(c.Features, fmt.Sprintf("content[%d].features", i)); err != nil {
			return err
		}
	}
	return nil
}

func validateFeatures(fs []ResultFeature, where string) error {
	for i, f := range fs {
		if f.Name == "" {
			return fmt.Errorf("%s[%d]: empty name", where, i)
		}
		if len(f.Value) == 0 || !json.Valid(f.Value) {
			return fmt.Errorf("%s[%d] (%s): value is not valid JSON", where, i, f.Name)
		}
		if f.Embedding {
			var nums []float64
			if err := json.Unmarshal(f.Value, &nums); err != nil {
				return fmt.Errorf("%s[%d] (%s): an embedding must be an array of numbers", where, i, f.Name)
			}
		}
	}
	return nil
}

// ToProto converts the feature for the state model; policy is the task's
// policy name.
func (f ResultFeature) ToProto(policy string) *pb.Feature {
	return &pb.Feature{Name: f.Name, Policy: policy, Embedding: f.Embedding, ValueJson: string(f.Value)}
}

// FeaturesToProto converts a list of result features.
func FeaturesToProto(fs []ResultFeature, policy string) []*pb.Feature {
	if len(fs) == 0 {
		return nil
	}
	out := make([]*pb.Feature, len(fs))
	for i, f := range fs {
		out[i] = f.ToProto(policy)
	}
	return out
}

// FeatureFromProto converts a state-model feature to its wire form.
func FeatureFromProto(f *pb.Feature) ResultFeature {
	return ResultFeature{Name: f.GetName(), Embedding: f.GetEmbedding(), Value: json.RawMessage(f.GetValueJson())}
}

// LabelsToProto converts JSON-valued labels to the state model's map of JSON
// text.
func LabelsToProto(l map[string]json.RawMessage) map[string]string {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]string, len(l))
	for k, v := range l {
		out[k] = string(v)
	}
	return out
}
