package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func newDisk(t *testing.T) *Disk {
	t.Helper()
	d, err := NewDisk(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// files lists every non-directory entry below dir (temp files included).
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPutOpenRoundTrip(t *testing.T) {
	d := newDisk(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("indexify "), 100_000)
	info, err := d.Put(ctx, "default/abc123/v1", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if info.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("sha256 = %s, want %x", info.SHA256, sum)
	}
	if info.Size != int64(len(data)) {
		t.Errorf("size = %d, want %d", info.Size, len(data))
	}
	want := "file://" + filepath.Join(d.Dir(), "default", "abc123", "v1")
	if info.URL != want {
		t.Errorf("url = %q, want %q", info.URL, want)
	}
	rc, err := d.Open(ctx, info.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (err %v), want %d", len(got), err, len(data))
	}
	if fs := files(t, d.Dir()); len(fs) != 1 {
		t.Errorf("files after put = %v, want exactly the blob (no temp files)", fs)
	}
}

func TestEmptyBlob(t *testing.T) {
	d := newDisk(t)
	info, err := d.Put(context.Background(), "ns/empty", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != 0 || info.SHA256 != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("info = %+v", info)
	}
}

type failingReader struct{ n int }

var errBoom = errors.New("boom")

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errBoom
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

func TestFailedPutLeavesNothing(t *testing.T) {
	d := newDisk(t)
	_, err := d.Put(context.Background(), "ns/id/blob", &failingReader{n: 70_000})
	if !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want the reader's error wrapped", err)
	}
	if fs := files(t, d.Dir()); len(fs) != 0 {
		t.Errorf("files after failed put = %v", fs)
	}
}

func TestCancelledPutLeavesNothing(t *testing.T) {
	d := newDisk(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := d.Put(ctx, "ns/id/blob", strings.NewReader("data"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if fs := files(t, d.Dir()); len(fs) != 0 {
		t.Errorf("files after cancelled put = %v", fs)
	}
}

func TestPutRejectsHostileKeys(t *testing.T) {
	d := newDisk(t)
	outside := filepath.Join(filepath.Dir(d.Dir()), "escaped")
	keys := []string{
		"",
		"..",
		"../escaped",
		"ns/../../escaped",
		"ns/./x",
		"/etc/passwd",
		outside,
		"ns//x",
		"ns/x/",
		"ns\\..\\..\\escaped",
		"ns/x\x00y",
		"ns/x\ny",
		"ns/\xff",
		strings.Repeat("a", 1025),
	}
	for _, k := range keys {
		_, err := d.Put(context.Background(), k, strings.NewReader("x"))
		if !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Put(%q) err = %v, want ErrInvalidKey", k, err)
		}
	}
	if _, err := os.Stat(outside); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file escaped the store: %v", err)
	}
	if fs := files(t, filepath.Dir(d.Dir())); len(fs) != 0 {
		t.Errorf("files written: %v", fs)
	}
}

func TestOpenAndDeleteRefuseForeignURLs(t *testing.T) {
	d := newDisk(t)
	ctx := context.Background()
	victim := filepath.Join(filepath.Dir(d.Dir()), "victim")
	if err := os.WriteFile(victim, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	urls := []string{
		"file://" + victim,
		"file://" + d.Dir() + "/../victim",
		"file://" + d.Dir() + "/ns/../../victim",
		"file://" + d.Dir(),
		"file://" + d.Dir() + "/",
		"file://" + d.Dir() + "x/victim", // sibling directory sharing a prefix
		"file://victim",
		"http://example.com/" + victim,
		victim,
		"file://" + d.Dir() + "/ns/a\x00b",
		"",
	}
	for _, u := range urls {
		if _, err := d.Open(ctx, u); !errors.Is(err, ErrForeignURL) {
			t.Errorf("Open(%q) err = %v, want ErrForeignURL", u, err)
		}
		if err := d.Delete(ctx, u); !errors.Is(err, ErrForeignURL) {
			t.Errorf("Delete(%q) err = %v, want ErrForeignURL", u, err)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "secret" {
		t.Fatalf("victim file changed: %q %v", b, err)
	}
}

// A symlink planted inside the store must not let Open or Delete reach the
// file it points to.
func TestSymlinkInsideStoreCannotEscape(t *testing.T) {
	d := newDisk(t)
	ctx := context.Background()
	victim := filepath.Join(filepath.Dir(d.Dir()), "victim")
	if err := os.WriteFile(victim, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d.Dir(), "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(d.Dir()), filepath.Join(d.Dir(), "ns", "link")); err != nil {
		t.Fatal(err)
	}
	u := "file://" + filepath.Join(d.Dir(), "ns", "link", "victim")
	if rc, err := d.Open(ctx, u); err == nil {
		rc.Close()
		t.Fatalf("Open through symlink succeeded")
	}
	d.Delete(ctx, u)
	if b, err := os.ReadFile(victim); err != nil || string(b) != "secret" {
		t.Fatalf("victim file changed: %q %v", b, err)
	}
	// Writing through the symlinked directory must fail as well.
	if _, err := d.Put(ctx, "ns/link/written", strings.NewReader("x")); err == nil {
		t.Fatalf("Put through symlink succeeded")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(d.Dir()), "written")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Put wrote through symlink: %v", err)
	}
}

func TestDeleteIsIdempotentAndPrunesDirs(t *testing.T) {
	d := newDisk(t)
	ctx := context.Background()
	a, err := d.Put(ctx, "ns/c1/a", strings.NewReader("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Put(ctx, "ns/c2/b", strings.NewReader("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, a.URL); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, a.URL); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := d.Open(ctx, a.URL); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open deleted blob err = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(filepath.Join(d.Dir(), "ns", "c1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("empty content directory kept: %v", err)
	}
	// The sibling blob and the shared namespace directory survive.
	rc, err := d.Open(ctx, b.URL)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if err := d.Delete(ctx, b.URL); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(d.Dir())
	if err != nil || len(entries) != 0 {
		t.Errorf("store dir not empty after deleting everything: %v %v", entries, err)
	}
	// Deleting a blob whose directory never existed is fine too.
	if err := d.Delete(ctx, "file://"+filepath.Join(d.Dir(), "nope", "x")); err != nil {
		t.Errorf("delete of never-existing blob: %v", err)
	}
}

func TestDeleteRefusesDirectories(t *testing.T) {
	d := newDisk(t)
	ctx := context.Background()
	if _, err := d.Put(ctx, "ns/c1/a", strings.NewReader("a")); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, "file://"+filepath.Join(d.Dir(), "ns")); err == nil {
		t.Fatal("deleting a directory succeeded")
	}
}

// Concurrent puts and deletes in the same directories must not fail each
// other (Delete prunes directories that Put is about to use).
func TestConcurrentPutDelete(t *testing.T) {
	d := newDisk(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				info, err := d.Put(ctx, fmt.Sprintf("ns/shared/%d-%d", w, i), strings.NewReader("x"))
				if err != nil {
					errs <- err
					return
				}
				if err := d.Delete(ctx, info.URL); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if fs := files(t, d.Dir()); len(fs) != 0 {
		t.Errorf("files left: %v", fs)
	}
}

func TestReopenSameDirKeepsURLsValid(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "blobs")
	d1, err := NewDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	info, err := d1.Put(context.Background(), "ns/c/a", strings.NewReader("hello"))
	d1.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Through a symlinked path: URLs are canonical, so they still resolve.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	d2, err := NewDisk(link)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	rc, err := d2.Open(context.Background(), info.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" {
		t.Errorf("read %q", b)
	}
}
