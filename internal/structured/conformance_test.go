package structured

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// backend opens a store for the conformance suite. reopen closes the
// store and opens it again over the same data (restart persistence).
type backend struct {
	open func(t *testing.T, cfg Config) (s Store, reopen func() Store)
}

func runConformance(t *testing.T, b backend) {
	ctx := context.Background()
	tests := []struct {
		name string
		fn   func(t *testing.T, s Store, reopen func() Store)
	}{
		{"UpsertReplacesNoDuplicate", func(t *testing.T, s Store, _ func() Store) {
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c1", Policy: "p", Extractor: "e", Metadata: map[string]any{"title": "a"}})
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c1", Policy: "p", Extractor: "e", Metadata: map[string]any{"title": "b"}})
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c1", Policy: "q", Metadata: map[string]any{"title": "c"}})
			rows := mustQuery(t, s, "ns1", "select content_id, policy_name, title from g order by policy_name")
			want := []map[string]any{
				{"content_id": "c1", "policy_name": "p", "title": "b"},
				{"content_id": "c1", "policy_name": "q", "title": "c"},
			}
			if !reflect.DeepEqual(rows, want) {
				t.Fatalf("rows = %v, want %v", rows, want)
			}
			// The same key twice in one batch: the last one wins.
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c2", Policy: "p", Metadata: map[string]any{"title": "first"}},
				Row{ContentID: "c2", Policy: "p", Metadata: map[string]any{"title": "last"}})
			rows = mustQuery(t, s, "ns1", "select title from g where content_id = 'c2'")
			if len(rows) != 1 || rows[0]["title"] != "last" {
				t.Fatalf("duplicate in a batch: %v", rows)
			}
			// A replacing row without a key leaves that column NULL.
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{}})
			rows = mustQuery(t, s, "ns1", "select title from g where content_id = 'c1' and policy_name = 'p'")
			if len(rows) != 1 || rows[0]["title"] != nil {
				t.Fatalf("after replace: %v", rows)
			}
		}},
		{"BatchIsAllOrNone", func(t *testing.T, s Store, _ func() Store) {
			err := s.Upsert(ctx, "ns1", "g", []Row{
				{ContentID: "ok", Policy: "p", Metadata: map[string]any{"a": "x"}},
				{ContentID: "bad/id", Policy: "p", Metadata: map[string]any{"a": "y"}},
			})
			if err == nil {
				t.Fatal("a batch with an invalid content id was accepted")
			}
			if got, _ := s.Rows(ctx, "ns1", "ok"); len(got) != 0 {
				t.Fatalf("half a batch was written: %v", got)
			}
			bad := map[string]any{"f": func() {}}
			if err := s.Upsert(ctx, "ns1", "g", []Row{{ContentID: "ok", Policy: "p", Metadata: map[string]any{"newcol": 1}}, {ContentID: "ok2", Policy: "p", Metadata: bad}}); err == nil {
				t.Fatal("unencodable metadata was accepted")
			}
			if got, _ := s.Rows(ctx, "ns1", "ok"); len(got) != 0 {
				t.Fatalf("half a batch was written: %v", got)
			}
			if err := s.Upsert(ctx, "ns1", "g", []Row{{ContentID: "ok", Policy: "p", Metadata: map[string]any{"a": "nul\x00"}}}); err == nil {
				t.Fatal("metadata with a NUL character was accepted")
			}
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "ok", Policy: "p", Metadata: map[string]any{"a": "z"}})
			sc := schemaByGraph(t, s, "ns1")["g"]
			if _, ok := sc.Columns["newcol"]; ok {
				t.Fatalf("a failed batch left its column behind: %v", sc.Columns)
			}
		}},
		{"NewKeyAddsColumnAndTypes", func(t *testing.T, s Store, _ func() Store) {
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{"title": "a"}})
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c2", Policy: "p", Metadata: map[string]any{
				"title": "b", "Page Number": 3, "score": 0.5, "ok": true, "tags": []any{"x", "y"}, "obj": map[string]any{"k": 1.0}, "nothing": nil,
			}})
			sc := schemaByGraph(t, s, "ns1")["g"]
			want := map[string]string{"content_id": "text", "policy_name": "text", "extractor": "text", "metadata": "json",
				"title": "text", "page_number": "integer", "score": "real", "ok": "boolean", "tags": "json", "obj": "json"}
			got := map[string]string{}
			for n, c := range sc.Columns {
				got[n] = c.Type
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("columns = %v, want %v", got, want)
			}
			if c := sc.Columns["page_number"].Comment; !strings.Contains(c, `"Page Number"`) {
				t.Fatalf("comment %q does not name the key", c)
			}
			for _, part := range []string{`CREATE TABLE "g" (`, "content_id text NOT NULL", "page_number integer", "tags json", "PRIMARY KEY (content_id, policy_name)"} {
				if !strings.Contains(sc.DDL, part) {
					t.Fatalf("DDL %q lacks %q", sc.DDL, part)
				}
			}
			rows := mustQuery(t, s, "ns1", "select title, page_number, score, ok, tags, obj from g where content_id = 'c2'")
			wantRow := map[string]any{"title": "b", "page_number": int64(3), "score": 0.5, "ok": true, "tags": []any{"x", "y"}, "obj": map[string]any{"k": 1.0}}
			if len(rows) != 1 || !reflect.DeepEqual(rows[0], wantRow) {
				t.Fatalf("rows = %#v, want %#v", rows, wantRow)
			}
			// The old row has NULL in the new columns; boolean filters work.
			rows = mustQuery(t, s, "ns1", "select content_id from g where ok = true")
			if len(rows) != 1 || rows[0]["content_id"] != "c2" {
				t.Fatalf("boolean filter: %v", rows)
			}
			// A conflicting type keeps the column; the value stays in metadata.
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c3", Policy: "p", Metadata: map[string]any{"ok": "yes", "page_number": 2.0, "title": 7}})
			rows = mustQuery(t, s, "ns1", "select ok, page_number, title, metadata from g where content_id = 'c3'")
			wantRow = map[string]any{"ok": nil, "page_number": int64(2), "title": "7", "metadata": map[string]any{"ok": "yes", "page_number": 2.0, "title": 7.0}}
			if len(rows) != 1 || !reflect.DeepEqual(rows[0], wantRow) {
				t.Fatalf("conflict rows = %#v, want %#v", rows, wantRow)
			}
		}},
		{"RowsDeleteDrop", func(t *testing.T, s Store, _ func() Store) {
			md := map[string]any{"a": "x", "n": 1.5, "nested": map[string]any{"b": []any{true}}}
			mustUpsert(t, s, "ns1", "g1", Row{ContentID: "c1", Policy: "p", Extractor: "ext/one", Metadata: md})
			mustUpsert(t, s, "ns1", "g2", Row{ContentID: "c1", Policy: "p2", Metadata: map[string]any{"b": "y"}})
			mustUpsert(t, s, "ns1", "g2", Row{ContentID: "c2", Policy: "p2", Metadata: map[string]any{"b": "z"}})
			mustUpsert(t, s, "ns2", "g1", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{"a": "other"}})
			// The same graph name in two namespaces: each sees its own.
			for ns, want := range map[string]string{"ns1": "x", "ns2": "other"} {
				rows := mustQuery(t, s, ns, "select a from g1")
				if len(rows) != 1 || rows[0]["a"] != want {
					t.Fatalf("%s: select a from g1 = %v, want %q", ns, rows, want)
				}
			}
			got, err := s.Rows(ctx, "ns1", "c1")
			if err != nil {
				t.Fatal(err)
			}
			sort.Slice(got, func(i, j int) bool { return got[i].Policy < got[j].Policy })
			want := []Row{
				{ContentID: "c1", Policy: "p", Extractor: "ext/one", Metadata: md},
				{ContentID: "c1", Policy: "p2", Metadata: map[string]any{"b": "y"}},
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Rows = %#v, want %#v", got, want)
			}
			if err := s.Delete(ctx, "ns1", []string{"c1"}); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.Rows(ctx, "ns1", "c1"); len(got) != 0 {
				t.Fatalf("after Delete: %v", got)
			}
			if got, _ := s.Rows(ctx, "ns1", "c2"); len(got) != 1 {
				t.Fatalf("Delete removed another content: %v", got)
			}
			if got, _ := s.Rows(ctx, "ns2", "c1"); len(got) != 1 {
				t.Fatalf("Delete reached another namespace: %v", got)
			}
			if err := s.DropGraph(ctx, "ns1", "g2"); err != nil {
				t.Fatal(err)
			}
			if err := s.DropGraph(ctx, "ns1", "g2"); err != nil {
				t.Fatalf("dropping a missing graph: %v", err)
			}
			if err := s.DropGraph(ctx, "nowhere", "g2"); err != nil {
				t.Fatalf("dropping in a missing namespace: %v", err)
			}
			if _, ok := schemaByGraph(t, s, "ns1")["g2"]; ok {
				t.Fatal("dropped graph still listed")
			}
			expectRefused(t, s, "ns1", "select * from g2", "unknown table")
			if sc, err := s.Schemas(ctx, "nowhere"); err != nil || len(sc) != 0 {
				t.Fatalf("Schemas of an empty namespace: %v %v", sc, err)
			}
			// Recreate after drop starts fresh.
			mustUpsert(t, s, "ns1", "g2", Row{ContentID: "c9", Policy: "p", Metadata: map[string]any{"other": 1}})
			if _, ok := schemaByGraph(t, s, "ns1")["g2"].Columns["b"]; ok {
				t.Fatal("recreated graph kept the dropped columns")
			}
		}},
		{"QueryShapes", func(t *testing.T, s Store, _ func() Store) {
			for i := 0; i < 5; i++ {
				mustUpsert(t, s, "ns1", "My-Graph.v2", Row{ContentID: fmt.Sprintf("c%d", i), Policy: "p", Metadata: map[string]any{"n": i, "kind": []string{"a", "b"}[i%2]}})
			}
			mustUpsert(t, s, "ns1", "other", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{"label": "L"}})
			cases := map[string]int{
				`select * from "My-Graph.v2"`:                                                          5,
				`select * from My-Graph.v2 where n > 2`:                                                2,
				`SELECT count(*) AS c FROM my-graph.v2`:                                                1,
				`select kind, count(*) from "My-Graph.v2" group by kind order by kind`:                 2,
				`with x as (select n from "My-Graph.v2" where n < 3) select * from x`:                  3,
				`select g.n, o.label from "My-Graph.v2" g join other o on o.content_id = g.content_id`: 1,
				`select * from "My-Graph.v2" where content_id in (select content_id from other)`:       1,
				`select 1 as one;`: 1,
				`select 'a;b' as s -- a comment; drop table x`:                                                 1,
				`with recursive r(i) as (select 1 union all select i + 1 from r where i < 10) select i from r`: 10,
				`select n from "My-Graph.v2" where n between 1 and 2 and kind is distinct from 'zz'`:           2,
			}
			for q, n := range cases {
				rows, err := s.Query(ctx, "ns1", q)
				if err != nil {
					t.Errorf("%s: %v", q, err)
					continue
				}
				if len(rows) != n {
					t.Errorf("%s: %d rows, want %d: %v", q, len(rows), n, rows)
				}
			}
			rows := mustQuery(t, s, "ns1", `select sum(n) as s, avg(n) as a, max(kind) as k from "My-Graph.v2"`)
			if want := (map[string]any{"s": int64(10), "a": 2.0, "k": "b"}); !reflect.DeepEqual(rows[0], want) {
				t.Fatalf("aggregates = %#v, want %#v", rows[0], want)
			}
		}},
		{"Refusals", func(t *testing.T, s Store, _ func() Store) {
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{"a": "x"}})
			mustUpsert(t, s, "ns2", "secret", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{"a": "s"}})
			refused := []string{
				"", "   ", "-- only a comment",
				"insert into g (content_id, policy_name, metadata) values ('x','y','{}')",
				"update g set a = 'y'", "delete from g", "drop table g", "create table t (a int)",
				"alter table g add column z text", "select 1; select 2", "select 1; --", "select 1;;",
				"select * from g; delete from g", "select 1 /* ; */ ; drop table g",
				"with x as (delete from g returning *) select * from x",
				"with x as (select 1) insert into g select * from x",
				"select * into newtable from g", "select * from g for update",
				"attach database '/tmp/x.db' as x", "detach database main", "pragma table_info(g)",
				"select * from pragma_table_info('g')", "vacuum", "begin", "commit", "set role postgres",
				"select * from sqlite_master", `select * from "sqlite_master"`, "select * from sqlite_schema",
				"select * from pg_catalog.pg_tables", "select * from pg_class", "select * from information_schema.tables",
				"select * from secret", `select * from "secret"`, "select * from ns2.secret", "select * from main.g",
				"select * from unknown_table", "select * from g, unknown_table", "select * from g join nope on true",
				"select * from (nope)", "select * from g where content_id in nope",
				"select load_extension('x')", "select readfile('/etc/passwd')", "select pg_sleep(10)",
				"select pg_read_file('/etc/passwd')", "select set_config('role', 'postgres', false)",
				"select current_setting('data_directory')", "select query_to_xml('select 1', true, true, '')",
				"select lo_import('/etc/passwd')", "select * from g where a = E'\\' or 1=1 --'",
				"select $$x$$", "select ?", "select :a", "select `a` from g", "select [a] from g",
				"select 'unterminated", `select "unterminated`, "select 1 /* unterminated", "select 1 /* /* */ */",
				"select (1", "select 1)", "values (1)", "table g", "select 1 union table g",
				"explain select 1", "select * from g where a = 'x' union select sql from sqlite_master",
				"select * from json_each((select group_concat(sql) from sqlite_master))",
				"select * from generate_series(1,3) union select * from readfile('x')",
				"select version() from dblink('x', 'y')", "select \x00", "select 'é' from g where a = é",
				"select * from", "select * from g join",
			}
			for _, q := range refused {
				if _, err := s.Query(ctx, "ns1", q); !errors.Is(err, ErrQuery) {
					t.Errorf("%q: err = %v, want ErrQuery", q, err)
				}
			}
			// Nothing ran: the table is intact, and no table was created.
			rows := mustQuery(t, s, "ns1", "select a from g")
			if len(rows) != 1 || rows[0]["a"] != "x" {
				t.Fatalf("table changed by a refused query: %v", rows)
			}
			if sc := schemaByGraph(t, s, "ns1"); len(sc) != 1 {
				t.Fatalf("schemas after refusals: %v", sc)
			}
			expectRefused(t, s, "ns1", "select * from secret", "unknown table")
			expectRefused(t, s, "ns1", "delete from g", "only a SELECT")
			expectRefused(t, s, "ns1", "select 1; select 2", "one statement")
			expectRefused(t, s, "ns1", "select * from sqlite_master", "system")
			// A quoted column named like a keyword is fine.
			if _, err := s.Query(ctx, "ns1", `select a as "delete", 'drop table g' as s from g`); err != nil {
				t.Fatalf("quoted keyword refused: %v", err)
			}
		}},
		{"TooManyRows", func(t *testing.T, s Store, _ func() Store) {
			_, err := s.Query(ctx, "ns1", "with recursive r(i) as (select 1 union all select i + 1 from r where i < 20000) select i from r")
			if !errors.Is(err, ErrQuery) || !strings.Contains(err.Error(), "LIMIT") {
				t.Fatalf("err = %v, want a refusal asking for a LIMIT", err)
			}
			rows, err := s.Query(ctx, "ns1", "with recursive r(i) as (select 1 union all select i + 1 from r where i < 20000) select i from r limit 10000")
			if err != nil || len(rows) != 10000 {
				t.Fatalf("%d rows, %v", len(rows), err)
			}
		}},
		{"TooLarge", func(t *testing.T, s Store, _ func() Store) {
			_, err := s.Query(ctx, "ns1", "with recursive r(i) as (select 1 union all select i + 1 from r where i < 5000) select i, 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' || i as s from r")
			if !errors.Is(err, ErrQuery) || !strings.Contains(err.Error(), "larger than") {
				t.Fatalf("err = %v, want a refusal of a large result", err)
			}
		}},
		{"Concurrent", func(t *testing.T, s Store, _ func() Store) {
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for w := 0; w < 4; w++ {
				wg.Add(2)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < 20; i++ {
						r := Row{ContentID: fmt.Sprintf("c%d", i%5), Policy: fmt.Sprintf("p%d", w), Metadata: map[string]any{fmt.Sprintf("k%d", i%7): i, "w": w}}
						if err := s.Upsert(ctx, "ns1", "g", []Row{r}); err != nil {
							errs <- err
							return
						}
					}
				}(w)
				go func() {
					defer wg.Done()
					for i := 0; i < 20; i++ {
						if _, err := s.Query(ctx, "ns1", "select count(*) from g"); err != nil && !strings.Contains(err.Error(), "unknown table") {
							errs <- err
							return
						}
						if _, err := s.Schemas(ctx, "ns1"); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			rows := mustQuery(t, s, "ns1", "select count(*) as n from g")
			if rows[0]["n"] != int64(20) {
				t.Fatalf("count = %v, want 20 (5 contents x 4 policies)", rows[0]["n"])
			}
		}},
		{"RestartPersistence", func(t *testing.T, s Store, reopen func() Store) {
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c1", Policy: "p", Extractor: "e", Metadata: map[string]any{"title": "kept", "n": 2}})
			s = reopen()
			rows := mustQuery(t, s, "ns1", "select title, n, extractor from g")
			if want := (map[string]any{"title": "kept", "n": int64(2), "extractor": "e"}); len(rows) != 1 || !reflect.DeepEqual(rows[0], want) {
				t.Fatalf("after restart: %v", rows)
			}
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c2", Policy: "p", Metadata: map[string]any{"title": "new", "extra": true}})
			if _, ok := schemaByGraph(t, s, "ns1")["g"].Columns["extra"]; !ok {
				t.Fatal("column added after restart missing")
			}
		}},
		{"BadNames", func(t *testing.T, s Store, _ func() Store) {
			for _, ns := range []string{"", "../x", "a/b", "-x"} {
				if err := s.Upsert(ctx, ns, "g", []Row{{ContentID: "c", Policy: "p"}}); err == nil {
					t.Errorf("namespace %q accepted", ns)
				}
			}
			if err := s.Upsert(ctx, "ns1", "bad name", []Row{{ContentID: "c", Policy: "p"}}); err == nil {
				t.Error("graph with a space accepted")
			}
			// Odd keys map to safe columns; keys that map to nothing or to a
			// fixed column stay in metadata only.
			md := map[string]any{`we"ird; drop`: "a", "content_id": "spoof", "123": "d", strings.Repeat("k", 100): "long", "!!!": "x", "select": "s", "table": "t", "pg_size": 1}
			mustUpsert(t, s, "ns1", "g", Row{ContentID: "c", Policy: "p", Metadata: md})
			cols := schemaByGraph(t, s, "ns1")["g"].Columns
			for _, c := range []string{"we_ird__drop", "_123", strings.Repeat("k", 63)} {
				if _, ok := cols[c]; !ok {
					t.Errorf("column %q missing: %v", c, cols)
				}
			}
			if len(cols) != 4+5 {
				t.Errorf("columns = %v", cols)
			}
			rows := mustQuery(t, s, "ns1", `select content_id, we_ird__drop, "table" from g`)
			if rows[0]["content_id"] != "c" || rows[0]["we_ird__drop"] != "a" || rows[0]["table"] != "t" {
				t.Fatalf("rows = %v", rows)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			if tc.name == "TooLarge" {
				cfg.MaxResultBytes = 100 << 10
			}
			s, reopen := b.open(t, cfg)
			tc.fn(t, s, reopen)
		})
	}
	t.Run("Timeout", func(t *testing.T) {
		s, _ := b.open(t, Config{QueryTimeout: 200 * time.Millisecond})
		q := "with recursive r(i) as (select 1 union all select i + 1 from r) select count(*) from r"
		_, err := s.Query(ctx, "ns1", q)
		if !errors.Is(err, ErrQuery) || !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("err = %v, want a timeout refusal", err)
		}
		// The caller's own cancellation is not a refusal.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Query(cctx, "ns1", "select 1"); errors.Is(err, ErrQuery) || err == nil {
			t.Fatalf("cancelled query: err = %v, want the context error", err)
		}
		// The store still answers afterwards.
		if _, err := s.Query(ctx, "ns1", "select 1"); err != nil {
			t.Fatal(err)
		}
	})
}

func mustUpsert(t *testing.T, s Store, ns, graph string, rows ...Row) {
	t.Helper()
	if err := s.Upsert(context.Background(), ns, graph, rows); err != nil {
		t.Fatal(err)
	}
}

func mustQuery(t *testing.T, s Store, ns, q string) []map[string]any {
	t.Helper()
	rows, err := s.Query(context.Background(), ns, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return rows
}

func expectRefused(t *testing.T, s Store, ns, q, msg string) {
	t.Helper()
	_, err := s.Query(context.Background(), ns, q)
	if !errors.Is(err, ErrQuery) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("%q: err = %v, want ErrQuery mentioning %q", q, err, msg)
	}
}

func schemaByGraph(t *testing.T, s Store, ns string) map[string]Schema {
	t.Helper()
	sc, err := s.Schemas(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Schema{}
	for _, x := range sc {
		if x.Namespace != ns {
			t.Fatalf("schema of namespace %q listed under %q", x.Namespace, ns)
		}
		out[x.Graph] = x
	}
	return out
}
