package labels

// The one rule for label names and values, used by the API server when it
// parses a request and by the coordinator's FSM (whose verdict counts), so
// the two cannot disagree about what a label is.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Size bounds of labels: they keep Raft entries, scheduler passes and
// filters cheap; real uses stay far below them.
const (
	MaxLabels     = 64      // labels per content
	MaxKeyBytes   = 256     // bytes of one label name
	MaxValueBytes = 4 << 10 // bytes of one label value (JSON text)
)

// ValidKey checks a label name: non-empty, at most MaxKeyBytes, no control
// characters and none of the filter operator characters "=!<>", which
// would make the label unaddressable in a filter expression.
func ValidKey(k string) error {
	if k == "" {
		return errors.New("label name is empty")
	}
	if len(k) > MaxKeyBytes {
		return fmt.Errorf("label name %.40q... is %d bytes; the limit is %d", k, len(k), MaxKeyBytes)
	}
	if strings.ContainsFunc(k, func(r rune) bool { return r < 0x20 || r == 0x7f || strings.ContainsRune("=!<>", r) }) {
		return fmt.Errorf("label name %q contains control characters or filter operators (=!<>)", k)
	}
	return nil
}

// ValidValue checks a label value, which is JSON text: one valid JSON value
// in which every number (also inside arrays and objects) is a finite
// float64, at most MaxValueBytes long. JSON allows 1e400; filters could
// only compare it as text, so it is refused rather than stored.
func ValidValue(v string) error {
	if len(v) > MaxValueBytes {
		return fmt.Errorf("value is %d bytes; the limit is %d", len(v), MaxValueBytes)
	}
	if plainString(v) {
		return nil // valid JSON, and no numbers in it
	}
	if !json.Valid([]byte(v)) {
		return fmt.Errorf("value %q is not JSON text (quote strings: \"\\\"text\\\"\")", v)
	}
	return eachNumber(v, checkNumber)
}

// plainString reports whether v is a JSON string with nothing to unescape:
// a quote, bytes that are neither quotes, backslashes nor control
// characters, and a closing quote. Such text is valid JSON (json.Valid
// checks no UTF-8 either) and holds no number. It is the common label value,
// and this one loop over it takes about a third of the time of json.Valid's
// state machine.
func plainString(v string) bool {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	for i := 1; i < len(v)-1; i++ {
		if c := v[i]; c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// eachNumber calls fn with every number token of v, which must be valid
// JSON text (json.Valid), and stops at fn's first error. Outside strings,
// only numbers contain '-' or digits (true, false and null have neither),
// and a number ends at the first byte that cannot continue it. It reads v
// in place: every replica checks every label value of every write, and a
// json.Decoder walk (a copy of each string token) was a sixth of a
// follower's CPU under small writes.
func eachNumber(v string, fn func(string) error) error {
	for i := 0; i < len(v); {
		switch c := v[i]; {
		case c == '"':
			for i++; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' {
					i++ // the escaped byte (of \uXXXX, the 'u')
				}
			}
			i++ // the closing quote
		case c == '-' || c >= '0' && c <= '9':
			j := i + 1
			for j < len(v) && strings.IndexByte("0123456789.eE+-", v[j]) >= 0 {
				j++
			}
			if err := fn(v[i:j]); err != nil {
				return err
			}
			i = j
		default:
			i++
		}
	}
	return nil
}

// Validate checks a whole label map: at most MaxLabels labels, names and
// values by ValidKey and ValidValue; the error names the first bad label in
// key order.
func Validate(m map[string]string) error {
	if len(m) > MaxLabels {
		return fmt.Errorf("%d labels given; at most %d labels per content are allowed", len(m), MaxLabels)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := ValidKey(k); err != nil {
			return err
		}
		if err := ValidValue(m[k]); err != nil {
			return fmt.Errorf("label %q: %v", k, err)
		}
	}
	return nil
}

// Number parses s as a number the way labels and filters treat numbers:
// JSON number syntax (no "inf", "nan", hex or '_' as strconv would take)
// with a finite float64 value.
func Number(s string) (float64, bool) {
	if !isJSONNumber(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// checkNumber refuses text that is a JSON number but not a finite float64;
// anything else (a number in range, or not a number at all) passes.
func checkNumber(s string) error {
	if !isJSONNumber(s) {
		return nil
	}
	if _, ok := Number(s); !ok {
		return fmt.Errorf("number %s is out of range (must be a finite 64-bit float)", s)
	}
	return nil
}

// isJSONNumber reports whether s is exactly one JSON number token:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s string) bool {
	b := s
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}
