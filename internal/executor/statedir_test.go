package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPersistentID (issue 16): the first call chooses and stores an id,
// later calls over the same file return it; another file gets another id;
// an empty file gets a fresh id instead of an empty one.
func TestPersistentID(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "executor-id")
	a, err := persistentID(p)
	if err != nil || a == "" {
		t.Fatalf("first persistentID = %q, %v", a, err)
	}
	if b, err := persistentID(p); err != nil || b != a {
		t.Fatalf("second persistentID = %q, %v; want %q", b, err, a)
	}
	if c, err := persistentID(filepath.Join(dir, "other")); err != nil || c == a {
		t.Fatalf("another file's id = %q, %v; want one different from %q", c, err, a)
	}
	os.WriteFile(p, []byte("\n"), 0o644)
	if d, err := persistentID(p); err != nil || d == "" || d == a {
		t.Fatalf("id from an empty file = %q, %v", d, err)
	}
	if _, err := persistentID(filepath.Join(dir, "executor-id", "x")); err == nil {
		t.Fatal("a path below a regular file gave no error")
	}
}

// TestStateDir (issue 16): a state directory gives the same id after it is
// closed and opened again (an executor restart), and refuses a second
// opener while it is held, so two executors never share an id through it.
func TestStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	a, err := OpenStateDir(dir)
	if err != nil || a.ID == "" {
		t.Fatalf("OpenStateDir = %+v, %v", a, err)
	}
	if b, err := OpenStateDir(dir); err == nil {
		b.Close()
		t.Fatal("a second OpenStateDir of a held directory succeeded")
	} else if !strings.Contains(err.Error(), "in use by another executor") {
		t.Fatalf("second OpenStateDir: %v", err)
	}
	a.Close()
	b, err := OpenStateDir(dir)
	if err != nil || b.ID != a.ID {
		t.Fatalf("reopened state dir: %+v, %v; want id %q", b, err, a.ID)
	}
	b.Close()
	other, err := OpenStateDir(filepath.Join(t.TempDir(), "other"))
	if err != nil || other.ID == a.ID {
		t.Fatalf("another state dir: %+v, %v", other, err)
	}
	other.Close()
}
