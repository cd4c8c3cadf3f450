package structured

import (
	"context"
	"fmt"
	"testing"

	"github.com/indexify-go/indexify/test/harness"
)

func benchStores(b *testing.B, fn func(b *testing.B, s Store)) {
	b.Run("sqlite", func(b *testing.B) {
		s, err := OpenSQLite(b.TempDir(), Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ResetTimer()
		fn(b, s)
	})
	b.Run("postgres", func(b *testing.B) {
		pg := harness.StartPostgres(b)
		s, err := OpenPostgres(context.Background(), pg.DSN, Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ResetTimer()
		fn(b, s)
	})
}

// BenchmarkUpsert100: one batch of 100 rows with 5 keys each.
func BenchmarkUpsert100(b *testing.B) {
	benchStores(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		rows := make([]Row, 100)
		for i := 0; i < b.N; i++ {
			for j := range rows {
				rows[j] = Row{ContentID: fmt.Sprintf("c%d-%d", i, j), Policy: "p", Metadata: map[string]any{"title": "t", "page": j, "score": 0.5, "ok": true, "tags": []any{"a"}}}
			}
			if err := s.Upsert(ctx, "ns", "g", rows); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkQuery: a filtered count over 10,000 rows.
func BenchmarkQuery(b *testing.B) {
	benchStores(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		rows := make([]Row, 1000)
		for k := 0; k < 10; k++ {
			for j := range rows {
				rows[j] = Row{ContentID: fmt.Sprintf("c%d-%d", k, j), Policy: "p", Metadata: map[string]any{"page": j, "kind": fmt.Sprint(j % 7)}}
			}
			if err := s.Upsert(ctx, "ns", "g", rows); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			out, err := s.Query(ctx, "ns", "select kind, count(*) as n from g where page > 100 group by kind")
			if err != nil || len(out) != 7 {
				b.Fatal(out, err)
			}
		}
	})
}
