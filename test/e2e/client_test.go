package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// Thin helpers over the public HTTP API, written from the user's side: the
// paths and JSON names are the original Indexify API's.

// The JSON shapes are the server's own (internal/wire): a renamed field
// fails to compile here rather than reading as empty.
type (
	content = wire.Content
	task    = wire.Task
)

func mustStatus(t *testing.T, want int, code int, body []byte, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if code != want {
		t.Fatalf("%s: status %d, want %d: %s", what, code, want, body)
	}
}

func createGraphYAML(t *testing.T, api *harness.HTTP, ns, spec string) {
	t.Helper()
	code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs",
		"application/x-yaml", strings.NewReader(spec))
	if err != nil || code/100 != 2 {
		t.Fatalf("create graph: %d %v %s", code, err, body)
	}
}

// upload sends data as a multipart file and returns the content id.
func upload(t *testing.T, api *harness.HTTP, ns, graph, id string, data []byte, labels map[string]any) string {
	t.Helper()
	code, body, err := uploadRaw(api, http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/"+graph+"/extract", id, data, labels)
	if err != nil || code/100 != 2 {
		t.Fatalf("upload: %d %v %s", code, err, body)
	}
	var out wire.ContentID
	if err := json.Unmarshal(body, &out); err != nil || out.ContentID == "" {
		t.Fatalf("upload answer %s: %v", body, err)
	}
	return out.ContentID
}

func uploadRaw(api *harness.HTTP, method, path, id string, data []byte, labels map[string]any) (int, []byte, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if labels != nil {
		b, _ := json.Marshal(labels)
		_ = mw.WriteField("labels", string(b))
	}
	if data != nil {
		fw, _ := mw.CreateFormFile("file", "input.txt")
		_, _ = fw.Write(data)
	}
	_ = mw.Close()
	if id != "" {
		path += "?id=" + url.QueryEscape(id)
	}
	return api.Do(context.Background(), method, path, mw.FormDataContentType(), &buf)
}

func waitContent(t *testing.T, api *harness.HTTP, ns, id string) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, "content "+id+" extracted", func() error {
		code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/content/"+id+"/wait", nil, nil)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("wait: %d %s", code, body)
		}
		return nil
	})
}

func contentTree(t *testing.T, api *harness.HTTP, ns, graph, id, policy string) []content {
	t.Helper()
	var out wire.ContentTree
	code, body, err := api.JSON(http.MethodGet, fmt.Sprintf("/namespaces/%s/extraction_graphs/%s/content/%s/extraction_policies/%s", ns, graph, id, policy), nil, &out)
	mustStatus(t, http.StatusOK, code, body, err, "content tree")
	var keep []content
	for _, c := range out.ContentTreeMetadata {
		if c.Source == policy {
			keep = append(keep, c)
		}
	}
	return keep
}

func download(t *testing.T, api *harness.HTTP, ns, id string) string {
	t.Helper()
	code, body, err := api.Do(context.Background(), http.MethodGet, "/namespaces/"+ns+"/content/"+id+"/download", "", nil)
	mustStatus(t, http.StatusOK, code, body, err, "download "+id)
	return string(body)
}

func metadata(t *testing.T, api *harness.HTTP, ns, id string) content {
	t.Helper()
	var out wire.ContentMetadata
	code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/content/"+id+"/metadata", nil, &out)
	mustStatus(t, http.StatusOK, code, body, err, "metadata "+id)
	return out.ContentMetadata
}

func tasks(t *testing.T, api *harness.HTTP, ns, graph, policy string) []task {
	t.Helper()
	var out wire.Tasks
	code, body, err := api.JSON(http.MethodGet, fmt.Sprintf("/namespaces/%s/extraction_graphs/%s/extraction_policies/%s/tasks", ns, graph, policy), nil, &out)
	mustStatus(t, http.StatusOK, code, body, err, "tasks")
	return out.Tasks
}

// blobPath turns a file:// storage url into a path.
// blobPath is the file of a disk blob: the API shows only its key
// ("file:ns/id/blob", never the server's directory), under <data-dir>/blobs.
func blobPath(t *testing.T, dataDir, storageURL string) string {
	t.Helper()
	key, ok := strings.CutPrefix(storageURL, "file:")
	if !ok || strings.HasPrefix(key, "/") || strings.Contains(key, "..") {
		t.Fatalf("storage url %q is not a relative file url", storageURL)
	}
	return filepath.Join(dataDir, "blobs", filepath.FromSlash(key))
}

func fileGone(path string) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s still exists", path)
	} else if !os.IsNotExist(err) {
		return err
	}
	return nil
}

// writeScript writes an executable shell script into dir.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeExtractorsConfig writes an executor extractors file with one
// external extractor.
func writeExtractorsConfig(t *testing.T, dir, file, name string, command string) string {
	t.Helper()
	p := filepath.Join(dir, file)
	cfg := fmt.Sprintf("extractors:\n  - name: %s\n    description: test extractor\n    command: [%q]\n    input_mime_types: [\"text/plain\"]\n", name, command)
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
