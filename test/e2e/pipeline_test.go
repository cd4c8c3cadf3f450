package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

const chunkGraph = `name: docs
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params:
      chunk_size: 10
      overlap: 0
  - extractor: tensorlake/attributes
    name: chunk-stats
    content_source: chunks
`

// One dev process serves several scenarios; each uses its own namespace.
func TestPipeline(t *testing.T) {
	dev := harness.StartDev(t, t.TempDir(), "--executor-timeout", "3s")
	api := dev.API

	t.Run("upload to chunks and chained attributes", func(t *testing.T) {
		ns := newNamespace(t, api, "pipeline")
		createGraphYAML(t, api, ns, chunkGraph)
		text := "abcdefghijklmnopqrstuvwxyz0123456789"
		id := upload(t, api, ns, "docs", "", []byte(text), nil)
		waitContent(t, api, ns, id)

		chunks := contentTree(t, api, ns, "docs", id, "chunks")
		if len(chunks) != 4 {
			t.Fatalf("got %d chunks, want 4: %+v", len(chunks), chunks)
		}
		got := make([]string, len(chunks))
		for _, c := range chunks {
			if c.ParentID != id {
				t.Errorf("chunk %s has parent %q, want %q", c.ID, c.ParentID, id)
			}
			var idx int
			if err := json.Unmarshal(c.Labels["chunk_index"], &idx); err != nil || idx < 0 || idx >= len(got) {
				t.Fatalf("chunk %s has a bad chunk_index label: %s", c.ID, c.Labels["chunk_index"])
			}
			got[idx] = download(t, api, ns, c.ID)
			// The chained policy ran on every chunk.
			if meta := metadata(t, api, ns, c.ID); len(meta.ExtractedMetadata) == 0 {
				t.Errorf("chunk %s has no attributes from the chained policy: %+v", c.ID, meta)
			}
		}
		if strings.Join(got, "") != text {
			t.Fatalf("chunks %q do not reassemble the input", got)
		}
		for _, tk := range tasks(t, api, ns, "docs", "chunks") {
			if tk.Outcome != "success" {
				t.Fatalf("task %s outcome %q", tk.ID, tk.Outcome)
			}
		}
		if n := len(tasks(t, api, ns, "docs", "chunk-stats")); n != 4 {
			t.Fatalf("chained policy made %d tasks, want 4", n)
		}
	})

	t.Run("label filter excludes content", func(t *testing.T) {
		ns := newNamespace(t, api, "filter")
		createGraphYAML(t, api, ns, `name: en
extraction_policies:
  - extractor: tensorlake/attributes
    name: stats
    filter: ["lang=en"]
`)
		fr := upload(t, api, ns, "en", "", []byte("bonjour"), map[string]any{"lang": "fr"})
		en := upload(t, api, ns, "en", "", []byte("hello"), map[string]any{"lang": "en"})
		waitContent(t, api, ns, fr)
		waitContent(t, api, ns, en)
		ts := tasks(t, api, ns, "en", "stats")
		if len(ts) != 1 {
			t.Fatalf("got %d tasks, want exactly one (for lang=en): %+v", len(ts), ts)
		}
		if len(metadata(t, api, ns, en).ExtractedMetadata) == 0 {
			t.Fatalf("lang=en content was not extracted")
		}
		if len(metadata(t, api, ns, fr).ExtractedMetadata) != 0 {
			t.Fatalf("lang=fr content was extracted despite the filter")
		}
	})

	t.Run("new version supersedes the old one and its blobs are collected", func(t *testing.T) {
		ns := newNamespace(t, api, "versions")
		createGraphYAML(t, api, ns, chunkGraph)
		id := upload(t, api, ns, "docs", "doc-1", []byte("first version of the text"), nil)
		waitContent(t, api, ns, id)
		v1 := metadata(t, api, ns, id)
		oldChunks := contentTree(t, api, ns, "docs", id, "chunks")
		if len(oldChunks) == 0 {
			t.Fatal("no chunks for version 1")
		}
		v1Blob := blobPath(t, dev.DataDir, v1.StorageURL)
		chunkBlob := blobPath(t, dev.DataDir, metadata(t, api, ns, oldChunks[0].ID).StorageURL)

		code, body, err := uploadRaw(api, http.MethodPut, "/namespaces/"+ns+"/content/"+id, "", []byte("second version, different bytes"), nil)
		if err != nil || code/100 != 2 {
			t.Fatalf("new version: %d %v %s", code, err, body)
		}
		waitContent(t, api, ns, id)
		if got := download(t, api, ns, id); got != "second version, different bytes" {
			t.Fatalf("download after new version = %q", got)
		}
		harness.Eventually(t, 30*time.Second, "old version's blobs collected", func() error {
			if err := fileGone(v1Blob); err != nil {
				return err
			}
			return fileGone(chunkBlob)
		})
		// Identical bytes are de-duplicated: no new version, no new tasks.
		// (Count the latest version's tasks: version 1's task records are
		// dropped once its GC is acknowledged, which may still be under way.)
		latestTasks := func() int {
			n := 0
			for _, tk := range tasks(t, api, ns, "docs", "chunks") {
				if tk.ContentID == id && tk.ContentVersion >= 2 {
					n++
				}
			}
			return n
		}
		before := latestTasks()
		upload(t, api, ns, "docs", "doc-1", []byte("second version, different bytes"), nil)
		waitContent(t, api, ns, id)
		if after := latestTasks(); after != before || before != 1 {
			t.Fatalf("re-uploading identical bytes made tasks after version 1: %d -> %d", before, after)
		}
	})

	t.Run("delete removes blobs", func(t *testing.T) {
		ns := newNamespace(t, api, "delete")
		createGraphYAML(t, api, ns, chunkGraph)
		id := upload(t, api, ns, "docs", "", []byte("some text to delete soon"), nil)
		waitContent(t, api, ns, id)
		p := blobPath(t, dev.DataDir, metadata(t, api, ns, id).StorageURL)
		code, body, err := api.JSON(http.MethodDelete, "/namespaces/"+ns+"/content", wire.ContentIDs{ContentIDs: []string{id}}, nil)
		if err != nil || code/100 != 2 {
			t.Fatalf("delete: %d %v %s", code, err, body)
		}
		harness.Eventually(t, 30*time.Second, "deleted content's blob removed", func() error { return fileGone(p) })
		code, _, _ = api.Do(context.Background(), http.MethodGet, "/namespaces/"+ns+"/content/"+id+"/download", "", nil)
		if code != http.StatusNotFound {
			t.Fatalf("download of deleted content: %d, want 404", code)
		}
	})
}

var nsCounter int

func newNamespace(t *testing.T, api *harness.HTTP, prefix string) string {
	t.Helper()
	nsCounter++
	ns := fmt.Sprintf("%s%d", prefix, nsCounter)
	code, body, err := api.JSON(http.MethodPost, "/namespaces", wire.NamespaceRequest{Name: ns}, nil)
	if err != nil || code/100 != 2 {
		t.Fatalf("create namespace: %d %v %s", code, err, body)
	}
	return ns
}
