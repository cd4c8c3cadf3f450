// Package extractors defines what an executor can run (the Extractor
// interface) and the extractors that ship with it: the built-in chunker and
// attributes extractors, and External, which runs any executable.
package extractors

import (
	"context"
	"encoding/json"
	"fmt"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Extractor turns one piece of content into child content and/or features.
// Implementations must be safe for concurrent use: the executor runs several
// tasks of the same extractor in parallel.
type Extractor interface {
	// Describe returns the registration the coordinator sees; it must be
	// constant for the extractor's lifetime.
	Describe() *pb.ExtractorDescription
	// Extract runs on one content. It must return promptly when ctx is done.
	// An error fails the task with the error text.
	Extract(ctx context.Context, in Input) (*Output, error)
}

// Input is one task's content and parameters.
type Input struct {
	Task     *pb.Task
	Data     []byte
	MimeType string
	Params   json.RawMessage // the policy's input_params; may be empty
}

// Output is what an extractor produced: child contents, and features of the
// input content.
type Output struct {
	Contents []OutContent
	Features []*pb.Feature
}

// OutContent is one child content.
type OutContent struct {
	Data     []byte
	MimeType string
	Labels   map[string]json.RawMessage
	Features []*pb.Feature
}

// paramsObject returns the params as a JSON object text, treating empty and
// null as {} so policies without input_params get the defaults.
func paramsObject(p json.RawMessage) ([]byte, error) {
	if len(p) == 0 || string(p) == "null" {
		return []byte("{}"), nil
	}
	var probe any
	if err := json.Unmarshal(p, &probe); err != nil {
		return nil, fmt.Errorf("input params are not valid JSON: %v", err)
	}
	if _, ok := probe.(map[string]any); !ok {
		return nil, fmt.Errorf("input params must be a JSON object")
	}
	return p, nil
}

// mustJSON marshals values built from constants; a failure is a programming
// error caught by tests, so it yields "null" rather than a panic.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "null"
	}
	return string(b)
}
