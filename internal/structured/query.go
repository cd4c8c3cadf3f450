package structured

import (
	"fmt"
	"sort"
	"strings"
)

// The lexical layer of query safety, shared by both backends so that they
// accept and refuse exactly the same statements. It tokenizes the query
// (aware of quotes and comments), refuses anything that is not one read-only
// SELECT, names every table the query reads and rewrites those names to the
// physical tables of the namespace. The engines then enforce the same rules
// again on their own (see DESIGN.md); this layer is the one that makes the
// behaviour identical and the error messages clear.

type tokKind int

const (
	tIdent  tokKind = iota // unquoted identifier or keyword
	tQIdent                // "quoted identifier"
	tString                // 'string literal'
	tNumber
	tPunct
)

type token struct {
	kind        tokKind
	text        string // as written (for tQIdent: the unquoted name)
	start, end  int    // byte span in the source
	spaceBefore bool   // whitespace or a comment precedes it
}

func (t token) lower() string { return strings.ToLower(t.text) }

func (t token) is(kw string) bool { return t.kind == tIdent && strings.EqualFold(t.text, kw) }

func queryErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrQuery, fmt.Sprintf(format, args...))
}

// MaxQueryBytes bounds the length of a user query.
const MaxQueryBytes = 64 << 10

// tokenize splits a query into tokens, dropping comments. It refuses
// constructs whose lexing differs between SQLite and PostgreSQL (so that the
// engine can never see a token boundary this checker did not): backslashes
// in string literals (PostgreSQL E” strings), dollar quoting and
// parameters, backtick and bracket identifiers, nested block comments,
// non-ASCII text outside quotes, NUL bytes.
func tokenize(src string) ([]token, error) {
	if len(src) > MaxQueryBytes {
		return nil, queryErr("query is longer than %d bytes", MaxQueryBytes)
	}
	var toks []token
	space := false
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == 0:
			return nil, queryErr("NUL byte in query")
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			space = true
			i++
			continue
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			for i < len(src) && src[i] != '\n' {
				if src[i] == 0 {
					return nil, queryErr("NUL byte in query")
				}
				i++
			}
			space = true
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			j := i + 2
			for {
				if j+1 >= len(src) {
					return nil, queryErr("unterminated /* comment")
				}
				if src[j] == 0 {
					return nil, queryErr("NUL byte in query")
				}
				if src[j] == '/' && src[j+1] == '*' {
					return nil, queryErr("nested /* comments are not allowed")
				}
				if src[j] == '*' && src[j+1] == '/' {
					break
				}
				j++
			}
			i = j + 2
			space = true
			continue
		case c == '\'' || c == '"':
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(src) {
					if c == '\'' {
						return nil, queryErr("unterminated string literal")
					}
					return nil, queryErr("unterminated quoted identifier")
				}
				if src[j] == 0 {
					return nil, queryErr("NUL byte in query")
				}
				if src[j] == '\\' && c == '\'' {
					return nil, queryErr("backslashes in string literals are not allowed")
				}
				if src[j] == c {
					if j+1 < len(src) && src[j+1] == c {
						b.WriteByte(c)
						j += 2
						continue
					}
					break
				}
				b.WriteByte(src[j])
				j++
			}
			k := tString
			if c == '"' {
				k = tQIdent
				if b.Len() == 0 {
					return nil, queryErr("empty quoted identifier")
				}
			}
			toks = append(toks, token{kind: k, text: b.String(), start: i, end: j + 1, spaceBefore: space})
			i = j + 1
		case isIdentStart(c):
			j := i + 1
			for j < len(src) && isIdentPart(src[j]) {
				j++
			}
			toks = append(toks, token{kind: tIdent, text: src[i:j], start: i, end: j, spaceBefore: space})
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(src) && isDigit(src[i+1])):
			j := i + 1
			for j < len(src) {
				d := src[j]
				if isIdentPart(d) || d == '.' {
					j++
					continue
				}
				if (d == '+' || d == '-') && (src[j-1] == 'e' || src[j-1] == 'E') && !strings.HasPrefix(strings.ToLower(src[i:j]), "0x") {
					j++
					continue
				}
				break
			}
			toks = append(toks, token{kind: tNumber, text: src[i:j], start: i, end: j, spaceBefore: space})
			i = j
		case c == '$' || c == '?' || c == '@' || c == '`' || c == '[' || c == ']' || c == '\\':
			return nil, queryErr("character %q is not allowed (no parameters, dollar quoting, or backtick/bracket identifiers; quote identifiers with \")", c)
		case c == ':':
			if i+1 < len(src) && src[i+1] == ':' {
				toks = append(toks, token{kind: tPunct, text: "::", start: i, end: i + 2, spaceBefore: space})
				i += 2
			} else {
				return nil, queryErr("named parameters (:name) are not allowed")
			}
		case c >= 0x80:
			return nil, queryErr("non-ASCII text outside quotes (quote identifiers with \")")
		case c < 0x20 || c == 0x7f:
			return nil, queryErr("control character %q in query", c)
		default:
			toks = append(toks, token{kind: tPunct, text: src[i : i+1], start: i, end: i + 1, spaceBefore: space})
			i++
		}
		space = false
	}
	return toks, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
func isIdentPart(c byte) bool { return isIdentStart(c) || isDigit(c) }
func isDigit(c byte) bool     { return c >= '0' && c <= '9' }

// writeKeywords may not appear unquoted anywhere in a query: they start or
// belong to statements that write, change the session, or reach outside
// the namespace. (Those that can only start a statement are already
// refused by the "starts with SELECT or WITH, one statement" rule; these
// are the ones that could hide inside one: WITH ... INSERT, SELECT INTO,
// FOR UPDATE, ON CONFLICT, TABLE x in a UNION.)
var writeKeywords = map[string]bool{
	"insert": true, "update": true, "delete": true, "merge": true, "upsert": true,
	"into": true, "returning": true, "conflict": true, "drop": true, "create": true,
	"alter": true, "attach": true, "detach": true, "pragma": true, "vacuum": true,
	"reindex": true, "grant": true, "revoke": true, "truncate": true, "copy": true,
	"execute": true, "prepare": true, "call": true, "load": true, "table": true,
	"set": true, "reset": true,
}

// deniedNames are functions (and names) that reach the file system, the
// server's configuration, or run SQL given as a string, which would escape
// the lexical check.
var deniedNames = map[string]bool{
	"load_extension": true, "readfile": true, "writefile": true, "edit": true,
	"fts3_tokenizer": true, "set_config": true, "current_setting": true,
	"query_to_xml": true, "query_to_xmlschema": true, "query_to_xml_and_xmlschema": true,
	"cursor_to_xml": true, "cursor_to_xmlschema": true, "table_to_xml": true,
	"table_to_xmlschema": true, "table_to_xml_and_xmlschema": true, "schema_to_xml": true,
	"schema_to_xmlschema": true, "schema_to_xml_and_xmlschema": true, "database_to_xml": true,
	"database_to_xmlschema": true, "database_to_xml_and_xmlschema": true,
	"ts_stat": true, "ts_rewrite": true, "information_schema": true,
}

// deniedPrefixes name system catalogs and administrative functions of
// both engines (sqlite_master, pragma_table_info, pg_class, pg_sleep,
// pg_read_file, lo_import, dblink_exec, ...).
var deniedPrefixes = []string{"sqlite_", "pragma_", "pg_", "lo_", "dblink"}

func deniedName(name string) bool {
	n := strings.ToLower(name)
	if deniedNames[n] {
		return true
	}
	for _, p := range deniedPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// tableFunctions may stand in a FROM clause (JSON helpers of either engine).
var tableFunctions = map[string]bool{
	"json_each": true, "json_tree": true, "jsonb_each": true, "jsonb_each_text": true,
	"json_each_text": true, "json_array_elements": true, "jsonb_array_elements": true,
	"json_array_elements_text": true, "jsonb_array_elements_text": true,
	"generate_series": true, "unnest": true,
}

// notAlias are keywords that may follow a table reference and are not an alias.
var notAlias = map[string]bool{
	"where": true, "join": true, "left": true, "right": true, "inner": true, "outer": true,
	"cross": true, "natural": true, "full": true, "on": true, "using": true, "group": true,
	"order": true, "limit": true, "having": true, "window": true, "union": true,
	"intersect": true, "except": true, "offset": true, "fetch": true, "for": true,
	"indexed": true, "not": true, "as": true,
}

// endsFrom are keywords that end a FROM clause at their nesting depth.
var endsFrom = map[string]bool{
	"where": true, "group": true, "having": true, "order": true, "limit": true,
	"window": true, "union": true, "intersect": true, "except": true, "offset": true,
	"fetch": true, "for": true,
}

// checkedQuery is a query that passed the lexical check.
type checkedQuery struct {
	SQL    string   // rewritten: graph names replaced by physical table names
	Tables []string // graph names read (sorted, unique)
	CTEs   []string // names the query defines with WITH (lower case for unquoted)
}

type frame struct {
	sawSelect, inFrom, expectRef bool
	withMode, expectCTE          bool
}

// checkQuery applies the lexical rules to src. graphs maps each of the
// namespace's graph names to its physical table name.
func checkQuery(src string, graphs map[string]string) (checkedQuery, error) {
	toks, err := tokenize(src)
	if err != nil {
		return checkedQuery{}, err
	}
	if len(toks) == 0 {
		return checkedQuery{}, queryErr("empty query")
	}
	for i, t := range toks {
		if t.kind == tPunct && t.text == ";" {
			if i != len(toks)-1 || strings.TrimSpace(src[t.end:]) != "" {
				return checkedQuery{}, queryErr("only one statement is allowed (nothing, not even a comment, may follow a ';')")
			}
			toks = toks[:i]
			src = src[:t.start]
		}
	}
	if len(toks) == 0 {
		return checkedQuery{}, queryErr("empty query")
	}
	if !toks[0].is("select") && !toks[0].is("with") {
		return checkedQuery{}, queryErr("only a SELECT (or WITH ... SELECT) statement is allowed")
	}
	for _, t := range toks {
		switch t.kind {
		case tIdent:
			if writeKeywords[t.lower()] {
				return checkedQuery{}, queryErr("%s is not allowed: queries are read-only (quote a column of that name with \")", strings.ToUpper(t.text))
			}
			if deniedName(t.text) {
				return checkedQuery{}, queryErr("%q is a system object or function and is not allowed", t.text)
			}
		case tQIdent:
			if deniedName(t.text) {
				return checkedQuery{}, queryErr("%q is a system object and is not allowed", t.text)
			}
		}
	}

	type repl struct {
		start, end int
		with       string
	}
	var repls []repl
	read := map[string]bool{}
	ctes := map[string]bool{}
	stack := []*frame{{}}
	top := func() *frame { return stack[len(stack)-1] }

	// tableRef handles a table reference starting at toks[i]; it returns
	// the index of the last token it consumed.
	tableRef := func(i int) (int, error) {
		t := toks[i]
		name := t.text
		j := i
		if t.kind == tIdent {
			// graph names may contain '-' and '.': join adjacent tokens.
			for j+1 < len(toks) && !toks[j+1].spaceBefore {
				n := toks[j+1]
				if n.kind == tIdent || n.kind == tNumber || (n.kind == tPunct && (n.text == "-" || n.text == ".")) {
					j++
					continue
				}
				break
			}
			name = src[t.start:toks[j].end]
		} else if j+1 < len(toks) && toks[j+1].kind == tPunct && toks[j+1].text == "." {
			return 0, queryErr("qualified table names (%q.…) are not allowed; name tables by graph", name)
		}
		if j+1 < len(toks) && toks[j+1].kind == tPunct && toks[j+1].text == "(" {
			if t.kind == tIdent && i == j && tableFunctions[t.lower()] {
				return j, nil
			}
			return 0, queryErr("function %q is not allowed in FROM", name)
		}
		if deniedName(name) {
			return 0, queryErr("%q is a system object and is not allowed", name)
		}
		if t.kind == tIdent && ctes[strings.ToLower(name)] || t.kind == tQIdent && ctes[name] {
			return j, nil
		}
		graph, ok := resolveGraph(name, t.kind == tQIdent, graphs)
		if !ok {
			return 0, queryErr("unknown table %q (this namespace's tables: %s)", name, graphList(graphs))
		}
		read[graph] = true
		with := quoteIdent(graphs[graph])
		aliased := false
		if j+1 < len(toks) {
			n := toks[j+1]
			aliased = n.kind == tQIdent || (n.kind == tIdent && (!notAlias[n.lower()] || n.is("as")))
		}
		if !aliased {
			if i == j {
				with += " AS " + src[t.start:t.end]
			} else {
				with += " AS " + quoteIdent(name)
			}
		}
		repls = append(repls, repl{t.start, toks[j].end, with})
		return j, nil
	}

	for i := 0; i < len(toks); i++ {
		t := toks[i]
		f := top()
		if f.expectRef && (t.kind == tIdent || t.kind == tQIdent) && !t.is("lateral") && !t.is("only") && !t.is("select") && !t.is("with") && !t.is("values") {
			f.expectRef = false
			j, err := tableRef(i)
			if err != nil {
				return checkedQuery{}, err
			}
			i = j
			continue
		}
		if t.kind == tPunct {
			switch t.text {
			case "(":
				nf := &frame{}
				if f.expectRef {
					// a parenthesised join or a subquery in FROM
					nf.inFrom, nf.expectRef, nf.sawSelect = true, true, true
					f.expectRef = false
				}
				stack = append(stack, nf)
			case ")":
				if len(stack) == 1 {
					return checkedQuery{}, queryErr("unbalanced parentheses")
				}
				stack = stack[:len(stack)-1]
			case ",":
				if f.withMode {
					f.expectCTE = true
				} else if f.inFrom {
					f.expectRef = true
				}
			default:
				f.expectRef = false
			}
			continue
		}
		if t.kind != tIdent {
			if t.kind == tQIdent && f.expectCTE {
				ctes[t.text] = true
				f.expectCTE = false
			}
			f.expectRef = false
			continue
		}
		kw := t.lower()
		switch {
		case f.expectCTE && kw != "recursive":
			ctes[kw] = true
			f.expectCTE = false
		case kw == "with":
			f.withMode, f.expectCTE, f.expectRef = true, true, false
		case kw == "select":
			f.sawSelect, f.inFrom, f.withMode, f.expectCTE, f.expectRef = true, false, false, false, false
		case kw == "from" && f.sawSelect && !(i > 0 && toks[i-1].is("distinct")), kw == "join" && f.inFrom:
			f.inFrom, f.expectRef = true, true
		case kw == "values":
			f.inFrom, f.expectRef = false, false
		case kw == "in":
			// SQLite accepts "x IN tablename".
			if i+1 < len(toks) && (toks[i+1].kind == tIdent || toks[i+1].kind == tQIdent) {
				j, err := tableRef(i + 1)
				if err != nil {
					return checkedQuery{}, err
				}
				i = j
			}
		case endsFrom[kw]:
			f.inFrom, f.expectRef = false, false
		}
	}
	if len(stack) != 1 {
		return checkedQuery{}, queryErr("unbalanced parentheses")
	}
	for _, f := range stack {
		if f.expectRef {
			return checkedQuery{}, queryErr("missing table name after FROM/JOIN")
		}
	}

	var b strings.Builder
	last := 0
	for _, r := range repls {
		b.WriteString(src[last:r.start])
		b.WriteString(r.with)
		last = r.end
	}
	b.WriteString(src[last:])
	out := checkedQuery{SQL: b.String()}
	for g := range read {
		out.Tables = append(out.Tables, g)
	}
	sort.Strings(out.Tables)
	for c := range ctes {
		out.CTEs = append(out.CTEs, c)
	}
	sort.Strings(out.CTEs)
	return out, nil
}

// resolveGraph finds the graph a table name refers to: a quoted name must
// match exactly; an unquoted one matches exactly, or else case-insensitively
// when exactly one graph matches that way.
func resolveGraph(name string, quoted bool, graphs map[string]string) (string, bool) {
	if _, ok := graphs[name]; ok {
		return name, true
	}
	if quoted {
		return "", false
	}
	found := ""
	for g := range graphs {
		if strings.EqualFold(g, name) {
			if found != "" {
				return "", false
			}
			found = g
		}
	}
	return found, found != ""
}

func graphList(graphs map[string]string) string {
	if len(graphs) == 0 {
		return "none yet"
	}
	names := make([]string, 0, len(graphs))
	for g := range graphs {
		names = append(names, g)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// quoteIdent quotes an identifier for either engine.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
