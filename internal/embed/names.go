package embed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/indexify-go/indexify/internal/index"
)

// The registered names of the embedding extractors. The API server looks an
// index's extractor name up here to embed a query the same way.
const (
	LexicalExtractor = "tensorlake/lexical-embedding"
	OpenAIExtractor  = "tensorlake/openai-embedding"
)

// Output is the name of the embedding feature (and of the declared output)
// both extractors produce, so their indexes are "<graph>.<policy>.embedding".
const Output = "embedding"

// Distance is the distance both extractors declare: their vectors are
// compared by cosine similarity.
const Distance = index.Cosine

// Dimension bounds shared by the params schemas and the parsers.
const (
	MinDim     = 8
	MaxDim     = 4096
	DefaultDim = 384
)

// FromParams builds the embedder that the named extractor uses with these
// input params (a policy's input_params; empty means defaults). The API
// server calls it with an index's extractor and params to embed a query into
// the same space as the indexed vectors. It does no network I/O.
func FromParams(extractor string, params json.RawMessage) (Embedder, error) {
	return FromParamsWith(extractor, params, OpenAIDefaults{})
}

// FromParamsWith is FromParams with the server's own OpenAI settings (base
// URL, model, key file, key directory) for what the params leave out.
func FromParamsWith(extractor string, params json.RawMessage, openai OpenAIDefaults) (Embedder, error) {
	switch extractor {
	case LexicalExtractor:
		p, err := ParseLexicalParams(params)
		if err != nil {
			return nil, err
		}
		return NewLexical(p.Dim), nil
	case OpenAIExtractor:
		cfg, err := ParseOpenAIParams(params, openai)
		if err != nil {
			return nil, err
		}
		return NewOpenAI(cfg)
	}
	return nil, fmt.Errorf("extractor %q is not an embedding extractor this server can run (known: %s, %s)",
		extractor, LexicalExtractor, OpenAIExtractor)
}

// ParamsDim returns the vector dimension the named extractor produces with
// these params, validating them but touching no file or network: what an
// index built from that policy must be created with. It depends on the
// params alone (the OpenAI-compatible extractor requires its dim there),
// never on a server's configuration, so every API server and executor
// derives the same dimension, also when base_url and model come from the
// configuration file.
func ParamsDim(extractor string, params json.RawMessage) (int, error) {
	switch extractor {
	case LexicalExtractor:
		p, err := ParseLexicalParams(params)
		return p.Dim, err
	case OpenAIExtractor:
		p, err := parseOpenAIShape(params, OpenAIDefaults{})
		return p.Dim, err
	}
	return 0, fmt.Errorf("extractor %q is not an embedding extractor (known: %s, %s)",
		extractor, LexicalExtractor, OpenAIExtractor)
}

// fields decodes params as a JSON object, empty or null meaning {}, and
// rejects keys outside allowed so a typo is an error, not a default.
func fields(raw json.RawMessage, allowed ...string) (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return m, nil
	}
	if t[0] != '{' {
		return nil, fmt.Errorf("input params must be a JSON object")
	}
	if err := json.Unmarshal(t, &m); err != nil {
		return nil, fmt.Errorf("input params are not valid JSON: %v", err)
	}
	for k := range m {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			sorted := append([]string(nil), allowed...)
			sort.Strings(sorted)
			return nil, fmt.Errorf("unknown input param %q (allowed: %s)", k, strings.Join(sorted, ", "))
		}
	}
	return m, nil
}

// intField decodes a JSON integer (10 or 10.0, as JSON schema's "integer")
// within [lo, hi].
func intField(m map[string]json.RawMessage, key string, def, lo, hi int) (int, error) {
	v, ok := m[key]
	if !ok || string(bytes.TrimSpace(v)) == "null" {
		return def, nil
	}
	bad := fmt.Errorf("%s must be an integer in [%d, %d], got %s", key, lo, hi, bytes.TrimSpace(v))
	t := bytes.TrimSpace(v)
	if len(t) == 0 || (t[0] != '-' && (t[0] < '0' || t[0] > '9')) {
		return 0, bad
	}
	f, err := strconv.ParseFloat(string(t), 64)
	if err != nil || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, bad
	}
	return int(f), nil
}

// stringField decodes an optional JSON string.
func stringField(m map[string]json.RawMessage, key, def string) (string, error) {
	v, ok := m[key]
	if !ok || string(bytes.TrimSpace(v)) == "null" {
		return def, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf("%s must be a string, got %s", key, bytes.TrimSpace(v))
	}
	return s, nil
}
