package state

import (
	"strings"
	"testing"

	"github.com/indexify-go/indexify/internal/executor/extractors"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// chunkerHarness registers the real chunker's description (its schema is
// what the coordinator validates graphs against).
func chunkerHarness(t *testing.T, rules uint32) *harness {
	h := newHarness(t)
	h.rules = rules
	h.ok(nsCmd("ns"))
	e := &pb.Executor{Id: "ex1", Address: "127.0.0.1:9501", Extractors: []*pb.ExtractorDescription{extractors.NewChunker().Describe()}}
	h.ok(&pb.Command{Op: &pb.Command_RegisterExecutor{RegisterExecutor: &pb.RegisterExecutorCmd{Executor: e}}})
	return h
}

func chunkGraph(name, params string) *pb.Command {
	return graphCmd("ns", name, &pb.ExtractionPolicy{Name: "chunks", Extractor: extractors.ChunkerName, InputParamsJson: params})
}

// Params that passed validation and then failed every task (issue 18 item
// 5) are refused when the graph is created, with the real bounds.
func TestChunkerParamsValidatedAtCreation(t *testing.T) {
	h := chunkerHarness(t, CurrentRules)
	for params, want := range map[string]string{
		`{"chunk_size":1e18}`:                     "maximum",
		`{"chunk_size":1e29}`:                     "maximum",
		`{"chunk_size":9223372036854775808}`:      "maximum",
		`{"chunk_size":0}`:                        "minimum",
		`{"chunk_size":10,"overlap":10}`:          "overlap (10) must be less than chunk_size (10)",
		`{"chunk_size":10,"overlap":11}`:          "must be less than",
		`{"overlap":100}`:                         "overlap (100) must be less than chunk_size (100)", // default chunk_size
		`{"chunk_size":5}`:                        "",                                                 // default overlap 0
		`{"chunk_size":1000000,"overlap":999999}`: "",
		`{"chunk_size":40,"overlap":39}`:          "",
	} {
		r := h.apply(chunkGraph("g"+strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, params), params))
		if want == "" {
			if r.ErrorCode != pb.ErrorCode_ERROR_CODE_OK {
				t.Errorf("%s refused: %s", params, r.Error)
			}
			continue
		}
		if r.ErrorCode != invalid || !strings.Contains(r.Error, want) {
			t.Errorf("%s: %v %q, want INVALID containing %q", params, r.ErrorCode, r.Error, want)
		}
	}
}

// The cross-field rule is new: an old log entry replays as it did.
func TestLessThanKeywordNotAppliedToOldEntries(t *testing.T) {
	h := chunkerHarness(t, RulesOriginal)
	h.ok(chunkGraph("g", `{"chunk_size":10,"overlap":10}`))
}

func TestCheckLessThanMalformedKeyword(t *testing.T) {
	c := &schemaCache{}
	err := c.validateParams(`{"type":"object","x-indexify-less-than":{"a":5}}`, `{"a":1}`, CurrentRules)
	if err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Fatalf("malformed keyword: %v", err)
	}
	// A huge exponent costs nothing (compared as float64, +Inf).
	err = c.validateParams(`{"type":"object","x-indexify-less-than":{"a":"b"}}`, `{"a":1e999999999,"b":1}`, CurrentRules)
	if err == nil || !strings.Contains(err.Error(), "must be less than") {
		t.Fatalf("huge exponent: %v", err)
	}
}
