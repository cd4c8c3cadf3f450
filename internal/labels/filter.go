// Package labels parses and evaluates label-filter expressions such as
// `key=value`, `key!=value`, `size>3`, `size<=10`.
//
// Label values are stored as JSON text (the original API accepted arbitrary
// JSON label values). An expression compares numerically when both sides are
// numbers, otherwise as text, so `lang=en` matches the JSON label "en" and
// `size>3` matches the JSON label 10 but not "10a".
package labels

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Op is a comparison operator.
type Op string

// Supported operators.
const (
	OpEq Op = "="
	OpNe Op = "!="
	OpLt Op = "<"
	OpLe Op = "<="
	OpGt Op = ">"
	OpGe Op = ">="
)

// Expr is one parsed expression.
type Expr struct {
	Key   string
	Op    Op
	Value string
}

// String renders the expression in its input syntax.
func (e Expr) String() string {
	// "k>" with value "=1" must not print as "k>=1", which parses as >=.
	if (e.Op == OpLt || e.Op == OpGt) && strings.HasPrefix(e.Value, "=") {
		return e.Key + string(e.Op) + " " + e.Value
	}
	return e.Key + string(e.Op) + e.Value
}

// Filter is a conjunction of parsed expressions.
type Filter struct {
	Exprs []Expr
}

// Empty reports whether the filter has no expressions (matches everything).
func (f Filter) Empty() bool { return len(f.Exprs) == 0 }

// Parse parses expressions; all must hold for Match to be true. A value
// written as a number must be a finite float64 (see Number): `n>1e999`
// would otherwise silently compare as text.
func Parse(exprs []string) (Filter, error) {
	f, err := ParseSyntax(exprs)
	if err != nil {
		return Filter{}, err
	}
	for _, e := range f.Exprs {
		if err := checkNumber(e.Value); err != nil {
			return Filter{}, fmt.Errorf("label filter %q: %v", e.String(), err)
		}
	}
	return f, nil
}

// ParseSyntax is Parse without the numeric range rule: the syntax only.
// It is what the coordinator accepted before the rule existed, kept for
// replaying old log entries and evaluating filters stored then; new input
// goes through Parse.
func ParseSyntax(exprs []string) (Filter, error) {
	var f Filter
	for _, s := range exprs {
		e, err := ParseExpr(s)
		if err != nil {
			return Filter{}, err
		}
		f.Exprs = append(f.Exprs, e)
	}
	return f, nil
}

// ParseExpr parses one expression. The operator is the first occurrence of
// any operator character; two-character operators win over their one
// character prefixes (longest match), so `a>=3` is (a, >=, 3).
func ParseExpr(s string) (Expr, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return Expr{}, fmt.Errorf("empty label filter expression")
	}
	i := strings.IndexAny(t, "=!<>")
	if i < 0 {
		return Expr{}, fmt.Errorf("label filter %q has no operator (use =, !=, <, <=, >, >=)", s)
	}
	var op Op
	rest := t[i:]
	switch {
	case strings.HasPrefix(rest, "!="):
		op = OpNe
	case strings.HasPrefix(rest, "<="):
		op = OpLe
	case strings.HasPrefix(rest, ">="):
		op = OpGe
	case rest[0] == '=':
		op = OpEq
	case rest[0] == '<':
		op = OpLt
	case rest[0] == '>':
		op = OpGt
	default: // a lone '!'
		return Expr{}, fmt.Errorf("label filter %q: '!' must be followed by '='", s)
	}
	key := strings.TrimSpace(t[:i])
	if key == "" {
		return Expr{}, fmt.Errorf("label filter %q has an empty key", s)
	}
	val := strings.TrimSpace(t[i+len(op):])
	return Expr{Key: key, Op: op, Value: val}, nil
}

// Match evaluates the filter against labels whose values are JSON text.
func (f Filter) Match(labels map[string]string) bool {
	for _, e := range f.Exprs {
		if !e.Match(labels) {
			return false
		}
	}
	return true
}

// Match evaluates one expression.
func (e Expr) Match(labels map[string]string) bool {
	raw, ok := labels[e.Key]
	if !ok {
		// A missing label differs from every value but is not ordered.
		return e.Op == OpNe
	}
	lnum, lIsNum, ltext := decode(raw)
	if lIsNum {
		if enum, ok := Number(e.Value); ok {
			return cmpResult(e.Op, cmpFloat(lnum, enum))
		}
	}
	return cmpResult(e.Op, strings.Compare(ltext, e.Value))
}

// decode turns JSON label text into a number (when it is one) and its text
// form: JSON strings lose their quotes; other JSON (bools, null, objects) is
// compared as its compact text. Invalid JSON is compared as raw text so
// hand-written labels still work.
func decode(raw string) (float64, bool, string) {
	var v any
	d := json.NewDecoder(strings.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil || d.More() {
		return 0, false, raw
	}
	switch x := v.(type) {
	case json.Number:
		// Labels stored before values had to be finite may hold 1e400:
		// it compares as +Inf, which orders it right against any filter
		// number (filter numbers themselves are finite, see Parse).
		f, err := strconv.ParseFloat(x.String(), 64)
		if math.IsNaN(f) || (err != nil && !math.IsInf(f, 0)) {
			return 0, false, x.String()
		}
		return f, true, x.String()
	case string:
		return 0, false, x
	case bool:
		return 0, false, strconv.FormatBool(x)
	case nil:
		return 0, false, "null"
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return 0, false, raw
		}
		return 0, false, string(b)
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpResult(op Op, c int) bool {
	switch op {
	case OpEq:
		return c == 0
	case OpNe:
		return c != 0
	case OpLt:
		return c < 0
	case OpLe:
		return c <= 0
	case OpGt:
		return c > 0
	case OpGe:
		return c >= 0
	}
	return false
}
