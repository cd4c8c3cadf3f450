package structured

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/indexify-go/indexify/internal/state"
)

// Rules shared by both backends: the fixed columns, how metadata keys map to
// columns and values to column types, physical names, results.

// Fixed columns of every graph table. "metadata" holds the whole metadata
// object as JSON, exactly as upserted: the typed columns are a convenience
// for queries, and a value a column cannot hold is still there.
const (
	colContentID = "content_id"
	colPolicy    = "policy_name"
	colExtractor = "extractor"
	colMetadata  = "metadata"
)

var fixedColumns = []struct{ name, typ, comment string }{
	{colContentID, "text", "id of the content the metadata describes"},
	{colPolicy, "text", "extraction policy that produced the row"},
	{colExtractor, "text", "extractor that produced the row"},
	{colMetadata, "json", "the whole metadata object, as produced"},
}

func isFixedColumn(name string) bool {
	for _, c := range fixedColumns {
		if c.name == name {
			return true
		}
	}
	return false
}

// MaxIdentBytes bounds column names (PostgreSQL's limit is 63 bytes).
const MaxIdentBytes = 63

// Config tunes a Store.
type Config struct {
	// QueryTimeout cuts off a user query (default 5 s).
	QueryTimeout time.Duration
	// MaxRows is the largest result a query may return (default 10,000); a
	// larger result is refused with a message asking for a LIMIT.
	MaxRows int
	// MaxResultBytes bounds the (approximate) size of a result (default
	// 32 MiB): strings count their length, other values 8 bytes.
	MaxResultBytes int
}

const (
	DefaultQueryTimeout = 5 * time.Second
	DefaultMaxRows      = 10000
	DefaultMaxResult    = 32 << 20
)

func (c Config) withDefaults() Config {
	if c.QueryTimeout <= 0 {
		c.QueryTimeout = DefaultQueryTimeout
	}
	if c.MaxRows <= 0 {
		c.MaxRows = DefaultMaxRows
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = DefaultMaxResult
	}
	return c
}

// columnName maps a metadata key to its column: lower case, characters
// other than [a-z0-9_] become '_', a leading digit gets a '_' prefix, at
// most MaxIdentBytes bytes. Users can then write the column unquoted in
// either engine (those named like a refused keyword, "delete", quoted). It
// returns "" for a key that maps to a fixed column, to a system name the
// query check refuses even quoted ("pg_x"), or to nothing: such a key lives
// only in the metadata column.
func columnName(key string) string {
	var b strings.Builder
	for i := 0; i < len(key) && b.Len() < MaxIdentBytes; i++ {
		c := key[i]
		switch {
		case c >= 'A' && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		case (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_':
			if b.Len() == 0 && c >= '0' && c <= '9' {
				b.WriteByte('_')
			}
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	n := b.String()
	if strings.Trim(n, "_") == "" || isFixedColumn(n) || deniedName(n) {
		return ""
	}
	return n
}

// inferType is the column type a value asks for ("" for null).
func inferType(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return "text"
	case bool:
		return "boolean"
	case int, int8, int16, int32, int64, uint8, uint16, uint32:
		return "integer"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		return "real"
	case float32, float64, uint, uint64:
		return "real"
	default:
		return "json"
	}
}

// storeValue converts v for a column of type typ. ok is false when the
// column cannot hold it: the column is then NULL for this row and the value
// is only in the metadata column.
func storeValue(typ string, v any) (out any, ok bool) {
	if v == nil {
		return nil, true
	}
	switch typ {
	case "text":
		if s, isStr := v.(string); isStr {
			return s, true
		}
		b, err := json.Marshal(v)
		return string(b), err == nil
	case "json":
		b, err := json.Marshal(v)
		return string(b), err == nil
	case "boolean":
		b, isBool := v.(bool)
		return b, isBool
	case "integer", "real":
		f, isNum := toFloat(v)
		if !isNum {
			return nil, false
		}
		if typ == "real" {
			return f, true
		}
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			if n, isInt := v.(json.Number); isInt {
				if i, err := n.Int64(); err == nil {
					return i, true
				}
			}
			if i, isInt := v.(int64); isInt {
				return i, true
			}
			return nil, false
		}
		return int64(f), true
	}
	return nil, false
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float32:
		return float64(x), true
	case float64:
		return x, !math.IsNaN(x) && !math.IsInf(x, 0)
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// keyColumns lists, for a row's metadata, the column each key maps to and
// the type it asks for. Keys are taken in sorted order; when two keys map
// to the same column the first wins (the other stays in metadata only).
func keyColumns(md map[string]any) []keyCol {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seen := map[string]bool{}
	var out []keyCol
	for _, k := range keys {
		c := columnName(k)
		if c == "" || seen[c] {
			continue
		}
		seen[c] = true
		out = append(out, keyCol{key: k, col: c, typ: inferType(md[k])})
	}
	return out
}

type keyCol struct{ key, col, typ string }

// colInfo is a column of a graph table as the catalog records it.
type colInfo struct {
	Name, Type, Key string // Key: the metadata key that created it ("" for fixed)
}

func (c colInfo) comment() string {
	for _, f := range fixedColumns {
		if f.name == c.Name {
			return f.comment
		}
	}
	return fmt.Sprintf("metadata key %q", c.Key)
}

// schemaOf renders a graph's table for users (types as the API names them).
func schemaOf(ns, graph string, cols []colInfo) Schema {
	s := Schema{Namespace: ns, Graph: graph, Columns: map[string]Column{}}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (", quoteIdent(graph))
	for i, c := range cols {
		s.Columns[c.Name] = Column{Type: c.Type, Comment: c.comment()}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.Name + " " + c.Type)
		if c.Name == colContentID || c.Name == colPolicy {
			b.WriteString(" NOT NULL")
		}
	}
	b.WriteString(", PRIMARY KEY (content_id, policy_name))")
	s.DDL = b.String()
	return s
}

func fixedColInfos() []colInfo {
	out := make([]colInfo, len(fixedColumns))
	for i, f := range fixedColumns {
		out[i] = colInfo{Name: f.name, Type: f.typ}
	}
	return out
}

// physName is the physical table (or schema) name for a user name: a prefix
// and a hash, so case, length and odd characters never matter to the engine.
func physName(prefix, name string) string {
	h := sha256.Sum256([]byte(name))
	return prefix + hex.EncodeToString(h[:10])
}

func validNames(ns string, graphs ...string) error {
	if err := state.ValidName(ns); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	for _, g := range graphs {
		if err := state.ValidName(g); err != nil {
			return fmt.Errorf("graph: %w", err)
		}
	}
	return nil
}

func validRows(rows []Row) error {
	for i, r := range rows {
		if err := state.ValidContentID(r.ContentID); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
		if err := state.ValidName(r.Policy); err != nil {
			return fmt.Errorf("row %d: policy: %w", i, err)
		}
		if r.Extractor != "" {
			if err := state.ValidExtractorName(r.Extractor); err != nil {
				return fmt.Errorf("row %d: %w", i, err)
			}
		}
	}
	return nil
}

// metadataJSON encodes a row's metadata object ({} for none).
func metadataJSON(md map[string]any) (string, error) {
	if md == nil {
		return "{}", nil
	}
	b, err := json.Marshal(md)
	if err != nil {
		return "", fmt.Errorf("metadata is not JSON-encodable: %w", err)
	}
	// PostgreSQL cannot store NUL in text or jsonb; refuse it in both
	// stores alike.
	if hasNUL(md) {
		return "", errors.New("metadata contains a NUL character")
	}
	return string(b), nil
}

func hasNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.IndexByte(x, 0) >= 0
	case map[string]any:
		for k, e := range x {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasNUL(e) {
				return true
			}
		}
	case nil, bool, float64, float32, int, int64, int32, json.Number:
	default:
		// other types (structs, typed slices) are rare: look at the encoding
		b, err := json.Marshal(v)
		return err == nil && strings.Contains(string(b), `\u0000`)
	}
	return false
}

func decodeMetadata(s string) (map[string]any, error) {
	var md map[string]any
	if err := json.Unmarshal([]byte(s), &md); err != nil {
		return nil, fmt.Errorf("stored metadata is not a JSON object: %w", err)
	}
	return md, nil
}

// decodeJSONText turns stored JSON text into a value; text that is not
// JSON is returned as is.
func decodeJSONText(s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	return v
}

// jsonFriendly converts a driver value into one encoding/json renders
// sensibly.
func jsonFriendly(v any) any {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
	}
	return v
}

// valueSize approximates the bytes a result value takes.
func valueSize(v any) int {
	switch x := v.(type) {
	case string:
		return len(x) + 8
	case map[string]any:
		n := 8
		for k, e := range x {
			n += len(k) + valueSize(e)
		}
		return n
	case []any:
		n := 8
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	}
	return 8
}

func errTooLarge(max int) error {
	return queryErr("the result is larger than %d bytes; select fewer columns or rows", max)
}

// errTooManyRows is the refusal of a result larger than MaxRows.
func errTooManyRows(max int) error {
	return queryErr("the result has more than %d rows; add a LIMIT", max)
}

// timeoutErr maps a query error caused by our own deadline to ErrQuery.
func queryRunErr(err error, timedOut bool, timeout time.Duration) error {
	if timedOut {
		return queryErr("timed out after %s", timeout)
	}
	if errors.Is(err, ErrQuery) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrQuery, err)
}
