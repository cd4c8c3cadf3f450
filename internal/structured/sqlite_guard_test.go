package structured

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/indexify-go/indexify/internal/dirlock"
)

// The engine-level guards of the SQLite store refuse what the lexical check
// refuses, on their own: these statements go straight to the read-only,
// authorized connection.
func TestSQLiteEngineGuards(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenSQLite(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustUpsert(t, s, "ns1", "g", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{"a": "x"}})
	mustUpsert(t, s, "ns1", "h", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{"b": "y"}})
	n, err := s.namespace("ns1", false)
	if err != nil {
		t.Fatal(err)
	}
	g := quoteIdent(n.graphs["g"])
	h := quoteIdent(n.graphs["h"])
	outside := filepath.Join(t.TempDir(), "x.db")
	for _, q := range []string{
		"DELETE FROM " + g,
		"INSERT INTO " + g + " (content_id, policy_name, metadata) VALUES ('z','z','{}')",
		"UPDATE " + g + " SET a = 'changed'",
		"DROP TABLE " + g,
		"CREATE TABLE t (a)",
		"CREATE TEMP TABLE t (a)",
		"ATTACH DATABASE '" + outside + "' AS x",
		"PRAGMA query_only = 0",
		"PRAGMA writable_schema = 1",
		"SELECT * FROM sqlite_master",
		"SELECT * FROM _graphs",
		"SELECT * FROM _columns",
		"SELECT * FROM " + h, // a graph the (checked) query did not name
		"SELECT load_extension('x')",
		"BEGIN",
		"VACUUM INTO '" + outside + "'",
		"SELECT zeroblob(1000000000)",
	} {
		_, err := s.run(ctx, n, n.graphs, checkedQuery{SQL: q, Tables: []string{"g"}})
		if !errors.Is(err, ErrQuery) {
			t.Errorf("%s: err = %v, want ErrQuery", q, err)
		}
	}
	if _, err := os.Stat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused statement created %s", outside)
	}
	rows, err := s.run(ctx, n, n.graphs, checkedQuery{SQL: "SELECT a FROM " + g, Tables: []string{"g"}})
	if err != nil || len(rows) != 1 || rows[0]["a"] != "x" {
		t.Fatalf("table changed: %v %v", rows, err)
	}
}

// One process at a time per directory: a second open is refused with
// dirlock.ErrHeld until the first closes (SQLite's own file locking would
// let both in and interleave their schema changes).
func TestSQLiteDirectoryHasOneOpener(t *testing.T) {
	dir := t.TempDir()
	first, err := OpenSQLite(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSQLite(dir, Config{}); !errors.Is(err, dirlock.ErrHeld) {
		t.Fatalf("second open: %v, want dirlock.ErrHeld", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := OpenSQLite(dir, Config{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	again.Close()
}
