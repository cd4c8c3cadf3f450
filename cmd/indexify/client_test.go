package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

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
	var g struct {
		Name     string `json:"name"`
		Policies []struct {
			Name string `json:"name"`
		} `json:"extraction_policies"`
	}
	if err := json.Unmarshal([]byte(out), &g); err != nil || g.Name != "docs" || len(g.Policies) != 1 {
		t.Fatalf("graph get -o json: %v\n%s", err, out)
	}

	// A directory with a nested file: both are uploaded, progress goes to
	// stderr as plain lines (not a terminal), results to stdout.
	up := filepath.Join(dir, "upload")
	os.MkdirAll(filepath.Join(up, "nested"), 0o755)
	os.WriteFile(filepath.Join(up, "one.txt"), []byte(strings.Repeat("first file text. ", 5)), 0o644)
	os.WriteFile(filepath.Join(up, "nested", "two.txt"), []byte("second file"), 0o644)
	out, errOut := mustCLI(t, "content", "upload", up, "-g", "docs", "-n", "lab", "--labels", `{"team":"ops"}`, "--wait", "-o", "json", server)
	if !strings.Contains(errOut, "[1/2] uploaded") || !strings.Contains(errOut, "[2/2] uploaded") || strings.Contains(errOut, "\r") {
		t.Fatalf("progress on stderr:\n%q", errOut)
	}
	var results []struct {
		File      string `json:"file"`
		ContentID string `json:"content_id"`
		Error     string `json:"error"`
	}
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
	out, _ = mustCLI(t, "executor", "list", server)
	if !strings.Contains(out, "tensorlake/chunk-extractor") {
		t.Fatalf("executor list:\n%s", out)
	}

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
