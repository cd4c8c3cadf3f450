package structured

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

// FuzzSQLiteQueryNeverWrites runs whatever the checker approves on a real
// SQLite store: the data and the schema never change, and every error is a
// refusal (ErrQuery), never anything else.
func FuzzSQLiteQueryNeverWrites(f *testing.F) {
	for _, s := range []string{
		"select * from g", "select count(*) from g, docs", "with x as (select a from g) select * from x",
		"select * from g where a in (select content_id from docs)", "select json_extract(metadata, '$.a') from g",
		"select * from json_each((select metadata from g))", "select 1; --", "select * from sqlite_master",
		"select a from g union select b from docs", "select * from g natural join docs",
	} {
		f.Add(s)
	}
	s, err := OpenSQLite(f.TempDir(), Config{QueryTimeout: 2 * time.Second, MaxRows: 1000})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Upsert(ctx, "ns", "g", []Row{{ContentID: "c1", Policy: "p", Metadata: map[string]any{"a": "x", "n": 1}}}); err != nil {
		f.Fatal(err)
	}
	if err := s.Upsert(ctx, "ns", "docs", []Row{{ContentID: "c1", Policy: "p", Metadata: map[string]any{"b": "y"}}}); err != nil {
		f.Fatal(err)
	}
	snapshot := func(tb testing.TB) any {
		sc, err := s.Schemas(ctx, "ns")
		if err != nil {
			tb.Fatal(err)
		}
		rows, err := s.Rows(ctx, "ns", "c1")
		if err != nil {
			tb.Fatal(err)
		}
		return []any{sc, rows}
	}
	before := snapshot(f)
	f.Fuzz(func(t *testing.T, q string) {
		if _, err := s.Query(ctx, "ns", q); err != nil && !errors.Is(err, ErrQuery) {
			t.Fatalf("%q: error %v is not a refusal", q, err)
		}
		if after := snapshot(t); !reflect.DeepEqual(before, after) {
			t.Fatalf("%q changed the store: %v -> %v", q, before, after)
		}
	})
}
