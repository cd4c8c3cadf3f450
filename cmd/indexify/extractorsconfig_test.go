package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The API server reads the openai_embedding section of the executor's
// --extractors-config (one definition of the flag and the file), so it
// embeds search queries with the executors' base URL, model and key.
func TestServerReadsTheExtractorsConfigOpenAISection(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "extractors.yaml")
	yaml := "openai_embedding:\n  base_url: http://127.0.0.1:11434\n  model: nomic-embed-text\n  api_key_file: openai.key\n"
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var sf serverFlags
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	sf.register(fs)
	if err := fs.Parse([]string{"--extractors-config", p}); err != nil {
		t.Fatal(err)
	}
	d, err := sf.extractors.openAIDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if d.BaseURL != "http://127.0.0.1:11434" || d.Model != "nomic-embed-text" || d.APIKeyFile != filepath.Join(dir, "openai.key") {
		t.Fatalf("server's OpenAI defaults %+v", d)
	}

	// dev: one flag, read by both parts.
	dev := newDevCmd()
	if err := dev.Flags().Parse([]string{"--extractors-config", p}); err != nil {
		t.Fatal(err)
	}
	if f := dev.Flags().Lookup("extractors-config"); f == nil || !strings.Contains(f.Usage, "API server") {
		t.Fatalf("dev's --extractors-config: %+v", f)
	}

	// A broken file stops the server with the flag's name.
	if err := os.WriteFile(p, []byte("openai_embedding:\n  base_urll: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sf.extractors.openAIDefaults(); err == nil || !strings.Contains(err.Error(), "--extractors-config") {
		t.Fatalf("broken file: %v", err)
	}
}
