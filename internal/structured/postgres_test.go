package structured

import (
	"context"
	"errors"
	"testing"

	"github.com/indexify-go/indexify/test/harness"
)

func openPG(t *testing.T, dsn string, cfg Config) *Postgres {
	t.Helper()
	s, err := OpenPostgres(context.Background(), dsn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPostgresConformance(t *testing.T) {
	pg := harness.StartPostgres(t)
	ctx := context.Background()
	db := 0
	runConformance(t, backend{open: func(t *testing.T, cfg Config) (Store, func() Store) {
		// each subtest gets its own database of the one server
		db++
		name := "conf" + string(rune('a'+db%26)) + string(rune('a'+db/26))
		admin := openPG(t, pg.DSN, Config{})
		if _, err := admin.pool.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		admin.Close()
		dsn := "postgres://postgres@127.0.0.1:" + itoa(pg.Port) + "/" + name + "?sslmode=disable"
		cur := Store(openPG(t, dsn, cfg))
		t.Cleanup(func() { cur.Close() })
		return cur, func() Store {
			cur.Close()
			cur = openPG(t, dsn, cfg)
			return cur
		}
	}})
}

func itoa(i int) string {
	b := []byte{}
	for i > 0 || len(b) == 0 {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
	}
	return string(b)
}

// The engine-level guards refuse, on their own, what the lexical check
// refuses: these statements go straight to the read-only transaction under
// the namespace's reader role.
func TestPostgresEngineGuards(t *testing.T) {
	pg := harness.StartPostgres(t)
	ctx := context.Background()
	s := openPG(t, pg.DSN, Config{})
	defer s.Close()
	mustUpsert(t, s, "ns1", "g", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{"a": "x"}})
	mustUpsert(t, s, "ns2", "secret", Row{ContentID: "c1", Policy: "p", Metadata: map[string]any{"a": "s"}})
	g := quoteIdent(physName("g_", "g"))
	other := quoteIdent(s.schema("ns2")) + "." + quoteIdent(physName("g_", "secret"))
	for _, q := range []string{
		"DELETE FROM " + g,
		"INSERT INTO " + g + " (content_id, policy_name, metadata) VALUES ('z','z','{}')",
		"UPDATE " + g + " SET a = 'changed'",
		"DROP TABLE " + g,
		"CREATE TABLE t (a int)",
		"CREATE TEMP TABLE t (a int)",
		"SELECT * FROM _graphs",
		"SELECT * FROM " + other,
		"SELECT 1; SELECT 2",
		"SELECT pg_read_file('/etc/passwd')",
		"SELECT * FROM pg_authid",
		"SELECT pg_reload_conf()",
		"SELECT current_setting('data_directory')",
		"SELECT * FROM pg_stat_file('postgresql.conf')",
		"COPY " + g + " TO '/tmp/x'",
	} {
		if _, err := s.run(ctx, "ns1", q); !errors.Is(err, ErrQuery) {
			t.Errorf("%s: err = %v, want ErrQuery", q, err)
		}
	}
	rows, err := s.run(ctx, "ns1", "SELECT a FROM "+g)
	if err != nil || len(rows) != 1 || rows[0]["a"] != "x" {
		t.Fatalf("table changed: %v %v", rows, err)
	}
}
