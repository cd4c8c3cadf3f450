package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// backend is one Store under the conformance suite, with what the suite
// needs to look behind it.
type backend struct {
	store Store
	// urlFor is the URL Put returns for key.
	urlFor func(key string) string
	// stored lists everything the backend holds, including temporary files
	// and incomplete multipart uploads, so "nothing left behind" is checked
	// at the storage level and not only through Open.
	stored func(t *testing.T) []string
	// foreign are URLs that must be refused with ErrForeignURL.
	foreign []string
}

// backends returns fresh, empty instances of every backend.
func backends(t *testing.T) map[string]func(t *testing.T) backend {
	srv := startTestS3(t)
	return map[string]func(t *testing.T) backend{
		"disk": func(t *testing.T) backend {
			d := newDisk(t)
			return backend{
				store:  d,
				urlFor: func(key string) string { return URLScheme + filepath.Join(d.Dir(), filepath.FromSlash(key)) },
				stored: func(t *testing.T) []string { return files(t, d.Dir()) },
				foreign: []string{
					"file://" + d.Dir() + "/../victim", "file://" + d.Dir(), "file:///etc/passwd",
					"s3://bucket/ns/x", "", "file://" + d.Dir() + "/ns/a\x00b",
				},
			}
		},
		"s3": func(t *testing.T) backend {
			s := newTestS3(t, srv, S3Config{Prefix: "pfx/"})
			return backend{
				store:  s,
				urlFor: s.URLFor,
				stored: func(t *testing.T) []string { return s3Stored(t, s) },
				foreign: []string{
					"s3://other-bucket/pfx/ns/x",              // another bucket
					S3URLScheme + s.Bucket() + "/ns/x",        // outside the prefix
					S3URLScheme + s.Bucket() + "/pfx/../ns/x", // dot segments
					S3URLScheme + s.Bucket() + "/pfx/ns//x",   // empty segment
					S3URLScheme + s.Bucket() + "/pfx/",        // the prefix itself
					S3URLScheme + s.Bucket() + "x/pfx/ns/x",   // bucket name prefix
					"file:///etc/passwd", "", S3URLScheme + s.Bucket(),
				},
			}
		},
	}
}

// TestConformance runs the same behaviour checks against every backend, so
// disk and S3 stay interchangeable.
func TestConformance(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			for _, c := range conformanceCases {
				t.Run(c.name, func(t *testing.T) { c.run(t, mk(t)) })
			}
		})
	}
}

var conformanceCases = []struct {
	name string
	run  func(t *testing.T, b backend)
}{
	{"RoundTripSizes", testRoundTripSizes},
	{"FailedPutLeavesNothing", testFailedPut},
	{"CancelledPutLeavesNothing", testCancelledPut},
	{"InvisibleUntilComplete", testInvisibleUntilComplete},
	{"OverwriteReplacesWhole", testOverwrite},
	{"HostileKeysRefused", testHostileKeys},
	{"ForeignURLsRefused", testForeignURLs},
	{"DeleteIdempotent", testDeleteIdempotent},
	{"ConcurrentPutDelete", testConcurrentPutDelete},
}

// pattern returns n deterministic, non-repeating-looking bytes.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i/251) ^ seed
	}
	return b
}

func readAll(t *testing.T, s Store, url string) []byte {
	t.Helper()
	rc, err := s.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return b
}

func testRoundTripSizes(t *testing.T, b backend) {
	ctx := context.Background()
	// Around the single-PUT limit and past one multipart part.
	sizes := []int{0, 1, smallPutLimit, smallPutLimit + 1, 2*MinS3PartSize + 3}
	for i, n := range sizes {
		data := pattern(n, byte(i))
		key := fmt.Sprintf("ns/c%d/blob", i)
		info, err := b.store.Put(ctx, key, bytes.NewReader(data))
		if err != nil {
			t.Fatalf("put %d bytes: %v", n, err)
		}
		sum := sha256.Sum256(data)
		if info.Size != int64(n) || info.SHA256 != hex.EncodeToString(sum[:]) || info.URL != b.urlFor(key) {
			t.Fatalf("put %d bytes: info %+v, want size %d sha %x url %s", n, info, n, sum, b.urlFor(key))
		}
		if got := readAll(t, b.store, info.URL); !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes, want %d identical", len(got), n)
		}
	}
	if got := b.stored(t); len(got) != len(sizes) {
		t.Fatalf("stored %v, want exactly %d blobs", got, len(sizes))
	}
}

func testFailedPut(t *testing.T, b backend) {
	// Failing before the first part, and after two parts were uploaded.
	for _, n := range []int{70_000, 2*MinS3PartSize + 1} {
		key := fmt.Sprintf("ns/failed/%d", n)
		_, err := b.store.Put(context.Background(), key, &failingReader{n: n})
		if !errors.Is(err, errBoom) {
			t.Fatalf("after %d bytes: err = %v, want the reader's error wrapped", n, err)
		}
		if _, err := b.store.Open(context.Background(), b.urlFor(key)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("open after failed put: %v, want ErrNotFound", err)
		}
	}
	if got := b.stored(t); len(got) != 0 {
		t.Fatalf("failed puts left %v", got)
	}
}

// cancelAfter cancels ctx once n bytes were read, then keeps serving data.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.cancel()
	}
	n := len(p)
	c.n -= n
	return n, nil
}

func testCancelledPut(t *testing.T, b backend) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.store.Put(ctx, "ns/c/pre", strings.NewReader("data")); !errors.Is(err, context.Canceled) {
		t.Fatalf("pre-cancelled: err = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	if _, err := b.store.Put(ctx, "ns/c/mid", &cancelAfter{n: MinS3PartSize + smallPutLimit, cancel: cancel}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled mid-stream: err = %v, want context.Canceled", err)
	}
	if got := b.stored(t); len(got) != 0 {
		t.Fatalf("cancelled puts left %v", got)
	}
}

func testInvisibleUntilComplete(t *testing.T, b backend) {
	pr, pw := io.Pipe()
	key := "ns/c/streaming"
	done := make(chan error, 1)
	var info Info
	go func() {
		var err error
		info, err = b.store.Put(context.Background(), key, pr)
		done <- err
	}()
	first := pattern(MinS3PartSize+smallPutLimit+10, 1)
	if _, err := pw.Write(first); err != nil { // returns once Put consumed it all
		t.Fatal(err)
	}
	if _, err := b.store.Open(context.Background(), b.urlFor(key)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("half-written blob visible: err = %v, want ErrNotFound", err)
	}
	rest := pattern(1000, 2)
	pw.Write(rest)
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, b.store, info.URL); !bytes.Equal(got, append(first, rest...)) {
		t.Fatalf("read back %d bytes, want %d", len(got), len(first)+len(rest))
	}
}

func testOverwrite(t *testing.T, b backend) {
	ctx := context.Background()
	big := pattern(smallPutLimit+5, 3)
	if _, err := b.store.Put(ctx, "ns/c/x", bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	// A retried write under the same key replaces the blob whole, never
	// mixing old and new bytes.
	info, err := b.store.Put(ctx, "ns/c/x", strings.NewReader("short"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, b.store, info.URL); string(got) != "short" {
		t.Fatalf("after overwrite read %d bytes, want \"short\"", len(got))
	}
	if got := b.stored(t); len(got) != 1 {
		t.Fatalf("stored %v, want one blob", got)
	}
}

func testHostileKeys(t *testing.T, b backend) {
	keys := []string{"", "..", "../escaped", "ns/../../escaped", "ns/./x", "/etc/passwd", "ns//x", "ns/x/",
		"ns\\..\\escaped", "ns/x\x00y", "ns/x\ny", "ns/\xff", strings.Repeat("a", 1025)}
	for _, k := range keys {
		if _, err := b.store.Put(context.Background(), k, strings.NewReader("x")); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Put(%q) err = %v, want ErrInvalidKey", k, err)
		}
	}
	if got := b.stored(t); len(got) != 0 {
		t.Fatalf("hostile keys stored %v", got)
	}
}

func testForeignURLs(t *testing.T, b backend) {
	ctx := context.Background()
	for _, u := range b.foreign {
		if _, err := b.store.Open(ctx, u); !errors.Is(err, ErrForeignURL) {
			t.Errorf("Open(%q) err = %v, want ErrForeignURL", u, err)
		}
		if err := b.store.Delete(ctx, u); !errors.Is(err, ErrForeignURL) {
			t.Errorf("Delete(%q) err = %v, want ErrForeignURL", u, err)
		}
	}
}

func testDeleteIdempotent(t *testing.T, b backend) {
	ctx := context.Background()
	a, err := b.store.Put(ctx, "ns/c1/a", strings.NewReader("a"))
	if err != nil {
		t.Fatal(err)
	}
	keep, err := b.store.Put(ctx, "ns/c1/b", strings.NewReader("b"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := b.store.Delete(ctx, a.URL); err != nil {
			t.Fatalf("delete #%d: %v", i+1, err)
		}
	}
	if _, err := b.store.Open(ctx, a.URL); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open deleted: %v, want ErrNotFound", err)
	}
	if err := b.store.Delete(ctx, b.urlFor("never/existed")); err != nil {
		t.Fatalf("delete of a never-existing blob: %v", err)
	}
	if got := readAll(t, b.store, keep.URL); string(got) != "b" {
		t.Fatalf("sibling blob changed: %q", got)
	}
	if got := b.stored(t); len(got) != 1 {
		t.Fatalf("stored %v, want only the sibling", got)
	}
}

// Each worker keeps an anchor blob in its directory while it puts and
// deletes: versitygw's posix backend (the test S3 server) prunes empty
// parent directories on DELETE and fails a PUT racing that prune with
// "Existing Object is a directory", a race real S3 (flat key space) cannot
// have. The disk backend's pruning race has its own test with shared
// directories (TestConcurrentPutDelete).
func testConcurrentPutDelete(t *testing.T, b backend) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 80)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			anchor, err := b.store.Put(ctx, fmt.Sprintf("ns/w%d/anchor", w), strings.NewReader("a"))
			if err != nil {
				errs <- err
				return
			}
			defer func() {
				if err := b.store.Delete(ctx, anchor.URL); err != nil {
					errs <- err
				}
			}()
			for i := range 10 {
				info, err := b.store.Put(ctx, fmt.Sprintf("ns/w%d/%d", w, i), strings.NewReader("x"))
				if err == nil {
					err = b.store.Delete(ctx, info.URL)
				}
				if err != nil {
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
	if got := b.stored(t); len(got) != 0 {
		t.Fatalf("left %v", got)
	}
}
