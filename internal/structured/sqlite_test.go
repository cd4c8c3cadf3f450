package structured

import "testing"

func TestSQLiteConformance(t *testing.T) {
	runConformance(t, backend{open: func(t *testing.T, cfg Config) (Store, func() Store) {
		dir := t.TempDir()
		s, err := OpenSQLite(dir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cur := Store(s)
		t.Cleanup(func() { cur.Close() })
		return s, func() Store {
			if err := cur.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := OpenSQLite(dir, cfg)
			if err != nil {
				t.Fatal(err)
			}
			cur = s2
			return s2
		}
	}})
}
