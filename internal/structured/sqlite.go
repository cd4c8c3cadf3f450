package structured

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/indexify-go/indexify/internal/dirlock"
)

// SQLite is the embedded Store: one database file per namespace under a
// directory, so another namespace's tables are not reachable from a query
// by construction. Each namespace has a read-write handle (one connection,
// for Upsert/Delete/DropGraph) and a separate read-only handle for user
// queries (mode=ro, query_only, and an authorizer that allows only reads of
// the namespace's graph tables).
type SQLite struct {
	dir  string
	cfg  Config
	lock *dirlock.Lock // one process per directory (dirlock.LockFile)

	mu     sync.Mutex
	nss    map[string]*sqliteNS
	closed bool
}

type sqliteNS struct {
	mu     sync.RWMutex // guards the catalog cache; held for writing by writes
	w, r   *sql.DB
	graphs map[string]string    // graph -> physical table
	cols   map[string][]colInfo // graph -> columns in order
}

var _ Store = (*SQLite)(nil)

// OpenSQLite opens (creating if needed) a store under dir. The directory
// is locked while the store is open: a second process gets an error
// wrapping dirlock.ErrHeld (SQLite's own locking would let it in and
// interleave schema changes with the first one's).
func OpenSQLite(dir string, cfg Config) (*SQLite, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("structured: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("structured: %w", err)
	}
	lock, err := dirlock.TryAcquire(abs, dirlock.LockFile)
	if err != nil {
		return nil, fmt.Errorf("structured: %w", err)
	}
	return &SQLite{dir: abs, cfg: cfg.withDefaults(), lock: lock, nss: map[string]*sqliteNS{}}, nil
}

func (s *SQLite) nsPath(ns string) string { return filepath.Join(s.dir, ns+".sqlite") }

// namespace returns the namespace's handles; with create false a namespace
// without a file yet yields nil.
func (s *SQLite) namespace(ns string, create bool) (*sqliteNS, error) {
	if err := validNames(ns); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("structured: store is closed")
	}
	if n := s.nss[ns]; n != nil {
		return n, nil
	}
	path := s.nsPath(ns)
	if _, err := os.Stat(path); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("structured: %w", err)
		}
		if !create {
			return nil, nil
		}
	}
	u := (&url.URL{Scheme: "file", Path: path}).String()
	w, err := sql.Open("sqlite", u+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(0)")
	if err != nil {
		return nil, fmt.Errorf("structured: open %s: %w", ns, err)
	}
	w.SetMaxOpenConns(1)
	n := &sqliteNS{w: w}
	if err := n.init(); err != nil {
		w.Close()
		return nil, fmt.Errorf("structured: open %s: %w", ns, err)
	}
	r, err := sql.Open("sqlite", u+"?mode=ro&_pragma=busy_timeout(10000)&_query_only=1")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("structured: open %s read-only: %w", ns, err)
	}
	r.SetMaxOpenConns(4)
	n.r = r
	s.nss[ns] = n
	return n, nil
}

func (n *sqliteNS) init() error {
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS _graphs (graph TEXT PRIMARY KEY, tbl TEXT NOT NULL UNIQUE)`,
		`CREATE TABLE IF NOT EXISTS _columns (graph TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL, key TEXT NOT NULL, ord INTEGER NOT NULL, PRIMARY KEY (graph, name))`,
	} {
		if _, err := n.w.Exec(q); err != nil {
			return err
		}
	}
	return n.load()
}

// load reads the catalog into memory (at open and after a failed write).
func (n *sqliteNS) load() error {
	graphs := map[string]string{}
	cols := map[string][]colInfo{}
	rows, err := n.w.Query(`SELECT graph, tbl FROM _graphs`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var g, t string
		if err := rows.Scan(&g, &t); err != nil {
			rows.Close()
			return err
		}
		graphs[g] = t
		cols[g] = fixedColInfos()
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = n.w.Query(`SELECT graph, name, type, key FROM _columns ORDER BY graph, ord`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c colInfo
		var g string
		if err := rows.Scan(&g, &c.Name, &c.Type, &c.Key); err != nil {
			return err
		}
		cols[g] = append(cols[g], c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	n.graphs, n.cols = graphs, cols
	return nil
}

func sqliteType(t string) string {
	switch t {
	case "integer":
		return "INTEGER"
	case "real":
		return "REAL"
	case "boolean":
		return "BOOLEAN"
	case "json":
		return "JSON"
	}
	return "TEXT"
}

func (s *SQLite) Upsert(ctx context.Context, ns, graph string, rows []Row) error {
	if err := validNames(ns, graph); err != nil {
		return err
	}
	if err := validRows(rows); err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	n, err := s.namespace(ns, true)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	err = n.upsert(ctx, graph, rows)
	if err != nil {
		if lerr := n.load(); lerr != nil {
			return errors.Join(err, lerr)
		}
	}
	return err
}

func (n *sqliteNS) upsert(ctx context.Context, graph string, rows []Row) error {
	tx, err := n.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	defer tx.Rollback()
	tbl, ok := n.graphs[graph]
	cols := n.cols[graph]
	if !ok {
		tbl = physName("g_", graph)
		if _, err := tx.ExecContext(ctx, `INSERT INTO _graphs (graph, tbl) VALUES (?, ?)`, graph, tbl); err != nil {
			return fmt.Errorf("structured: %w", err)
		}
		ddl := fmt.Sprintf(`CREATE TABLE %s (content_id TEXT NOT NULL, policy_name TEXT NOT NULL, extractor TEXT, metadata JSON NOT NULL, PRIMARY KEY (content_id, policy_name))`, quoteIdent(tbl))
		if _, err := tx.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("structured: %w", err)
		}
		cols = fixedColInfos()
	}
	cols = append([]colInfo(nil), cols...)
	have := map[string]string{}
	for _, c := range cols {
		have[c.Name] = c.Type
	}
	for _, r := range rows {
		for _, kc := range keyColumns(r.Metadata) {
			if _, ok := have[kc.col]; ok || kc.typ == "" {
				continue
			}
			q := fmt.Sprintf(`ALTER TABLE %s ADD COLUMN %s %s`, quoteIdent(tbl), quoteIdent(kc.col), sqliteType(kc.typ))
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("structured: add column %q: %w", kc.col, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO _columns (graph, name, type, key, ord) VALUES (?, ?, ?, ?, ?)`,
				graph, kc.col, kc.typ, kc.key, len(cols)); err != nil {
				return fmt.Errorf("structured: %w", err)
			}
			have[kc.col] = kc.typ
			cols = append(cols, colInfo{Name: kc.col, Type: kc.typ, Key: kc.key})
		}
	}
	del := fmt.Sprintf(`DELETE FROM %s WHERE content_id = ? AND policy_name = ?`, quoteIdent(tbl))
	for _, r := range rows {
		names, vals, err := rowValues(r, cols)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, del, r.ContentID, r.Policy); err != nil {
			return fmt.Errorf("structured: %w", err)
		}
		ph := strings.TrimSuffix(strings.Repeat("?, ", len(vals)), ", ")
		ins := fmt.Sprintf(`INSERT INTO %s (%s) VALUES (%s)`, quoteIdent(tbl), strings.Join(names, ", "), ph)
		if _, err := tx.ExecContext(ctx, ins, vals...); err != nil {
			return fmt.Errorf("structured: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	n.graphs[graph] = tbl
	n.cols[graph] = cols
	return nil
}

// rowValues lists the quoted column names and values of one row.
func rowValues(r Row, cols []colInfo) ([]string, []any, error) {
	md, err := metadataJSON(r.Metadata)
	if err != nil {
		return nil, nil, fmt.Errorf("structured: content %s: %w", r.ContentID, err)
	}
	var ext any
	if r.Extractor != "" {
		ext = r.Extractor
	}
	names := []string{colContentID, colPolicy, colExtractor, colMetadata}
	vals := []any{r.ContentID, r.Policy, ext, md}
	types := map[string]string{}
	for _, c := range cols {
		types[c.Name] = c.Type
	}
	for _, kc := range keyColumns(r.Metadata) {
		typ, ok := types[kc.col]
		if !ok {
			continue // null value, no column yet
		}
		v, ok := storeValue(typ, r.Metadata[kc.key])
		if !ok {
			v = nil
		}
		names = append(names, quoteIdent(kc.col))
		vals = append(vals, v)
	}
	return names, vals, nil
}

func (s *SQLite) Delete(ctx context.Context, ns string, contentIDs []string) error {
	n, err := s.namespace(ns, false)
	if err != nil || n == nil || len(contentIDs) == 0 {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	tx, err := n.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	defer tx.Rollback()
	for _, tbl := range n.graphs {
		for start := 0; start < len(contentIDs); start += 500 {
			ids := contentIDs[start:min(start+500, len(contentIDs))]
			args := make([]any, len(ids))
			for i, id := range ids {
				args[i] = id
			}
			q := fmt.Sprintf(`DELETE FROM %s WHERE content_id IN (%s)`, quoteIdent(tbl), strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", "))
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("structured: %w", err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	return nil
}

func (s *SQLite) DropGraph(ctx context.Context, ns, graph string) error {
	if err := validNames(ns, graph); err != nil {
		return err
	}
	n, err := s.namespace(ns, false)
	if err != nil || n == nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	tbl, ok := n.graphs[graph]
	if !ok {
		return nil
	}
	tx, err := n.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	defer tx.Rollback()
	for _, q := range []string{`DELETE FROM _graphs WHERE graph = ?`, `DELETE FROM _columns WHERE graph = ?`} {
		if _, err := tx.ExecContext(ctx, q, graph); err != nil {
			return fmt.Errorf("structured: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+quoteIdent(tbl)); err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	delete(n.graphs, graph)
	delete(n.cols, graph)
	return nil
}

func (s *SQLite) Rows(ctx context.Context, ns, contentID string) ([]Row, error) {
	n, err := s.namespace(ns, false)
	if err != nil || n == nil {
		return nil, err
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []Row
	for _, g := range sortedKeys(n.graphs) {
		q := fmt.Sprintf(`SELECT policy_name, extractor, metadata FROM %s WHERE content_id = ? ORDER BY policy_name`, quoteIdent(n.graphs[g]))
		rows, err := n.w.QueryContext(ctx, q, contentID)
		if err != nil {
			return nil, fmt.Errorf("structured: %w", err)
		}
		for rows.Next() {
			var pol, md string
			var ext sql.NullString
			if err := rows.Scan(&pol, &ext, &md); err != nil {
				rows.Close()
				return nil, fmt.Errorf("structured: %w", err)
			}
			m, err := decodeMetadata(md)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("structured: %w", err)
			}
			out = append(out, Row{ContentID: contentID, Policy: pol, Extractor: ext.String, Metadata: m})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("structured: %w", err)
		}
	}
	return out, nil
}

func (s *SQLite) Schemas(ctx context.Context, ns string) ([]Schema, error) {
	n, err := s.namespace(ns, false)
	if err != nil || n == nil {
		return nil, err
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []Schema
	for _, g := range sortedKeys(n.graphs) {
		out = append(out, schemaOf(ns, g, n.cols[g]))
	}
	return out, nil
}

// sqliteDenied are functions the authorizer refuses on top of the lexical
// check (which refuses these names too).
var sqliteDenied = map[string]bool{"load_extension": true, "readfile": true, "writefile": true, "edit": true, "fts3_tokenizer": true}

func (s *SQLite) Query(ctx context.Context, ns, query string) ([]map[string]any, error) {
	n, err := s.namespace(ns, true)
	if err != nil {
		return nil, err
	}
	n.mu.RLock()
	graphs := make(map[string]string, len(n.graphs))
	for g, t := range n.graphs {
		graphs[g] = t
	}
	n.mu.RUnlock()
	cq, err := checkQuery(query, graphs)
	if err != nil {
		return nil, err
	}
	return s.run(ctx, n, graphs, cq)
}

// run executes a query that passed the lexical check on the read-only
// handle, under the authorizer. (Tests call it directly with statements the
// lexical check would refuse, to prove the engine refuses them too.)
func (s *SQLite) run(ctx context.Context, n *sqliteNS, graphs map[string]string, cq checkedQuery) ([]map[string]any, error) {
	allowed := map[string]bool{}
	for _, g := range cq.Tables {
		allowed[graphs[g]] = true
	}
	ctes := map[string]bool{}
	for _, c := range cq.CTEs {
		ctes[strings.ToLower(c)] = true
	}
	auth := func(action sqlite.AuthorizerActionCode, arg1, arg2, db, _ string) sqlite.AuthorizerReturnCode {
		switch action {
		case sqlite.AuthSelect, sqlite.AuthRecursive:
			return sqlite.AuthorizerOK
		case sqlite.AuthRead:
			// count(*) reads are presented without a database name; the
			// allowed tables exist only in main (nothing can create temp ones).
			if (db == "main" || db == "") && allowed[arg1] {
				return sqlite.AuthorizerOK
			}
			// and so are reads of the query's own WITH tables.
			if db == "" && ctes[strings.ToLower(arg1)] {
				return sqlite.AuthorizerOK
			}
		case sqlite.AuthFunction:
			if !sqliteDenied[strings.ToLower(arg2)] {
				return sqlite.AuthorizerOK
			}
		}
		if debugAuth {
			fmt.Println("deny", action, arg1, arg2, db)
		}
		return sqlite.AuthorizerDeny
	}

	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	conn, err := n.r.Conn(qctx)
	if err != nil {
		return nil, s.runErr(ctx, qctx, err)
	}
	defer conn.Close()
	if err := conn.Raw(func(dc any) error {
		reg, ok := dc.(sqlite.AuthorizerRegisterer)
		if !ok {
			return errors.New("sqlite driver has no authorizer")
		}
		return reg.RegisterAuthorizer(auth)
	}); err != nil {
		return nil, fmt.Errorf("structured: %w", err)
	}
	// No value a query builds may exceed the result budget (zeroblob(1e9),
	// printf('%.*c', ...)): SQLite refuses it instead of allocating it.
	if _, err := sqlite.Limit(conn, sqlite3.SQLITE_LIMIT_LENGTH, max(s.cfg.MaxResultBytes, 1<<20)); err != nil {
		return nil, fmt.Errorf("structured: %w", err)
	}
	// The authorizer stays on this pooled connection; the next query
	// replaces it with its own before running anything.
	rows, err := conn.QueryContext(qctx, cq.SQL)
	if err != nil {
		return nil, s.runErr(ctx, qctx, err)
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		return nil, s.runErr(ctx, qctx, err)
	}
	names := make([]string, len(cts))
	for i, c := range cts {
		names[i] = c.Name()
	}
	out := []map[string]any{}
	size := 0
	vals := make([]any, len(cts))
	ptrs := make([]any, len(cts))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if len(out) == s.cfg.MaxRows {
			return nil, errTooManyRows(s.cfg.MaxRows)
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, s.runErr(ctx, qctx, err)
		}
		m := make(map[string]any, len(vals))
		for i, v := range vals {
			m[names[i]] = sqliteValue(strings.ToUpper(cts[i].DatabaseTypeName()), v)
			size += len(names[i]) + valueSize(m[names[i]])
		}
		if size > s.cfg.MaxResultBytes {
			return nil, errTooLarge(s.cfg.MaxResultBytes)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, s.runErr(ctx, qctx, err)
	}
	return out, nil
}

// runErr classifies an error of a running query: the caller's own
// cancellation stays as it is, our deadline becomes "timed out", anything
// else (syntax, authorizer refusal, ...) a refusal.
func (s *SQLite) runErr(parent, qctx context.Context, err error) error {
	if parent.Err() != nil {
		return parent.Err()
	}
	return queryRunErr(err, qctx.Err() != nil, s.cfg.QueryTimeout)
}

// sqliteValue converts a SQLite result to the same JSON-friendly value
// PostgreSQL yields: booleans from BOOLEAN columns, decoded JSON columns.
func sqliteValue(declType string, v any) any {
	switch declType {
	case "BOOLEAN":
		if i, ok := v.(int64); ok {
			return i != 0
		}
	case "JSON":
		switch x := v.(type) {
		case string:
			return decodeJSONText(x)
		case []byte:
			return decodeJSONText(string(x))
		}
	}
	return jsonFriendly(v)
}

func (s *SQLite) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, n := range s.nss {
		errs = append(errs, n.r.Close(), n.w.Close())
	}
	s.nss = nil
	errs = append(errs, s.lock.Release())
	return errors.Join(errs...)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var debugAuth = false
