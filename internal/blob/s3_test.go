package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// genReader produces n pseudo-random-looking bytes without holding them,
// hashing them as it goes, and samples the heap every few MiB.
type genReader struct {
	left, off int64
	h         interface{ Write([]byte) (int, error) }
	sampleAt  int64
	peakHeap  uint64
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	n = min(n, g.left)
	for i := range p[:n] {
		x := g.off + int64(i)
		p[i] = byte(x*31 + x>>9)
	}
	g.h.Write(p[:n])
	g.off += n
	g.left -= n
	if g.off >= g.sampleAt {
		g.sampleAt += 2 << 20
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		g.peakHeap = max(g.peakHeap, ms.HeapInuse)
	}
	return int(n), nil
}

// A 64 MiB upload streams through a bounded buffer: the heap in use while
// it runs never grows by more than a few parts, so memory stays flat
// whatever the blob's size. The download streams the same way.
func TestS3StreamingMemoryIsFlat(t *testing.T) {
	srv := startTestS3(t)
	s := newTestS3(t, srv, S3Config{PartSize: MinS3PartSize})
	const size = 64 << 20
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse

	want := sha256.New()
	g := &genReader{left: size, h: want}
	info, err := s.Put(context.Background(), "ns/big/blob", g)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != size || info.SHA256 != hex.EncodeToString(want.Sum(nil)) {
		t.Fatalf("info %+v", info)
	}
	growth := int64(g.peakHeap) - int64(base)
	// One 5 MiB part buffer, the 1 MiB head, HTTP buffers and garbage not
	// yet collected; a buffered upload would need 64 MiB.
	const limit = 32 << 20
	t.Logf("heap growth during a %d MiB upload: %.1f MiB (limit %d MiB)", size>>20, float64(growth)/(1<<20), limit>>20)
	if growth > limit {
		t.Fatalf("heap grew by %d bytes during the upload, want < %d", growth, limit)
	}

	rc, err := s.Open(context.Background(), info.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := sha256.New()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base = ms.HeapInuse
	peak := uint64(0)
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := rc.Read(buf)
		got.Write(buf[:k])
		n += int64(k)
		if n%(4<<20) < int64(k) {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n != size || hex.EncodeToString(got.Sum(nil)) != info.SHA256 {
		t.Fatalf("downloaded %d bytes with another hash", n)
	}
	if growth := int64(peak) - int64(base); growth > limit {
		t.Fatalf("heap grew by %d bytes during the download, want < %d", growth, limit)
	}
}

// faultProxy forwards to the S3 server but answers the first `fail`
// requests (of the given methods) with 503 SlowDown, or holds them until
// the client gives up when hang is set.
type faultProxy struct {
	target   *url.URL
	methods  string
	fail     atomic.Int64
	hang     atomic.Bool
	seen     atomic.Int64
	upstream http.Handler
}

func newFaultProxy(t *testing.T, srv *harness.S3Server, methods string) (*faultProxy, string) {
	u, _ := url.Parse(srv.Endpoint())
	p := &faultProxy{target: u, methods: methods, upstream: httputil.NewSingleHostReverseProxy(u)}
	hs := &http.Server{Handler: p}
	l := listenLoopback(t)
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return p, "http://" + l.Addr().String()
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.Contains(p.methods, r.Method) {
		p.seen.Add(1)
		if p.hang.Load() {
			<-r.Context().Done() // the client's timeout ends the request
			return
		}
		if p.fail.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
			return
		}
	}
	p.upstream.ServeHTTP(w, r)
}

// Idempotent requests are retried with backoff: two 503s in a row are
// absorbed; a service that keeps failing yields ErrUnavailable after the
// configured attempts.
func TestS3RetriesIdempotentOperations(t *testing.T) {
	srv := startTestS3(t)
	direct := newTestS3(t, srv, S3Config{})
	proxy, ep := newFaultProxy(t, srv, "GET DELETE")
	s := newTestS3(t, srv, S3Config{Bucket: direct.Bucket(), Endpoint: ep, MaxRetries: 3})
	info, err := s.Put(context.Background(), "ns/c/x", strings.NewReader("retry me"))
	if err != nil {
		t.Fatal(err)
	}

	proxy.seen.Store(0)
	proxy.fail.Store(2)
	if got := readAll(t, s, info.URL); string(got) != "retry me" {
		t.Fatalf("read %q", got)
	}
	if n := proxy.seen.Load(); n != 3 {
		t.Fatalf("GET attempts = %d, want 3 (two 503s, then success)", n)
	}

	proxy.seen.Store(0)
	proxy.fail.Store(1 << 30)
	if _, err := s.Open(context.Background(), info.URL); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("open against a failing service: %v, want ErrUnavailable", err)
	}
	if err := s.Delete(context.Background(), info.URL); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("delete against a failing service: %v, want ErrUnavailable", err)
	}
	if n := proxy.seen.Load(); n != 6 {
		t.Fatalf("attempts = %d, want 3 per operation", n)
	}
	// Once the service recovers, the delete goes through.
	proxy.fail.Store(0)
	if err := s.Delete(context.Background(), info.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Open(context.Background(), info.URL); !errors.Is(err, ErrNotFound) {
		t.Fatalf("blob still there: %v", err)
	}
}

// A service that accepts connections but never answers fails within the
// configured timeout, as ErrUnavailable, for reads and writes.
func TestS3SlowServiceIsUnavailable(t *testing.T) {
	srv := startTestS3(t)
	direct := newTestS3(t, srv, S3Config{})
	proxy, ep := newFaultProxy(t, srv, "GET PUT POST DELETE")
	s := newTestS3(t, srv, S3Config{Bucket: direct.Bucket(), Endpoint: ep, MaxRetries: 2, Timeout: 500 * time.Millisecond})
	info, err := direct.Put(context.Background(), "ns/c/x", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	proxy.hang.Store(true)
	if _, err := s.Open(context.Background(), info.URL); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("open: %v, want ErrUnavailable", err)
	}
	if _, err := s.Put(context.Background(), "ns/c/y", strings.NewReader("y")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("put: %v, want ErrUnavailable", err)
	}
	if err := s.Delete(context.Background(), info.URL); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("delete: %v, want ErrUnavailable", err)
	}
	if got := s3Stored(t, direct); len(got) != 1 {
		t.Fatalf("stored %v, want only the first blob", got)
	}
}

// With the server down every operation reports ErrUnavailable (never a
// generic error, never a hang); after a restart the same store works.
func TestS3Outage(t *testing.T) {
	srv := startTestS3(t)
	s := newTestS3(t, srv, S3Config{MaxRetries: 2, Timeout: 2 * time.Second})
	info, err := s.Put(context.Background(), "ns/c/x", strings.NewReader("before"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := s.Put(context.Background(), "ns/c/y", strings.NewReader("during")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("put: %v, want ErrUnavailable", err)
	}
	if _, err := s.Put(context.Background(), "ns/c/big", &genReader{left: 3 * MinS3PartSize, h: sha256.New(), sampleAt: 1 << 62}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("multipart put: %v, want ErrUnavailable", err)
	}
	if _, err := s.Open(context.Background(), info.URL); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("open: %v, want ErrUnavailable", err)
	}
	if err := s.Delete(context.Background(), info.URL); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("delete: %v, want ErrUnavailable", err)
	}
	srv.Start()
	if got := readAll(t, s, info.URL); string(got) != "before" {
		t.Fatalf("after restart read %q", got)
	}
	if _, err := s.Put(context.Background(), "ns/c/y", strings.NewReader("after")); err != nil {
		t.Fatalf("put after restart: %v", err)
	}
	if got := s3Stored(t, s); len(got) != 2 {
		t.Fatalf("stored %v, want the two successful blobs", got)
	}
}

func TestS3Credentials(t *testing.T) {
	srv := startTestS3(t)
	bucket := newTestS3(t, srv, S3Config{}).Bucket()
	base := S3Config{Bucket: bucket, Endpoint: srv.Endpoint(), PathStyle: true}

	t.Run("file", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		noCredFiles(t)
		cfg := base
		cfg.CredentialsFile = srv.CredentialsFile()
		s, err := NewS3(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(context.Background(), "ns/c/file", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("none", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		noCredFiles(t)
		_, err := NewS3(context.Background(), base)
		if err == nil || !strings.Contains(err.Error(), "no S3 credentials") {
			t.Fatalf("err = %v, want a clear 'no S3 credentials' error", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		noCredFiles(t)
		cfg := base
		cfg.CredentialsFile = filepath.Join(t.TempDir(), "nope")
		if _, err := NewS3(context.Background(), cfg); err == nil {
			t.Fatal("a missing credentials file was accepted")
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", harness.S3AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
		noCredFiles(t)
		_, err := NewS3(context.Background(), base)
		if err == nil || errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v, want a credentials error that is not ErrUnavailable", err)
		}
	})
}

func TestS3BucketChecks(t *testing.T) {
	srv := startTestS3(t)
	testCreds(t)
	cfg := S3Config{Bucket: "not-there", Endpoint: srv.Endpoint(), PathStyle: true}
	if _, err := NewS3(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing bucket: err = %v", err)
	}
	for _, bad := range []S3Config{
		{Bucket: "Bad_Bucket", Endpoint: srv.Endpoint()},
		{Bucket: "ok-bucket", Endpoint: srv.Endpoint(), Prefix: "/abs/"},
		{Bucket: "ok-bucket", Endpoint: srv.Endpoint(), Prefix: "no-slash"},
		{Bucket: "ok-bucket", Endpoint: srv.Endpoint(), Prefix: "a/../"},
		{Bucket: "ok-bucket", Endpoint: "ftp://x"},
		{Bucket: "ok-bucket", Endpoint: "http://x/path"},
		{Bucket: "ok-bucket", Endpoint: srv.Endpoint(), PartSize: 1 << 20},
		{Bucket: "ok-bucket", Endpoint: srv.Endpoint(), CAFile: "/dev/null"}, // CA with plain http
	} {
		if _, err := NewS3(context.Background(), bad); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
	// Unreachable at startup: the store is returned with ErrUnavailable.
	l := listenLoopback(t)
	addr := l.Addr().String()
	l.Close()
	cfg = S3Config{Bucket: "later", Endpoint: "http://" + addr, PathStyle: true, MaxRetries: 1, Timeout: time.Second}
	s, err := NewS3(context.Background(), cfg)
	if !errors.Is(err, ErrUnavailable) || s == nil {
		t.Fatalf("unreachable service: store %v, err %v; want a store and ErrUnavailable", s, err)
	}
}

func TestMain(m *testing.M) {
	// Keep the developer's own AWS settings from leaking into any test.
	for _, k := range []string{"AWS_PROFILE", "AWS_REGION", "AWS_ENDPOINT_URL"} {
		os.Unsetenv(k)
	}
	os.Exit(m.Run())
}
