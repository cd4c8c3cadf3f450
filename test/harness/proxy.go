package harness

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// Answer is one HTTP answer as the client behind a RecordingProxy saw it.
type Answer struct {
	Method, Path string
	Status       int
	ContentType  string
	Body         []byte // at most the first maxRecordedBody bytes
}

const maxRecordedBody = 4 << 10

// RecordingProxy is a loopback reverse proxy in front of one backend that
// records every answer it passes on, so a test can assert on what a
// client (an executor posting results, say) was told, not on a server's
// log.
type RecordingProxy struct {
	*httptest.Server
	mu      sync.Mutex
	answers []Answer
}

// StartRecordingProxy proxies to backend (scheme://host:port).
func StartRecordingProxy(t testing.TB, backend string) *RecordingProxy {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	p := &RecordingProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		head, err := io.ReadAll(io.LimitReader(resp.Body, maxRecordedBody))
		if err != nil {
			return err
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
		p.mu.Lock()
		p.answers = append(p.answers, Answer{Method: resp.Request.Method, Path: resp.Request.URL.Path,
			Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: head})
		p.mu.Unlock()
		return nil
	}
	p.Server = httptest.NewServer(rp)
	t.Cleanup(p.Close)
	return p
}

// Answers returns the recorded answers from number from on (0: all) that
// match keep, and the number recorded so far (the from of a later call).
func (p *RecordingProxy) Answers(from int, keep func(Answer) bool) ([]Answer, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Answer
	for _, a := range p.answers[min(from, len(p.answers)):] {
		if keep(a) {
			out = append(out, a)
		}
	}
	return out, len(p.answers)
}
