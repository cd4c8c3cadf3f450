package structured

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is the shared Store: one schema per namespace (a hashed name),
// holding the graph tables and the catalog (_graphs, _columns), plus one
// NOLOGIN reader role per namespace with USAGE on that schema and SELECT
// on its graph tables only. User queries run in a READ ONLY transaction as
// that role, with search_path set to the schema and a statement_timeout.
//
// Several API servers may share the database: every write takes a
// transaction-level advisory lock on the namespace and reads the catalog
// inside its transaction, so nothing is cached across servers.
//
// The connecting user must be able to create schemas and roles (CREATEROLE)
// and to SET ROLE to the reader roles it creates.
type Postgres struct {
	pool *pgxpool.Pool
	cfg  Config
	db   string
}

var _ Store = (*Postgres)(nil)

// OpenPostgres connects to dsn.
func OpenPostgres(ctx context.Context, dsn string, cfg Config) (*Postgres, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("structured: postgres dsn: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("structured: postgres: %w", err)
	}
	var db string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		pool.Close()
		return nil, fmt.Errorf("structured: postgres: %w", err)
	}
	return &Postgres{pool: pool, cfg: cfg.withDefaults(), db: db}, nil
}

func (p *Postgres) schema(ns string) string { return physName("ns_", ns) }

// role is cluster-wide, so it also names the database.
func (p *Postgres) role(ns string) string { return physName("ixr_", p.db+"\x00"+ns) }

func pgType(t string) string {
	switch t {
	case "integer":
		return "bigint"
	case "real":
		return "double precision"
	case "boolean":
		return "boolean"
	case "json":
		return "jsonb"
	}
	return "text"
}

// writeTx runs fn in a transaction holding the namespace's advisory lock.
// With create false, fn is not called when the namespace has no schema.
func (p *Postgres) writeTx(ctx context.Context, ns string, create bool, fn func(tx pgx.Tx, sch string) error) error {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	defer tx.Rollback(ctx)
	sch := p.schema(ns)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "indexify-structured/"+sch); err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, sch).Scan(&exists); err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	if !exists {
		if !create {
			return nil
		}
		if err := p.createNamespace(ctx, tx, ns, sch); err != nil {
			return fmt.Errorf("structured: create namespace %s: %w", ns, err)
		}
	}
	if err := fn(tx, sch); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("structured: %w", err)
	}
	return nil
}

func (p *Postgres) createNamespace(ctx context.Context, tx pgx.Tx, ns, sch string) error {
	role := p.role(ns)
	var roleExists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&roleExists); err != nil {
		return err
	}
	stmts := []string{}
	if !roleExists {
		stmts = append(stmts, `CREATE ROLE `+quoteIdent(role)+` NOLOGIN NOINHERIT`)
	}
	q := quoteIdent(sch)
	stmts = append(stmts,
		`CREATE SCHEMA `+q,
		`CREATE TABLE `+q+`._graphs (graph text PRIMARY KEY, tbl text NOT NULL UNIQUE)`,
		`CREATE TABLE `+q+`._columns (graph text NOT NULL, name text NOT NULL, type text NOT NULL, key text NOT NULL, ord integer NOT NULL, PRIMARY KEY (graph, name))`,
		`COMMENT ON SCHEMA `+q+` IS `+quoteLiteral("indexify namespace "+ns),
		`REVOKE ALL ON SCHEMA `+q+` FROM PUBLIC`,
		`GRANT USAGE ON SCHEMA `+q+` TO `+quoteIdent(role),
		`GRANT `+quoteIdent(role)+` TO CURRENT_USER`,
	)
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			var pgErr *pgconn.PgError
			// another database of the cluster created the role meanwhile
			if errors.As(err, &pgErr) && pgErr.Code == "42710" && strings.HasPrefix(s, "CREATE ROLE") {
				continue
			}
			return err
		}
	}
	return nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// catalog reads the namespace's graphs and columns.
func catalog(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sch string) (map[string]string, map[string][]colInfo, error) {
	graphs := map[string]string{}
	cols := map[string][]colInfo{}
	rows, err := q.Query(ctx, `SELECT graph, tbl FROM `+quoteIdent(sch)+`._graphs`)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var g, t string
		if err := rows.Scan(&g, &t); err != nil {
			rows.Close()
			return nil, nil, err
		}
		graphs[g] = t
		cols[g] = fixedColInfos()
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows, err = q.Query(ctx, `SELECT graph, name, type, key FROM `+quoteIdent(sch)+`._columns ORDER BY graph, ord`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		var c colInfo
		if err := rows.Scan(&g, &c.Name, &c.Type, &c.Key); err != nil {
			return nil, nil, err
		}
		cols[g] = append(cols[g], c)
	}
	return graphs, cols, rows.Err()
}

// readCatalog reads the catalog outside a write; a namespace without a
// schema has an empty one.
func (p *Postgres) readCatalog(ctx context.Context, ns string) (map[string]string, map[string][]colInfo, error) {
	sch := p.schema(ns)
	var exists bool
	if err := p.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, sch).Scan(&exists); err != nil {
		return nil, nil, fmt.Errorf("structured: %w", err)
	}
	if !exists {
		return map[string]string{}, map[string][]colInfo{}, nil
	}
	g, c, err := catalog(ctx, p.pool, sch)
	if err != nil {
		return nil, nil, fmt.Errorf("structured: %w", err)
	}
	return g, c, nil
}

func (p *Postgres) Upsert(ctx context.Context, ns, graph string, rows []Row) error {
	if err := validNames(ns, graph); err != nil {
		return err
	}
	if err := validRows(rows); err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	return p.writeTx(ctx, ns, true, func(tx pgx.Tx, sch string) error {
		graphs, allCols, err := catalog(ctx, tx, sch)
		if err != nil {
			return fmt.Errorf("structured: %w", err)
		}
		tbl, ok := graphs[graph]
		cols := allCols[graph]
		q := quoteIdent(sch)
		if !ok {
			tbl = physName("g_", graph)
			if _, err := tx.Exec(ctx, `INSERT INTO `+q+`._graphs (graph, tbl) VALUES ($1, $2)`, graph, tbl); err != nil {
				return fmt.Errorf("structured: %w", err)
			}
			ddl := fmt.Sprintf(`CREATE TABLE %s.%s (content_id text NOT NULL, policy_name text NOT NULL, extractor text, metadata jsonb NOT NULL, PRIMARY KEY (content_id, policy_name))`, q, quoteIdent(tbl))
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("structured: %w", err)
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`GRANT SELECT ON %s.%s TO %s`, q, quoteIdent(tbl), quoteIdent(p.role(ns)))); err != nil {
				return fmt.Errorf("structured: %w", err)
			}
			cols = fixedColInfos()
		}
		have := map[string]bool{}
		for _, c := range cols {
			have[c.Name] = true
		}
		qt := q + "." + quoteIdent(tbl)
		for _, r := range rows {
			for _, kc := range keyColumns(r.Metadata) {
				if have[kc.col] || kc.typ == "" {
					continue
				}
				if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN %s %s`, qt, quoteIdent(kc.col), pgType(kc.typ))); err != nil {
					return fmt.Errorf("structured: add column %q: %w", kc.col, err)
				}
				if _, err := tx.Exec(ctx, `INSERT INTO `+q+`._columns (graph, name, type, key, ord) VALUES ($1, $2, $3, $4, $5)`,
					graph, kc.col, kc.typ, kc.key, len(cols)); err != nil {
					return fmt.Errorf("structured: %w", err)
				}
				have[kc.col] = true
				cols = append(cols, colInfo{Name: kc.col, Type: kc.typ, Key: kc.key})
			}
		}
		types := map[string]string{}
		for _, c := range cols {
			types[c.Name] = c.Type
		}
		// One round trip for all the rows' statements.
		batch := &pgx.Batch{}
		for _, r := range rows {
			names, vals, err := rowValues(r, cols)
			if err != nil {
				return err
			}
			batch.Queue(`DELETE FROM `+qt+` WHERE content_id = $1 AND policy_name = $2`, r.ContentID, r.Policy)
			ph := make([]string, len(names))
			for i, n := range names {
				ph[i] = fmt.Sprintf("$%d", i+1)
				typ := types[strings.Trim(n, `"`)]
				if typ == "json" || n == colMetadata {
					ph[i] = fmt.Sprintf("CAST($%d::text AS jsonb)", i+1)
				}
			}
			batch.Queue(fmt.Sprintf(`INSERT INTO %s (%s) VALUES (%s)`, qt, strings.Join(names, ", "), strings.Join(ph, ", ")), vals...)
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return fmt.Errorf("structured: %w", err)
		}
		return nil
	})
}

func (p *Postgres) Delete(ctx context.Context, ns string, contentIDs []string) error {
	if err := validNames(ns); err != nil {
		return err
	}
	if len(contentIDs) == 0 {
		return nil
	}
	return p.writeTx(ctx, ns, false, func(tx pgx.Tx, sch string) error {
		graphs, _, err := catalog(ctx, tx, sch)
		if err != nil {
			return fmt.Errorf("structured: %w", err)
		}
		for _, tbl := range graphs {
			if _, err := tx.Exec(ctx, `DELETE FROM `+quoteIdent(sch)+`.`+quoteIdent(tbl)+` WHERE content_id = ANY($1)`, contentIDs); err != nil {
				return fmt.Errorf("structured: %w", err)
			}
		}
		return nil
	})
}

func (p *Postgres) DropGraph(ctx context.Context, ns, graph string) error {
	if err := validNames(ns, graph); err != nil {
		return err
	}
	return p.writeTx(ctx, ns, false, func(tx pgx.Tx, sch string) error {
		graphs, _, err := catalog(ctx, tx, sch)
		if err != nil {
			return fmt.Errorf("structured: %w", err)
		}
		tbl, ok := graphs[graph]
		if !ok {
			return nil
		}
		q := quoteIdent(sch)
		for _, s := range []string{`DELETE FROM ` + q + `._graphs WHERE graph = $1`, `DELETE FROM ` + q + `._columns WHERE graph = $1`} {
			if _, err := tx.Exec(ctx, s, graph); err != nil {
				return fmt.Errorf("structured: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+q+`.`+quoteIdent(tbl)); err != nil {
			return fmt.Errorf("structured: %w", err)
		}
		return nil
	})
}

func (p *Postgres) Rows(ctx context.Context, ns, contentID string) ([]Row, error) {
	if err := validNames(ns); err != nil {
		return nil, err
	}
	graphs, _, err := p.readCatalog(ctx, ns)
	if err != nil {
		return nil, err
	}
	var out []Row
	for _, g := range sortedKeys(graphs) {
		q := fmt.Sprintf(`SELECT policy_name, extractor, metadata::text FROM %s.%s WHERE content_id = $1 ORDER BY policy_name`, quoteIdent(p.schema(ns)), quoteIdent(graphs[g]))
		rows, err := p.pool.Query(ctx, q, contentID)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
				continue // dropped meanwhile
			}
			return nil, fmt.Errorf("structured: %w", err)
		}
		for rows.Next() {
			var pol, md string
			var ext *string
			if err := rows.Scan(&pol, &ext, &md); err != nil {
				rows.Close()
				return nil, fmt.Errorf("structured: %w", err)
			}
			m, err := decodeMetadata(md)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("structured: %w", err)
			}
			r := Row{ContentID: contentID, Policy: pol, Metadata: m}
			if ext != nil {
				r.Extractor = *ext
			}
			out = append(out, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("structured: %w", err)
		}
	}
	return out, nil
}

func (p *Postgres) Schemas(ctx context.Context, ns string) ([]Schema, error) {
	if err := validNames(ns); err != nil {
		return nil, err
	}
	graphs, cols, err := p.readCatalog(ctx, ns)
	if err != nil {
		return nil, err
	}
	var out []Schema
	for _, g := range sortedKeys(graphs) {
		out = append(out, schemaOf(ns, g, cols[g]))
	}
	return out, nil
}

func (p *Postgres) Query(ctx context.Context, ns, query string) ([]map[string]any, error) {
	if err := validNames(ns); err != nil {
		return nil, err
	}
	graphs, _, err := p.readCatalog(ctx, ns)
	if err != nil {
		return nil, err
	}
	cq, err := checkQuery(query, graphs)
	if err != nil {
		return nil, err
	}
	if len(graphs) == 0 {
		// a namespace with no tables yet still needs its schema and role
		if err := p.ensureSchema(ctx, ns); err != nil {
			return nil, err
		}
	}
	return p.run(ctx, ns, cq.SQL)
}

// run executes a query that passed the lexical check, confined by the
// engine: a READ ONLY transaction, the namespace's reader role, its schema
// as the search_path, a statement_timeout, and the extended protocol
// (which takes exactly one statement). Tests call it directly with
// statements the lexical check would refuse.
func (p *Postgres) run(ctx context.Context, ns, sql string) ([]map[string]any, error) {
	sch := p.schema(ns)
	qctx, cancel := context.WithTimeout(ctx, p.cfg.QueryTimeout)
	defer cancel()
	tx, err := p.pool.BeginTx(qctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, p.runErr(ctx, qctx, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	ms := p.cfg.QueryTimeout.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	for _, s := range []string{
		`SET LOCAL statement_timeout = ` + fmt.Sprint(ms),
		`SET LOCAL search_path = ` + quoteIdent(sch),
		`SET LOCAL ROLE ` + quoteIdent(p.role(ns)),
	} {
		if _, err := tx.Exec(qctx, s); err != nil {
			return nil, p.runErr(ctx, qctx, fmt.Errorf("structured: %w", err))
		}
	}
	rows, err := tx.Query(qctx, sql, pgx.QueryExecModeDescribeExec)
	if err != nil {
		return nil, p.runErr(ctx, qctx, err)
	}
	defer rows.Close()
	fields := rows.FieldDescriptions()
	out := []map[string]any{}
	size := 0
	for rows.Next() {
		if len(out) == p.cfg.MaxRows {
			return nil, errTooManyRows(p.cfg.MaxRows)
		}
		vals, err := rows.Values()
		if err != nil {
			return nil, p.runErr(ctx, qctx, err)
		}
		m := make(map[string]any, len(vals))
		for i, v := range vals {
			m[fields[i].Name] = pgValue(v)
			size += len(fields[i].Name) + valueSize(m[fields[i].Name])
		}
		if size > p.cfg.MaxResultBytes {
			return nil, errTooLarge(p.cfg.MaxResultBytes)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, p.runErr(ctx, qctx, err)
	}
	return out, nil
}

// ensureSchema creates the namespace's schema (and role) if missing, so a
// query in a new namespace runs (and refuses) as in any other.
func (p *Postgres) ensureSchema(ctx context.Context, ns string) error {
	return p.writeTx(ctx, ns, true, func(pgx.Tx, string) error { return nil })
}

func (p *Postgres) runErr(parent, qctx context.Context, err error) error {
	if parent.Err() != nil {
		return parent.Err()
	}
	var pgErr *pgconn.PgError
	timedOut := qctx.Err() != nil || (errors.As(err, &pgErr) && pgErr.Code == "57014")
	return queryRunErr(err, timedOut, p.cfg.QueryTimeout)
}

// pgValue converts a pgx value to the same JSON-friendly value the SQLite
// store yields.
func pgValue(v any) any {
	switch x := v.(type) {
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case float32:
		return float64(x)
	case pgtype.Numeric:
		if !x.Valid {
			return nil
		}
		if x.NaN || x.InfinityModifier != pgtype.Finite {
			f, _ := x.Float64Value()
			return jsonFriendly(f.Float64)
		}
		if x.Exp >= 0 {
			if i, err := x.Int64Value(); err == nil && i.Valid {
				return i.Int64
			}
		}
		f, err := x.Float64Value()
		if err != nil || math.IsInf(f.Float64, 0) {
			return x.Int.String()
		}
		return f.Float64
	case [16]byte:
		return fmt.Sprintf("%x-%x-%x-%x-%x", x[0:4], x[4:6], x[6:8], x[8:10], x[10:16])
	case time.Duration:
		return x.String()
	case []any:
		for i := range x {
			x[i] = pgValue(x[i])
		}
		return x
	case pgtype.Time, pgtype.Interval:
		return fmt.Sprint(x)
	}
	return jsonFriendly(v)
}

// Close closes the connection pool.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}
