package blob

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzStore is a store in parent/blobs next to a sentinel file parent/outside.
// One store serves a whole fuzz run (a fresh one per input is too slow).
func fuzzStore(t testing.TB) (d *Disk, parent, sentinel string) {
	parent = t.TempDir()
	sentinel = filepath.Join(parent, "outside")
	if err := os.WriteFile(sentinel, []byte("must survive"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := NewDisk(filepath.Join(parent, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, parent, sentinel
}

func inside(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && filepath.IsLocal(rel)
}

// assertParentUntouched: nothing but the store and the sentinel exists in
// the parent, and the sentinel is intact.
func assertParentUntouched(t testing.TB, parent, sentinel string) {
	t.Helper()
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"blobs", "outside"}) {
		t.Fatalf("something was created next to the store: %v", names)
	}
	if b, err := os.ReadFile(sentinel); err != nil || string(b) != "must survive" {
		t.Fatalf("sentinel outside the store changed: %q %v", b, err)
	}
}

// FuzzContentKeyStaysInside: the API builds blob keys as
// namespace/content-id/random. Whatever the ids, a key that validates is
// written strictly inside the store, and its URL maps back to it.
func FuzzContentKeyStaysInside(f *testing.F) {
	for _, s := range [][2]string{
		{"default", "abc123"}, {"..", "x"}, {"ns", "../../outside"}, {"ns", "a/../../b"},
		{"/abs", "x"}, {"ns", "..\\..\\x"}, {"ns", "a\x00b"}, {".", "."}, {"ns", "ü/é"}, {"", ""},
	} {
		f.Add(s[0], s[1])
	}
	d, parent, sentinel := fuzzStore(f)
	f.Fuzz(func(t *testing.T, ns, id string) {
		key := ns + "/" + id + "/0123abcd"
		if ValidateKey(key) != nil {
			if _, err := d.Put(context.Background(), key, strings.NewReader("x")); err == nil {
				t.Fatalf("Put accepted invalid key %q", key)
			}
			assertParentUntouched(t, parent, sentinel)
			return
		}
		info, err := d.Put(context.Background(), key, strings.NewReader("data"))
		if err != nil {
			// Names the filesystem refuses (too long) are errors, not escapes.
			assertParentUntouched(t, parent, sentinel)
			return
		}
		p := strings.TrimPrefix(info.URL, URLScheme)
		if !inside(d.Dir(), p) {
			t.Fatalf("key %q stored at %s, outside %s", key, p, d.Dir())
		}
		if rel, err := d.relPath(info.URL); err != nil || filepath.Join(d.Dir(), rel) != p {
			t.Fatalf("URL %s does not map back: %q %v", info.URL, rel, err)
		}
		assertParentUntouched(t, parent, sentinel)
	})
}

// FuzzURLStaysInside: Open and Delete of any URL ("{dir}" stands for the
// store's directory) never reach a file outside the store.
func FuzzURLStaysInside(f *testing.F) {
	for _, s := range []string{
		"file://{dir}/ns/id/blob", "file://{dir}/../outside", "file://{dir}/ns/../../outside",
		"file://{dir}", "file://{dir}/", "file://{dir}//ns", "file:///etc/passwd", "{dir}/x",
		"file://{dir}/./x", "file://{dir}/ns/id/blob\x00", "file://{dir}s/x", "s3://bucket/x",
	} {
		f.Add(s)
	}
	d, parent, sentinel := fuzzStore(f)
	f.Fuzz(func(t *testing.T, raw string) {
		// A blob inside, (re)created each time: Delete may remove it.
		if err := os.MkdirAll(filepath.Join(d.Dir(), "ns", "id"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.Dir(), "ns", "id", "blob"), []byte("in"), 0o644); err != nil {
			t.Fatal(err)
		}
		u := strings.ReplaceAll(raw, "{dir}", d.Dir())
		if rel, err := d.relPath(u); err == nil && !inside(d.Dir(), filepath.Join(d.Dir(), rel)) {
			t.Fatalf("URL %q maps to %q outside the store", u, rel)
		}
		if rc, err := d.Open(context.Background(), u); err == nil {
			b := make([]byte, 64)
			n, _ := rc.Read(b)
			rc.Close()
			if string(b[:n]) == "must survive" {
				t.Fatalf("URL %q opened the file outside the store", u)
			}
		}
		_ = d.Delete(context.Background(), u)
		assertParentUntouched(t, parent, sentinel)
	})
}
