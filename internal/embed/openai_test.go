package embed

// These tests run the OpenAI-compatible client against a loopback
// httptest server that speaks the /v1/embeddings wire format. Real
// embedding services (OpenAI, Ollama, vLLM, text-embeddings-inference)
// cannot run on the project's machines, so the wire format is what is
// tested: request shape, batching, auth, retries and error reporting.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeService answers /v1/embeddings with vectors [len(text), i, 0, ...],
// listing data in reverse order so clients must honour "index".
type fakeService struct {
	t       *testing.T
	dim     int
	mu      sync.Mutex
	batches [][]string
	auth    []string
	// fail, if set, decides the reply for request number n (1-based);
	// returning 0 means answer normally.
	fail func(n int, w http.ResponseWriter) int
	n    atomic.Int32
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(f.n.Add(1))
	if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
		http.Error(w, `{"error":{"message":"no such route"}}`, http.StatusNotFound)
		return
	}
	if f.fail != nil {
		if code := f.fail(n, w); code != 0 {
			return
		}
	}
	var req struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model == "" {
		http.Error(w, `{"error":{"message":"bad request body"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.batches = append(f.batches, req.Input)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	type item struct {
		Object    string    `json:"object"`
		Embedding []float32 `json:"embedding"`
		Index     int       `json:"index"`
	}
	var data []item
	for i := len(req.Input) - 1; i >= 0; i-- {
		v := make([]float32, f.dim)
		v[0], v[1] = float32(len(req.Input[i])), float32(i)
		data = append(data, item{"embedding", v, i})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model})
}

func newFake(t *testing.T, dim int) (*fakeService, *httptest.Server) {
	f := &fakeService{t: t, dim: dim}
	srv := httptest.NewServer(f) // listens on 127.0.0.1:0
	t.Cleanup(srv.Close)
	return f, srv
}

func keyFile(t *testing.T, key string) string {
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenAIBatchingOrderAndAuth(t *testing.T) {
	f, srv := newFake(t, 4)
	// The params name the key file; the server's key directory holds it.
	kf := keyFile(t, "sk-test\n")
	params := json.RawMessage(`{"base_url":"` + srv.URL + `","model":"m1","dim":4,"batch_size":2,"api_key_file":"key"}`)
	e, err := FromParamsWith(OpenAIExtractor, params, OpenAIDefaults{KeyDir: filepath.Dir(kf)})
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"a", "bb", "ccc", "dddd", "eeeee"}
	vecs, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vecs {
		if len(v) != 4 || int(v[0]) != len(texts[i]) || int(v[1]) != i%2 {
			t.Fatalf("vector %d = %v: out of order", i, v)
		}
	}
	if len(f.batches) != 3 || len(f.batches[0]) != 2 || len(f.batches[2]) != 1 {
		t.Fatalf("batches %q, want 2+2+1", f.batches)
	}
	for _, a := range f.auth {
		if a != "Bearer sk-test" {
			t.Fatalf("Authorization %q", a)
		}
	}
}

func TestOpenAIBaseURLWithV1(t *testing.T) {
	_, srv := newFake(t, 3)
	o, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1/", Model: "m", Dim: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Embed(context.Background(), []string{"x"}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenAIRetriesThenSucceeds(t *testing.T) {
	f, srv := newFake(t, 3)
	f.fail = func(n int, w http.ResponseWriter) int {
		switch n {
		case 1:
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return 503
		case 2:
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
			return 429
		case 3: // a dropped connection
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
			return -1
		}
		return 0
	}
	o, _ := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, Model: "m", Dim: 3, Backoff: time.Millisecond})
	vecs, err := o.Embed(context.Background(), []string{"hello"})
	if err != nil || len(vecs) != 1 || vecs[0][0] != 5 {
		t.Fatalf("got %v, %v", vecs, err)
	}
	if got := f.n.Load(); got != 4 {
		t.Fatalf("%d requests, want 4 (3 failures + success)", got)
	}
}

func TestOpenAIGivesUpAfterMaxAttempts(t *testing.T) {
	f, srv := newFake(t, 3)
	f.fail = func(n int, w http.ResponseWriter) int {
		http.Error(w, "boom", http.StatusInternalServerError)
		return 500
	}
	o, _ := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, Model: "m", Dim: 3, Backoff: time.Millisecond, MaxAttempts: 3})
	_, err := o.Embed(context.Background(), []string{"x"})
	if err == nil || !strings.Contains(err.Error(), "giving up after 3 attempts") || !strings.Contains(err.Error(), "500") {
		t.Fatalf("err %v", err)
	}
	if got := f.n.Load(); got != 3 {
		t.Fatalf("%d requests, want 3", got)
	}
}

func TestOpenAIClientErrorIsClearAndNotRetried(t *testing.T) {
	f, srv := newFake(t, 3)
	long := strings.Repeat("x", 5000)
	f.fail = func(n int, w http.ResponseWriter) int {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"message":"Incorrect API key provided ` + long + `","type":"invalid_request_error"}}`))
		return 401
	}
	o, _ := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, Model: "m", Dim: 3, Backoff: time.Millisecond})
	_, err := o.Embed(context.Background(), []string{"x"})
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") || !strings.Contains(err.Error(), "Incorrect API key provided") {
		t.Fatalf("err %v", err)
	}
	if len(err.Error()) > maxErrorExcerpt+200 {
		t.Fatalf("error not bounded: %d bytes", len(err.Error()))
	}
	if got := f.n.Load(); got != 1 {
		t.Fatalf("%d requests: a 4xx must not be retried", got)
	}
}

func TestOpenAIDimensionMismatch(t *testing.T) {
	_, srv := newFake(t, 5)
	o, _ := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, Model: "m", Dim: 4})
	_, err := o.Embed(context.Background(), []string{"x"})
	if err == nil || !strings.Contains(err.Error(), "dimension 5") || !strings.Contains(err.Error(), "dim 4") {
		t.Fatalf("err %v", err)
	}
}

func TestOpenAIBadResponses(t *testing.T) {
	for name, body := range map[string]string{
		"not json":     `<html>gateway</html>`,
		"too few":      `{"data":[]}`,
		"bad index":    `{"data":[{"embedding":[1,2],"index":7}]}`,
		"repeat index": `{"data":[{"embedding":[1,2],"index":0},{"embedding":[1,2],"index":0}]}`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) }))
		n := 1
		if strings.Contains(name, "repeat") {
			n = 2
		}
		o, _ := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, Model: "m", Dim: 2})
		_, err := o.Embed(context.Background(), make([]string, n))
		srv.Close()
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestOpenAICancelDuringBackoff(t *testing.T) {
	f, srv := newFake(t, 3)
	answered := make(chan struct{})
	var once sync.Once
	f.fail = func(n int, w http.ResponseWriter) int {
		once.Do(func() { close(answered) })
		http.Error(w, "down", http.StatusBadGateway)
		return 502
	}
	o, _ := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, Model: "m", Dim: 3, Backoff: time.Hour, MaxAttempts: 2})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-answered // the first attempt reached the server; the next waits an hour
		cancel()
	}()
	_, err := o.Embed(ctx, []string{"x"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestOpenAIParamsAndConfig(t *testing.T) {
	for _, tc := range []struct{ params, want string }{
		{`{"model":"m","dim":3}`, "base_url is required"},
		{`{"base_url":"ftp://x","model":"m","dim":3}`, "must be an http or https URL"},
		{`{"base_url":"http://127.0.0.1:1","dim":3}`, "model is required"},
		{`{"base_url":"http://127.0.0.1:1","model":"m","dim":0}`, "dim must be an integer"},
		{`{"base_url":"http://127.0.0.1:1","model":"m","dim":3,"batch_size":0}`, "batch_size must be an integer"},
		{`{"base_url":"http://127.0.0.1:1","model":"m","dim":3,"api_key":"x"}`, `unknown input param "api_key"`},
		// A key file named in params: a plain name inside the server's key
		// directory, never an arbitrary path of the server's file system.
		{`{"base_url":"http://127.0.0.1:1","model":"m","dim":3,"api_key_file":"/etc/passwd"}`, "must be a file name relative"},
		{`{"base_url":"http://127.0.0.1:1","model":"m","dim":3,"api_key_file":"../secret"}`, "must be a file name relative"},
		{`{"base_url":"http://127.0.0.1:1","model":"m","dim":3,"api_key_file":"missing.key"}`, "api key file"},
	} {
		_, err := FromParamsWith(OpenAIExtractor, json.RawMessage(tc.params), OpenAIDefaults{KeyDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.params, err, tc.want)
		}
	}
	// Executor-side defaults fill what the params leave out.
	cfg, err := ParseOpenAIParams(json.RawMessage(`{"dim":3}`), OpenAIDefaults{BaseURL: "http://127.0.0.1:1", Model: "dflt"})
	if err != nil || cfg.Model != "dflt" || cfg.BatchSize != DefaultBatchSize {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	// Without a key directory, params cannot name a key file at all.
	if _, err := FromParams(OpenAIExtractor, json.RawMessage(`{"base_url":"http://127.0.0.1:1","model":"m","dim":3,"api_key_file":"k"}`)); err == nil ||
		!strings.Contains(err.Error(), "no key directory is configured") {
		t.Fatalf("params key file without key dir: %v", err)
	}
	// An empty key file is an error, not an empty bearer token.
	if _, err := NewOpenAI(OpenAIConfig{BaseURL: "http://127.0.0.1:1", Model: "m", Dim: 3, APIKeyFile: keyFile(t, " \n")}); err == nil {
		t.Fatal("empty key file accepted")
	}
}
