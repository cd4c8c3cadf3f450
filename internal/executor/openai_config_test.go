package executor

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/executor/extractors"
)

// The file's openai_embedding section supplies base URL, model and key file
// (relative to the file) to tensorlake/openai-embedding; a policy then only
// names dim. The service is a loopback server speaking /v1/embeddings.
func TestConfigOpenAIEmbeddingDefaults(t *testing.T) {
	var gotAuth, gotModel string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		gotAuth, gotModel = r.Header.Get("Authorization"), req.Model
		w.Write([]byte(`{"data":[{"embedding":[1,0],"index":0}]}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "key.txt"), "sk-local\n")
	cfgPath := filepath.Join(dir, "executor.yaml")
	if err := os.Mkdir(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "keys", "team.key"), "sk-team\n")
	writeFile(t, cfgPath, "openai_embedding:\n  base_url: "+srv.URL+"\n  model: tiny\n  api_key_file: key.txt\n  key_dir: keys\n")
	fc, err := LoadConfigFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := fc.Config()
	if err != nil {
		t.Fatal(err)
	}
	var x extractors.Extractor
	for _, e := range cfg.Extractors {
		if e.Describe().GetName() == embed.OpenAIExtractor {
			x = e
		}
	}
	if x == nil {
		t.Fatal("openai embedding extractor not configured")
	}
	out, err := x.Extract(context.Background(), extractors.Input{Data: []byte("hi"), MimeType: "text/plain", Params: json.RawMessage(`{"dim":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Features) != 1 || out.Features[0].GetValueJson() != "[1,0]" || gotAuth != "Bearer sk-local" || gotModel != "tiny" {
		t.Fatalf("features %v auth %q model %q", out.Features, gotAuth, gotModel)
	}
	// A policy may pick another key by name, from the key directory only.
	if _, err := x.Extract(context.Background(), extractors.Input{Data: []byte("hi"), Params: json.RawMessage(`{"dim":2,"api_key_file":"team.key"}`)}); err != nil || gotAuth != "Bearer sk-team" {
		t.Fatalf("key from key_dir: %v, auth %q", err, gotAuth)
	}
	if _, err := x.Extract(context.Background(), extractors.Input{Data: []byte("hi"), Params: json.RawMessage(`{"dim":2,"api_key_file":"../key.txt"}`)}); err == nil {
		t.Fatal("a key file outside key_dir was accepted")
	}
	if _, err := ParseConfig([]byte("openai_embedding:\n  url: x\n")); err == nil {
		t.Fatal("unknown key in openai_embedding accepted")
	}
}
