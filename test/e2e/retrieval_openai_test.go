package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// embeddingService is a loopback stand-in for an OpenAI-compatible
// /v1/embeddings service (Ollama, vLLM, text-embeddings-inference and
// hosted APIs cannot run on the project's machines). Its "model" is the
// lexical embedding, so similar texts get similar vectors and a search
// finds what it should. It checks the bearer key and the model name, and
// records every text it was asked to embed.
type embeddingService struct {
	*httptest.Server
	dim   int
	model string
	key   string

	mu    sync.Mutex
	texts []string
}

func startEmbeddingService(t *testing.T, model, key string, dim int) *embeddingService {
	t.Helper()
	s := &embeddingService{dim: dim, model: model, key: key}
	lex := embed.NewLexical(dim)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
			http.Error(w, `{"error":{"message":"no such route"}}`, http.StatusNotFound)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+s.key {
			http.Error(w, `{"error":{"message":"bad api key"}}`, http.StatusUnauthorized)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != s.model {
			http.Error(w, fmt.Sprintf(`{"error":{"message":"bad request: model %q, %v"}}`, req.Model, err), http.StatusBadRequest)
			return
		}
		vecs, err := lex.Embed(r.Context(), req.Input)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		type item struct {
			Embedding []float32 `json:"embedding"`
			Index     int       `json:"index"`
		}
		out := struct {
			Data []item `json:"data"`
		}{}
		// Reversed, with indexes: the client must order by index.
		for i := len(vecs) - 1; i >= 0; i-- {
			out.Data = append(out.Data, item{Embedding: vecs[i], Index: i})
		}
		s.mu.Lock()
		s.texts = append(s.texts, req.Input...)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(s.Close)
	return s
}

// embedded reports whether the service was asked to embed text.
func (s *embeddingService) embedded(text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.texts {
		if x == text {
			return true
		}
	}
	return false
}

const openAIGraph = `name: notes
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 90, overlap: 0}
  - extractor: tensorlake/openai-embedding
    name: vectors
    content_source: chunks
    input_params: {dim: 48}
`

// An OpenAI-compatible embedding whose base URL, model and key come from
// the configuration file (not the graph's params), on `indexify dev`: the
// index is created with the params' dim when the graph is, the executor
// embeds the chunks and uploads them, and the API server embeds the query
// through the same service with the same configuration, so the search
// finds the chunk.
func TestOpenAIEmbeddingFromConfigOnDev(t *testing.T) {
	const model, key, dim = "test-embedder", "sk-test-0123456789", 48
	svc := startEmbeddingService(t, model, key, dim)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "openai.key"), []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "extractors.yaml")
	// api_key_file is relative: resolved against the file's folder.
	yaml := fmt.Sprintf("openai_embedding:\n  base_url: %s\n  model: %s\n  api_key_file: openai.key\n", svc.URL, model)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	dev := harness.StartDev(t, t.TempDir(), "--extractors-config", cfg)
	api := dev.API
	ns := newNamespace(t, api, "openai")
	createGraphYAML(t, api, ns, openAIGraph)

	const name = "notes.vectors.embedding"
	var idx wire.Indexes
	code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/indexes", nil, &idx)
	mustStatus(t, http.StatusOK, code, body, err, "list indexes")
	if len(idx.Indexes) != 1 || idx.Indexes[0].Name != name || idx.Indexes[0].EmbeddingSchema.Dim != dim {
		t.Fatalf("indexes: %s, want %s with dim %d", body, name, dim)
	}
	// The index exists (empty) before the first upload: a search answers
	// 200 with no results rather than an error.
	k := 2
	code, res, body := search(t, api, ns, name, wire.SearchRequest{Query: "anything", K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search before upload")
	if len(res) != 0 {
		t.Fatalf("empty index answered %s", body)
	}

	id := uploadTyped(t, api, ns, "notes", "note.txt", "text/plain", []byte(
		"Bring an umbrella tomorrow: the forecast says heavy rain in the afternoon.\n"+
			"Buy milk, eggs and bread at the corner shop before it closes at six."))
	waitContent(t, api, ns, id)

	const question = "will it rain, do I need an umbrella?"
	code, res, body = search(t, api, ns, name, wire.SearchRequest{Query: question, K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search")
	if len(res) != 2 || !strings.Contains(res[0].Text, "umbrella") || res[0].RootContentMetadata == nil || res[0].RootContentMetadata.ID != id {
		t.Fatalf("search did not find the umbrella chunk of %s first: %s", id, body)
	}
	if !svc.embedded(question) {
		t.Fatalf("the query was not embedded by the configured service")
	}
}
