package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// runCLI runs the real command tree in-process.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errb.String(), err
}

func mustCLI(t *testing.T, args ...string) (string, string) {
	t.Helper()
	out, errOut, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("indexify %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out, errOut
}

func TestClientCommandsAgainstDev(t *testing.T) {
	dev := harness.StartDev(t, t.TempDir())
	server := "--server=http://" + dev.APIAddr

	mustCLI(t, "namespace", "create", "lab", server)
	out, _ := mustCLI(t, "namespace", "list", server)
	if !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "lab") || !strings.Contains(out, "default") {
		t.Fatalf("namespace list table:\n%s", out)
	}

	dir := t.TempDir()
	specFile := filepath.Join(dir, "graph.yaml")
	os.WriteFile(specFile, []byte("name: docs\nextraction_policies:\n  - extractor: tensorlake/chunk-extractor\n    name: chunks\n    input_params: {chunk_size: 30}\n"), 0o644)
	mustCLI(t, "graph", "create", "-f", specFile, "-n", "lab", server)
	out, _ = mustCLI(t, "graph", "get", "docs", "-n", "lab", "-o", "json", server)
	var g wire.Graph
	if err := json.Unmarshal([]byte(out), &g); err != nil || g.Name != "docs" || len(g.ExtractionPolicies) != 1 {
		t.Fatalf("graph get -o json: %v\n%s", err, out)
	}

	// A directory with a nested file: both are uploaded, progress goes to
	// stderr as plain lines (not a terminal), results to stdout.
	up := filepath.Join(dir, "upload")
	os.MkdirAll(filepath.Join(up, "nested"), 0o755)
	os.WriteFile(filepath.Join(up, "one.txt"), []byte(strings.Repeat("first file text. ", 5)), 0o644)
	os.WriteFile(filepath.Join(up, "nested", "two.txt"), []byte("second file"), 0o644)
	out, errOut := mustCLI(t, "content", "upload", up, "-g", "docs", "-n", "lab", "--labels", `{"team":"ops"}`, "--wait", "-o", "json", server)
	if !strings.Contains(errOut, "[1/2] uploaded") || !strings.Contains(errOut, "[2/2] uploaded") || strings.Contains(errOut, "\r") ||
		strings.Count(errOut, "waiting for the extraction of") != 2 {
		t.Fatalf("progress on stderr:\n%q", errOut)
	}
	var results []uploadResult
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 2 {
		t.Fatalf("upload -o json: %v\n%s", err, out)
	}
	for _, r := range results {
		if r.ContentID == "" || r.Error != "" {
			t.Fatalf("upload result %+v", r)
		}
	}

	out, _ = mustCLI(t, "content", "list", "-g", "docs", "-n", "lab", "--source", "ingestion", server)
	for _, r := range results {
		if !strings.Contains(out, r.ContentID) {
			t.Fatalf("content list lacks %s:\n%s", r.ContentID, out)
		}
	}
	out, _ = mustCLI(t, "task", "list", "-g", "docs", "-n", "lab", "-o", "yaml", server)
	var tasks []map[string]any
	if err := yaml.Unmarshal([]byte(out), &tasks); err != nil || len(tasks) != 2 {
		t.Fatalf("task list -o yaml: %v\n%s", err, out)
	}
	for _, tk := range tasks {
		if tk["outcome"] != "success" || tk["extraction_policy_name"] != "chunks" {
			t.Fatalf("task %v", tk)
		}
	}
	out, _ = mustCLI(t, "extractor", "list", server)
	if !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "tensorlake/lexical-embedding") || !strings.Contains(out, "embedding:embedding(384,cosine)") {
		t.Fatalf("extractor list:\n%s", out)
	}
	out, _ = mustCLI(t, "cluster", "status", "-o", "json", "--coordinator", dev.GRPC)
	var cs wire.ClusterStatus
	if err := json.Unmarshal([]byte(out), &cs); err != nil || cs.State != "Leader" || len(cs.Members) != 1 || cs.Members[0].ID != "dev-0" {
		t.Fatalf("cluster status -o json: %v\n%s", err, out)
	}
	out, _ = mustCLI(t, "cluster", "members", "-o", "yaml", "--coordinator", dev.GRPC)
	if !strings.HasPrefix(out, "- id: dev-0\n") {
		t.Fatalf("cluster members -o yaml:\n%s", out)
	}
	out, _ = mustCLI(t, "executor", "list", server)
	if !strings.Contains(out, "tensorlake/chunk-extractor") {
		t.Fatalf("executor list:\n%s", out)
	}

	cliRetrieval(t, server, dir)

	mustCLI(t, "content", "delete", results[0].ContentID, "-n", "lab", server)
	mustCLI(t, "graph", "delete", "docs", "-n", "lab", server)
	out, _ = mustCLI(t, "graph", "list", "-n", "lab", server)
	if strings.Contains(out, "docs") {
		t.Fatalf("graph still listed after delete:\n%s", out)
	}

	// Errors: the server's message, a non-zero exit; bad flags are caught locally.
	if _, _, err := runCLI(t, "namespace", "get", "nope", server); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("namespace get nope: %v", err)
	}
	if _, _, err := runCLI(t, "namespace", "list", "-o", "xml", server); err == nil || !strings.Contains(err.Error(), "want table, json or yaml") {
		t.Fatalf("-o xml: %v", err)
	}
	if _, _, err := runCLI(t, "namespace", "list", "--server", "localhost:1"); err == nil || !strings.Contains(err.Error(), "--server") {
		t.Fatalf("bad --server: %v", err)
	}
}

func TestCompletionScripts(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, _ := mustCLI(t, "completion", sh)
		if !strings.Contains(out, "indexify") || len(out) < 500 {
			t.Errorf("completion %s: %d bytes", sh, len(out))
		}
	}
	// Cobra's completion engine sees the client commands and their flags.
	out, _ := mustCLI(t, "__complete", "content", "")
	for _, sub := range []string{"upload", "list", "delete"} {
		if !strings.Contains(out, sub) {
			t.Errorf("completing `content ` lacks %s:\n%s", sub, out)
		}
	}
	out, _ = mustCLI(t, "__complete", "graph", "list", "-o", "")
	if !strings.Contains(out, "yaml") {
		t.Errorf("completing -o lacks yaml:\n%s", out)
	}
}

func TestProgressBarOnTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf, tty: true, files: 2, total: 2048}
	p.update(0, "a.bin", 512)
	p.fileDone(0, localFile{path: "a.bin", size: 1024}, uploadResult{ContentID: "x"})
	p.fileDone(1, localFile{path: "b.bin", size: 1024}, uploadResult{Error: "boom"})
	p.finish()
	s := buf.String()
	for _, want := range []string{"\r\033[K[#######", " 25% 1/2 files 512 B/2.0 KiB a.bin", "100% 2/2 files 2.0 KiB/2.0 KiB", "failed b.bin: boom\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("bar output lacks %q:\n%q", want, s)
		}
	}
}

// cliRetrieval: `indexify search`, `indexify sql` and `indexify content
// download` against files uploaded with the CLI into a graph that chunks,
// embeds (lexical) and counts words.
func cliRetrieval(t *testing.T, server, dir string) {
	t.Helper()
	spec := filepath.Join(dir, "lib.yaml")
	os.WriteFile(spec, []byte(`name: lib
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 400}
  - extractor: tensorlake/lexical-embedding
    name: vectors
    content_source: chunks
  - extractor: tensorlake/attributes
    name: stats
    content_source: chunks
`), 0o644)
	mustCLI(t, "graph", "create", "-f", spec, "-n", "lab", server)
	files := filepath.Join(dir, "lib")
	os.MkdirAll(files, 0o755)
	texts := map[string]string{
		"volcano.txt": "Olympus Mons on Mars is the tallest volcano in the solar system.",
		"honey.txt":   "Honey never spoils: edible honey was found in ancient Egyptian tombs, thousands of years old.",
	}
	for name, text := range texts {
		os.WriteFile(filepath.Join(files, name), []byte(text), 0o644)
	}
	out, _ := mustCLI(t, "content", "upload", files, "-g", "lib", "-n", "lab", "--wait", "-o", "json", server)
	var uploaded []struct {
		File      string `json:"file"`
		ContentID string `json:"content_id"`
	}
	if err := json.Unmarshal([]byte(out), &uploaded); err != nil || len(uploaded) != 2 {
		t.Fatalf("upload -o json: %v\n%s", err, out)
	}
	ids := map[string]string{} // file name -> content id
	for _, u := range uploaded {
		ids[filepath.Base(u.File)] = u.ContentID
	}

	// search: the volcano file's chunk first; JSON has the wire shape, the
	// table a header and one line per hit.
	out, _ = mustCLI(t, "search", "lib.vectors.embedding", "which is the tallest volcano?", "-k", "1", "-n", "lab", "-o", "json", server)
	var hits []wire.SearchResult
	if err := json.Unmarshal([]byte(out), &hits); err != nil || len(hits) != 1 || hits[0].Text != texts["volcano.txt"] ||
		hits[0].RootContentMetadata == nil || hits[0].RootContentMetadata.ID != ids["volcano.txt"] || hits[0].ConfidenceScore <= 0 {
		t.Fatalf("search -o json: %v\n%s", err, out)
	}
	out, _ = mustCLI(t, "search", "lib.vectors.embedding", "honey in Egyptian tombs", "-k", "2", "-n", "lab", server)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "SCORE") || !strings.Contains(lines[1], "Honey never spoils") ||
		!strings.Contains(lines[1], "chunk_index=0") {
		t.Fatalf("search table:\n%s", out)
	}
	out, _ = mustCLI(t, "search", "lib.vectors.embedding", "volcano", "-k", "2", "--filter", "chunk_index!=0", "-n", "lab", "-o", "json", server)
	if err := json.Unmarshal([]byte(out), &hits); err != nil || len(hits) != 0 {
		t.Fatalf("search with a filter no chunk passes: %v\n%s", err, out)
	}

	// sql: one row per chunk, columns from the attributes.
	out, _ = mustCLI(t, "sql", "select content_id, words from lib order by words desc", "-n", "lab", "-o", "json", server)
	var rows []wire.SQLRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("sql -o json: %v\n%s", err, out)
	}
	if w0, w1 := rows[0].Data["words"], rows[1].Data["words"]; fmt.Sprint(w0) != "15" || fmt.Sprint(w1) != "12" {
		t.Fatalf("sql words %v, %v, want 15 and 12:\n%s", w0, w1, out)
	}
	out, _ = mustCLI(t, "sql", "select words from lib order by words", "-n", "lab", server)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || strings.TrimSpace(lines[0]) != "WORDS" || strings.TrimSpace(lines[1]) != "12" {
		t.Fatalf("sql table:\n%s", out)
	}

	// content download: to stdout, and to a file with a note on stderr.
	out, _ = mustCLI(t, "content", "download", ids["honey.txt"], "-n", "lab", server)
	if out != texts["honey.txt"] {
		t.Fatalf("content download to stdout: %q", out)
	}
	dst := filepath.Join(dir, "downloaded.txt")
	_, errOut := mustCLI(t, "content", "download", ids["volcano.txt"], "-f", dst, "-n", "lab", server)
	if b, err := os.ReadFile(dst); err != nil || string(b) != texts["volcano.txt"] || !strings.Contains(errOut, fmt.Sprintf("wrote %d bytes", len(b))) {
		t.Fatalf("content download -f: %q %v, stderr %q", b, err, errOut)
	}

	// Errors: the server's message and a non-zero exit.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"search", "lib.nope.embedding", "x"}, "not found"},
		{[]string{"search", "lib.vectors.embedding", "x", "-k", "0"}, "k must be between"},
		{[]string{"sql", "delete from lib"}, "SELECT"},
		{[]string{"content", "download", "no-such-content"}, "not found"},
	} {
		args := append(tc.args, "-n", "lab", server)
		if _, _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("indexify %s: %v, want an error with %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
