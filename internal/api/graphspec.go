package api

// Parsing of extraction graph specs as the original clients send them: JSON
// or YAML text, policies with `filter` (list of expressions or a map) or
// `labels_eq` ("k:v,k2:v2" or a map), and free-form `input_params`.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/indexify-go/indexify/internal/labels"
	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// parseGraphSpec decodes a graph spec body. The Content-Type decides the
// format; without a decisive one, JSON is tried first and then YAML (JSON is
// valid YAML, but JSON's error messages are better for JSON bodies).
func parseGraphSpec(body []byte, contentType string) (*wire.GraphSpec, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	var req wire.GraphSpec
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		if err := unmarshalJSON(body, &req); err != nil {
			return nil, err
		}
	case strings.Contains(mt, "yaml"):
		if err := yamlToJSON(body, &req); err != nil {
			return nil, err
		}
	default:
		if jerr := unmarshalJSON(body, &req); jerr != nil {
			req = wire.GraphSpec{}
			if yerr := yamlToJSON(body, &req); yerr != nil {
				return nil, badRequest(codeInvalidArgument, "graph spec is neither valid JSON (%v) nor valid YAML (%v)", jerr, yerr)
			}
		}
	}
	return &req, nil
}

// yamlToJSON decodes YAML into a generic tree and re-encodes it as JSON so
// one set of struct tags (and one set of checks) serves both formats.
func yamlToJSON(body []byte, v any) error {
	var tree any
	dec := yaml.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&tree); err != nil && err != io.EOF {
		return badRequest(codeInvalidYAML, "invalid YAML body: %v", err)
	}
	// A second document would be ignored silently; refuse it instead.
	var more any
	if err := dec.Decode(&more); err != io.EOF {
		return badRequest(codeInvalidYAML, "graph spec must be one YAML document; found more than one (---)")
	}
	if tree == nil {
		return badRequest(codeInvalidYAML, "request body is empty, expected a YAML mapping")
	}
	norm, err := jsonCompatible(tree)
	if err != nil {
		return badRequest(codeInvalidYAML, "invalid YAML body: %v", err)
	}
	if _, ok := norm.(map[string]any); !ok {
		return badRequest(codeInvalidYAML, "graph spec must be a YAML mapping")
	}
	b, err := json.Marshal(norm)
	if err != nil {
		return badRequest(codeInvalidYAML, "invalid YAML body: %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return badRequest(codeInvalidYAML, "invalid graph spec: %v", err)
	}
	return nil
}

// jsonCompatible converts yaml.v3's generic values (maps with non-string
// keys) into values encoding/json can marshal.
func jsonCompatible(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			out[fmt.Sprint(k)] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return v, nil
}

// graphToProto validates a parsed spec and builds the model's graph.
func graphToProto(req *wire.GraphSpec, ns string) (*pb.ExtractionGraph, error) {
	if req.Namespace != "" && req.Namespace != ns {
		return nil, badRequest(codeInvalidArgument, "graph namespace %q does not match the namespace %q in the path", req.Namespace, ns)
	}
	if err := validateName("extraction graph name", req.Name); err != nil {
		return nil, err
	}
	if len(req.ExtractionPolicies) == 0 {
		return nil, badRequest(codeInvalidArgument, "extraction graph %q has no extraction_policies", req.Name)
	}
	if err := checkGraphLimits(req); err != nil {
		return nil, err
	}
	g := &pb.ExtractionGraph{Name: req.Name, Namespace: ns, Description: req.Description}
	seen := make(map[string]bool)
	for i, p := range req.ExtractionPolicies {
		if err := validateName(fmt.Sprintf("extraction_policies[%d].name", i), p.Name); err != nil {
			return nil, err
		}
		if state.ReservedPolicyName(p.Name) {
			return nil, badRequest(codeInvalidArgument, "extraction policy name %q is reserved: content.source %q marks uploaded content, so a policy of that name would run on its own output", p.Name, state.SourceIngestion)
		}
		if seen[p.Name] {
			return nil, badRequest(codeInvalidArgument, "extraction policy name %q is used twice", p.Name)
		}
		seen[p.Name] = true
		if err := validateText(fmt.Sprintf("extraction policy %q: extractor", p.Name), p.Extractor); err != nil {
			return nil, err
		}
		if p.ContentSource != "" {
			if err := validateName(fmt.Sprintf("extraction policy %q: content_source", p.Name), p.ContentSource); err != nil {
				return nil, err
			}
		}
		filter, err := policyFilter(p)
		if err != nil {
			return nil, err
		}
		params, err := inputParams(p)
		if err != nil {
			return nil, err
		}
		g.Policies = append(g.Policies, &pb.ExtractionPolicy{
			Name:            p.Name,
			GraphName:       req.Name,
			Namespace:       ns,
			Extractor:       p.Extractor,
			InputParamsJson: params,
			Filter:          filter,
			ContentSource:   p.ContentSource,
		})
	}
	return g, nil
}

// inputParams returns the policy's params as compact JSON object text.
func inputParams(p wire.PolicySpec) (string, error) {
	raw := bytes.TrimSpace(p.InputParams)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", nil
	}
	if raw[0] != '{' {
		return "", badRequest(codeInvalidArgument, "extraction policy %q: input_params must be a JSON object", p.Name)
	}
	var sb strings.Builder
	if err := compactJSON(&sb, raw); err != nil {
		return "", badRequest(codeInvalidJSON, "extraction policy %q: input_params: %v", p.Name, err)
	}
	return sb.String(), nil
}

// policyFilter merges `filter` and `labels_eq` into label expressions and
// checks that they parse.
func policyFilter(p wire.PolicySpec) ([]string, error) {
	var exprs []string
	f, err := filterExprs(p.Filter, "=", ',')
	if err != nil {
		return nil, badRequest(codeInvalidFilter, "extraction policy %q: filter: %v", p.Name, err)
	}
	exprs = append(exprs, f...)
	eq, err := filterExprs(p.LabelsEq, ":", ',')
	if err != nil {
		return nil, badRequest(codeInvalidFilter, "extraction policy %q: labels_eq: %v", p.Name, err)
	}
	exprs = append(exprs, eq...)
	if err := checkFilterCount(p.Name, exprs); err != nil {
		return nil, err
	}
	if _, err := labels.Parse(exprs); err != nil {
		return nil, badRequest(codeInvalidFilter, "extraction policy %q: invalid label filter: %v", p.Name, err)
	}
	return exprs, nil
}

// filterExprs accepts a list of expressions, a map {key: value} (meaning
// key=value for each entry), or a string of sep-separated items in which a
// `key<kv>value` pair means key=value (labels_eq's "k:v,k2:v2" form) and
// anything else is taken as an expression.
func filterExprs(raw json.RawMessage, kv string, sep rune) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	switch raw[0] {
	case '[':
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("must be a list of strings")
		}
		return list, nil
	case '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("must be an object")
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys) // stable order makes specs comparable
		out := make([]string, 0, len(m))
		for _, k := range keys {
			v, err := scalarText(m[k])
			if err != nil {
				return nil, fmt.Errorf("value of %q: %v", k, err)
			}
			out = append(out, k+"="+v)
		}
		return out, nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		var out []string
		for item := range strings.SplitSeq(s, string(sep)) {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			if kv != "=" && !strings.ContainsAny(item, "=<>!") {
				k, v, ok := strings.Cut(item, kv)
				if !ok || strings.TrimSpace(k) == "" {
					return nil, fmt.Errorf("%q is not key%svalue", item, kv)
				}
				item = strings.TrimSpace(k) + "=" + strings.TrimSpace(v)
			}
			out = append(out, item)
		}
		return out, nil
	}
	return nil, fmt.Errorf("must be a list of expressions, an object or a string")
}

// scalarText renders a JSON scalar the way it is written in an expression.
func scalarText(raw json.RawMessage) (string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	switch t := v.(type) {
	case string:
		return t, nil
	case float64:
		return strings.TrimSpace(string(raw)), nil
	case bool:
		return strconv.FormatBool(t), nil
	}
	return "", fmt.Errorf("must be a string, number or boolean")
}
