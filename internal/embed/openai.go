package embed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/indexify-go/indexify/internal/retry"
)

// Bounds and defaults of the OpenAI-compatible client.
const (
	DefaultBatchSize   = 64
	MaxBatchSize       = 2048
	DefaultMaxAttempts = 5
	DefaultBackoff     = 250 * time.Millisecond
	maxBackoff         = 10 * time.Second
	defaultTimeout     = 2 * time.Minute
	// maxResponseBytes bounds a response body: 2048 vectors of 4096 floats
	// printed as JSON stay well below it.
	maxResponseBytes = 256 << 20
	// maxErrorExcerpt bounds the server's error text quoted in an error.
	maxErrorExcerpt = 512
	maxKeyFileBytes = 64 << 10
)

// OpenAIConfig configures an OpenAI-compatible /v1/embeddings client.
type OpenAIConfig struct {
	BaseURL    string // e.g. http://127.0.0.1:11434 or https://host/v1; "/v1/embeddings" is appended
	Model      string
	APIKeyFile string // optional: a file holding the bearer token
	Dim        int    // required: every returned vector must have this length
	BatchSize  int    // texts per request; 0 means DefaultBatchSize

	MaxAttempts int           // per batch, 0 means DefaultMaxAttempts
	Backoff     time.Duration // first retry delay, doubled per attempt; 0 means DefaultBackoff
	HTTPClient  *http.Client  // nil means a client with a 2 minute timeout
}

// OpenAIDefaults are trusted, server-side settings (the executor's or the
// API server's configuration) used where a policy's params leave a field out.
type OpenAIDefaults struct {
	BaseURL    string
	Model      string
	APIKeyFile string // used when the params name no api_key_file
	// KeyDir is where an api_key_file named in params is looked up: params
	// may only name a file inside it (a local relative path), so whoever
	// writes a policy cannot make the server send an arbitrary file of its
	// as a bearer token. Empty: params must not name a key file.
	KeyDir string
}

// openAIParams are the extractor's input params.
type openAIParams struct {
	BaseURL, Model, APIKeyFile string
	Dim, BatchSize             int
}

// parseOpenAIShape decodes and checks the params on their own: keys,
// types, dim, batch_size, the form of api_key_file and of a base_url they
// name. It fills base_url and model from d without requiring them, so the
// dim (required in the params) is known wherever the params are, whatever
// a server's configuration supplies.
func parseOpenAIShape(raw json.RawMessage, d OpenAIDefaults) (openAIParams, error) {
	var p openAIParams
	m, err := fields(raw, "base_url", "model", "api_key_file", "dim", "batch_size")
	if err != nil {
		return p, err
	}
	if p.BaseURL, err = stringField(m, "base_url", d.BaseURL); err != nil {
		return p, err
	}
	if p.Model, err = stringField(m, "model", d.Model); err != nil {
		return p, err
	}
	if p.APIKeyFile, err = stringField(m, "api_key_file", ""); err != nil {
		return p, err
	}
	if p.APIKeyFile != "" && !filepath.IsLocal(p.APIKeyFile) {
		return p, fmt.Errorf("api_key_file %q must be a file name relative to the configured key directory (no absolute path, no ..)", p.APIKeyFile)
	}
	if _, ok := m["dim"]; !ok {
		return p, fmt.Errorf("dim is required: the length of the vectors model %q returns", p.Model)
	}
	if p.Dim, err = intField(m, "dim", 0, 1, MaxDim*4); err != nil {
		return p, err
	}
	if p.BatchSize, err = intField(m, "batch_size", DefaultBatchSize, 1, MaxBatchSize); err != nil {
		return p, err
	}
	if p.BaseURL != "" {
		if _, err := endpoint(p.BaseURL); err != nil {
			return p, err
		}
	}
	return p, nil
}

// parseOpenAIFields is parseOpenAIShape that also requires a base_url and
// a model, from the params or d: what embedding needs.
func parseOpenAIFields(raw json.RawMessage, d OpenAIDefaults) (openAIParams, error) {
	p, err := parseOpenAIShape(raw, d)
	if err != nil {
		return p, err
	}
	if p.BaseURL == "" {
		return p, fmt.Errorf("base_url is required (in the params or the openai_embedding section of --extractors-config)")
	}
	if strings.TrimSpace(p.Model) == "" {
		return p, fmt.Errorf("model is required (in the params or the openai_embedding section of --extractors-config)")
	}
	return p, nil
}

// ParseOpenAIParams validates the openai-embedding params, filling missing
// base_url and model from d. A key file named in the params is resolved in
// d.KeyDir (and refused without one); otherwise d.APIKeyFile is used.
func ParseOpenAIParams(raw json.RawMessage, d OpenAIDefaults) (OpenAIConfig, error) {
	p, err := parseOpenAIFields(raw, d)
	if err != nil {
		return OpenAIConfig{}, err
	}
	key := d.APIKeyFile
	if p.APIKeyFile != "" {
		if d.KeyDir == "" {
			return OpenAIConfig{}, fmt.Errorf("api_key_file %q is named in the params, but no key directory is configured "+
				"(openai_embedding.key_dir); configure the key file there instead", p.APIKeyFile)
		}
		key = filepath.Join(d.KeyDir, p.APIKeyFile)
	}
	return OpenAIConfig{BaseURL: p.BaseURL, Model: p.Model, APIKeyFile: key, Dim: p.Dim, BatchSize: p.BatchSize}, nil
}

// OpenAISchema is the JSON schema of the openai-embedding params.
func OpenAISchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"base_url": map[string]any{"type": "string", "minLength": 1, "maxLength": 2048,
				"description": "service URL; /v1/embeddings is appended (a trailing /v1 is not doubled)"},
			"model": map[string]any{"type": "string", "minLength": 1, "maxLength": 256},
			"api_key_file": map[string]any{"type": "string", "minLength": 1, "maxLength": 255,
				"description": "name of the file holding the bearer token, inside the key directory configured where the embedding runs"},
			"dim": map[string]any{"type": "integer", "minimum": 1, "maximum": MaxDim * 4,
				"description": "length of the vectors the model returns; checked on every response"},
			"batch_size": map[string]any{"type": "integer", "minimum": 1, "maximum": MaxBatchSize,
				"default": DefaultBatchSize},
		},
		"required":             []string{"dim"},
		"additionalProperties": false,
	}
}

// endpoint returns the embeddings URL of a base URL.
func endpoint(base string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("base_url %q must be an http or https URL with a host", base)
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path = p + "/embeddings"
	return u.String(), nil
}

// OpenAI embeds texts through an OpenAI-compatible /v1/embeddings endpoint
// (OpenAI, Ollama, vLLM, text-embeddings-inference and others).
type OpenAI struct {
	cfg OpenAIConfig
	url string
	key string
}

// NewOpenAI validates cfg and reads the key file.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	u, err := endpoint(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.Model == "" {
		return nil, errors.New("openai embedding: model is required")
	}
	if cfg.Dim < 1 {
		return nil, errors.New("openai embedding: dim is required")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	cfg.BatchSize = min(cfg.BatchSize, MaxBatchSize)
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: defaultTimeout}
	}
	o := &OpenAI{cfg: cfg, url: u}
	if cfg.APIKeyFile != "" {
		f, err := os.Open(cfg.APIKeyFile)
		if err != nil {
			return nil, fmt.Errorf("openai embedding: api key file: %v", err)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("openai embedding: api key file: %v", err)
		}
		if len(b) > maxKeyFileBytes {
			return nil, fmt.Errorf("openai embedding: api key file %s is larger than %d bytes", cfg.APIKeyFile, maxKeyFileBytes)
		}
		o.key = strings.TrimSpace(string(b))
		if o.key == "" || strings.ContainsAny(o.key, "\r\n") {
			return nil, fmt.Errorf("openai embedding: api key file %s must hold one non-empty line", cfg.APIKeyFile)
		}
	}
	return o, nil
}

// Dim implements Embedder.
func (o *OpenAI) Dim() int { return o.cfg.Dim }

// Embed implements Embedder: texts go out in batches of BatchSize, each
// batch retried on connection errors, 429 and 5xx.
func (o *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += o.cfg.BatchSize {
		batch := texts[start:min(start+o.cfg.BatchSize, len(texts))]
		vecs, err := o.batch(ctx, batch)
		if err != nil {
			return nil, err
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// retryable marks failures worth another attempt.
type retryable struct {
	err   error
	after time.Duration // server's Retry-After, if any
}

func (r *retryable) Error() string { return r.err.Error() }

func (o *OpenAI) batch(ctx context.Context, texts []string) ([][]float32, error) {
	body, err := json.Marshal(map[string]any{"model": o.cfg.Model, "input": texts})
	if err != nil {
		return nil, err
	}
	delay := o.cfg.Backoff
	var last error
	for attempt := 1; ; attempt++ {
		vecs, err := o.post(ctx, body, len(texts))
		if err == nil {
			return vecs, nil
		}
		var r *retryable
		if !errors.As(err, &r) {
			return nil, err
		}
		last = r.err
		if attempt >= o.cfg.MaxAttempts {
			return nil, fmt.Errorf("openai embedding: giving up after %d attempts: %w", attempt, last)
		}
		wait := max(delay, min(r.after, maxBackoff))
		if !retry.Sleep(ctx, wait) {
			return nil, fmt.Errorf("openai embedding: %w (last error: %v)", ctx.Err(), last)
		}
		delay = min(delay*2, maxBackoff)
	}
}

func (o *OpenAI) post(ctx context.Context, body []byte, n int) ([][]float32, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if o.key != "" {
		req.Header.Set("Authorization", "Bearer "+o.key)
	}
	resp, err := o.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("openai embedding: %w", ctx.Err())
		}
		return nil, &retryable{err: fmt.Errorf("POST %s: %v", o.url, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, &retryable{err: fmt.Errorf("POST %s: reading response: %v", o.url, err)}
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		return nil, &retryable{
			err:   fmt.Errorf("embedding service answered %s: %s", resp.Status, excerpt(data)),
			after: retryAfter(resp.Header.Get("Retry-After")),
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("openai embedding: service answered %s: %s", resp.Status, excerpt(data))
	}
	if len(data) > maxResponseBytes {
		return nil, fmt.Errorf("openai embedding: response is larger than %d bytes", maxResponseBytes)
	}
	return o.decode(data, n)
}

func (o *OpenAI) decode(data []byte, n int) ([][]float32, error) {
	var r struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
			Index     *int      `json:"index"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("openai embedding: response is not the embeddings JSON: %v", err)
	}
	if len(r.Data) != n {
		return nil, fmt.Errorf("openai embedding: sent %d texts, got %d embeddings", n, len(r.Data))
	}
	out := make([][]float32, n)
	for i, d := range r.Data {
		idx := i
		if d.Index != nil {
			idx = *d.Index
		}
		if idx < 0 || idx >= n || out[idx] != nil {
			return nil, fmt.Errorf("openai embedding: response has a bad or repeated index %d", idx)
		}
		if len(d.Embedding) != o.cfg.Dim {
			return nil, fmt.Errorf("openai embedding: model %q returned a vector of dimension %d, the params declare dim %d",
				o.cfg.Model, len(d.Embedding), o.cfg.Dim)
		}
		out[idx] = d.Embedding
	}
	return out, nil
}

// excerpt returns the server's error message: error.message or error of a
// JSON body if present, else the body, cut to maxErrorExcerpt bytes.
func excerpt(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil {
		var s string
		var obj struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(e.Error, &s) == nil && s != "":
			msg = s
		case json.Unmarshal(e.Error, &obj) == nil && obj.Message != "":
			msg = obj.Message
		case e.Message != "":
			msg = e.Message
		case len(e.Detail) > 0:
			msg = string(e.Detail)
		}
	}
	if msg == "" {
		return "(empty body)"
	}
	if len(msg) > maxErrorExcerpt {
		cut := maxErrorExcerpt
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return strconv.Quote(msg)
}

// retryAfter parses a Retry-After header in seconds (dates are ignored).
func retryAfter(h string) time.Duration {
	s, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}
