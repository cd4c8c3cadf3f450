package state

// Input validation shared by the FSM operations. Everything here is a pure
// function of its arguments (plus a cache of compiled schemas, whose results
// depend only on the schema text), so every replica reaches the same verdict.

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/indexify-go/indexify/internal/labels"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

const (
	codeOK       = pb.ErrorCode_ERROR_CODE_OK
	codeInvalid  = pb.ErrorCode_ERROR_CODE_INVALID
	codeNotFound = pb.ErrorCode_ERROR_CODE_NOT_FOUND
	codeExists   = pb.ErrorCode_ERROR_CODE_ALREADY_EXISTS
	codeConflict = pb.ErrorCode_ERROR_CODE_CONFLICT
)

// ValidName checks namespace, graph, policy and extractor names:
// [A-Za-z0-9][A-Za-z0-9_.-]{0,127}.
func ValidName(s string) error {
	if s == "" {
		return fmt.Errorf("name is empty")
	}
	if len(s) > 128 {
		return fmt.Errorf("name %.20q... is longer than 128 characters", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if alnum || (i > 0 && (c == '_' || c == '.' || c == '-')) {
			continue
		}
		return fmt.Errorf("name %q: only letters, digits, '_', '.', '-' allowed, starting with a letter or digit", s)
	}
	return nil
}

// ValidContentID checks content ids: 1..128 characters, no '/', no "..",
// no control characters or whitespace (ids appear in URLs and blob paths).
func ValidContentID(s string) error {
	if s == "" {
		return fmt.Errorf("content id is empty")
	}
	if len(s) > 128 {
		return fmt.Errorf("content id %.20q... is longer than 128 characters", s)
	}
	if strings.Contains(s, "/") || strings.Contains(s, "..") {
		return fmt.Errorf("content id %q must not contain '/' or '..'", s)
	}
	for _, r := range s {
		if r == 0xFFFD || unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("content id %q contains whitespace, control or invalid characters", s)
		}
	}
	return nil
}

// ValidExtractorName checks extractor names, which (unlike other names)
// may contain '/' because the original ecosystem names them
// "publisher/extractor" (e.g. "tensorlake/minilm-l6").
func ValidExtractorName(s string) error {
	if s == "" {
		return fmt.Errorf("extractor name is empty")
	}
	if len(s) > 256 {
		return fmt.Errorf("extractor name %.20q... is longer than 256 characters", s)
	}
	for _, r := range s {
		if r == 0xFFFD || unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("extractor name %q contains whitespace, control or invalid characters", s)
		}
	}
	return nil
}

// validLabels checks labels by the rules of the command's version: since
// RulesBounded the one label rule of internal/labels (also the API's);
// before, non-empty keys and JSON values only (the model stores label
// values as JSON text).
func validLabels(m map[string]string, rules uint32) error {
	if rules >= RulesBounded {
		return labels.Validate(m)
	}
	for k, v := range m {
		if k == "" {
			return fmt.Errorf("label with empty key")
		}
		if !json.Valid([]byte(v)) {
			return fmt.Errorf("label %q: value %q is not JSON text (quote strings: \"\\\"text\\\"\")", k, v)
		}
	}
	return nil
}

// parseFilter checks label-filter expressions by the rules of the
// command's version: labels.Parse since RulesBounded, the syntax only before.
func parseFilter(exprs []string, rules uint32) error {
	var err error
	if rules >= RulesBounded {
		_, err = labels.Parse(exprs)
	} else {
		_, err = labels.ParseSyntax(exprs)
	}
	return err
}

// schemaCache compiles extractor input-parameter schemas once per distinct
// schema text. The FSM applies commands on one goroutine, but tests and
// future callers may validate concurrently, hence the mutex.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]schemaEntry
}

type schemaEntry struct {
	s   *jsonschema.Schema
	err error
}

// noLoader refuses to fetch any referenced schema: validation must not
// depend on the network or the file system, or replicas could disagree.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema references %q: external references are not allowed", url)
}

func (c *schemaCache) get(text string) (*jsonschema.Schema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[text]; ok {
		return e.s, e.err
	}
	s, err := compileSchema(text)
	if c.m == nil {
		c.m = map[string]schemaEntry{}
	}
	if len(c.m) > 4096 { // bound memory if executors keep changing schemas
		c.m = map[string]schemaEntry{}
	}
	c.m[text] = schemaEntry{s, err}
	return s, err
}

func compileSchema(text string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %v", err)
	}
	comp := jsonschema.NewCompiler()
	comp.UseLoader(noLoader{})
	const loc = "mem:///input_params.json"
	if err := comp.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return comp.Compile(loc)
}

// LessThanKeyword is a schema keyword of this project for the cross-field
// rule JSON schema cannot state: {"x-indexify-less-than": {"a": "b"}} means
// params.a < params.b, each side taken from the params or else from its
// property's "default"; a side that is absent or not a number is left to
// the rest of the schema. The chunker uses it for overlap < chunk_size.
const LessThanKeyword = "x-indexify-less-than"

// validateParams checks params (JSON text, "" = {}) against an extractor's
// schema text ("" = anything), and since RulesBounded also the schema's
// LessThanKeyword. The returned error text is user-facing.
func (c *schemaCache) validateParams(schemaText, params string, rules uint32) error {
	if strings.TrimSpace(params) == "" {
		params = "{}"
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(params))
	if err != nil {
		return fmt.Errorf("input_params is not valid JSON: %v", err)
	}
	if _, ok := inst.(map[string]any); !ok {
		return fmt.Errorf("input_params must be a JSON object")
	}
	if strings.TrimSpace(schemaText) == "" {
		return nil
	}
	s, err := c.get(schemaText)
	if err != nil {
		return fmt.Errorf("extractor input schema is invalid: %v", err)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("input_params do not match the extractor's schema: %v", err)
	}
	if rules >= RulesBounded && strings.Contains(schemaText, LessThanKeyword) {
		return checkLessThan(schemaText, params)
	}
	return nil
}

// checkLessThan applies LessThanKeyword; both texts are known to be JSON.
func checkLessThan(schemaText, params string) error {
	var schema struct {
		Less       map[string]json.RawMessage `json:"x-indexify-less-than"`
		Properties map[string]struct {
			Default json.RawMessage `json:"default"`
		} `json:"properties"`
	}
	if err := json.Unmarshal([]byte(schemaText), &schema); err != nil {
		return fmt.Errorf("extractor input schema is invalid: %v", err)
	}
	var inst map[string]json.RawMessage
	if err := json.Unmarshal([]byte(params), &inst); err != nil {
		return fmt.Errorf("input_params is not valid JSON: %v", err)
	}
	// Compared as float64 (a huge exponent must not cost big-number work;
	// schemas bound these values far below 2^53 anyway).
	value := func(name string) (float64, string, bool) {
		raw, ok := inst[name]
		if !ok {
			raw = schema.Properties[name].Default
		}
		text := strings.TrimSpace(string(raw))
		if text == "" || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9')) {
			return 0, "", false
		}
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !math.IsInf(f, 0) {
			return 0, "", false
		}
		return f, text, true
	}
	keys := make([]string, 0, len(schema.Less))
	for k := range schema.Less {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, a := range keys {
		var b string
		if err := json.Unmarshal(schema.Less[a], &b); err != nil {
			return fmt.Errorf("extractor input schema is invalid: %s must map property names to property names", LessThanKeyword)
		}
		va, ta, okA := value(a)
		vb, tb, okB := value(b)
		if okA && okB && va >= vb {
			return fmt.Errorf("input_params: %s (%s) must be less than %s (%s)", a, ta, b, tb)
		}
	}
	return nil
}
