package apiclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/apiclient"
	"github.com/indexify-go/indexify/test/harness"
)

const spec = `name: docs
description: chunks and their stats
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 20, overlap: 0}
  - extractor: tensorlake/attributes
    name: stats
    content_source: chunks
`

// TestAgainstDev drives every client call against a real `indexify dev`.
func TestAgainstDev(t *testing.T) {
	dev := harness.StartDev(t, t.TempDir())
	c, err := apiclient.New("http://" + dev.APIAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if err := c.CreateNamespace(ctx, "books"); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Namespace(ctx, "books"); err != nil || n.Name != "books" {
		t.Fatalf("Namespace(books) = %+v, %v", n, err)
	}
	nss, err := c.Namespaces(ctx)
	if err != nil || len(nss) != 2 {
		t.Fatalf("Namespaces = %+v, %v (want default and books)", nss, err)
	}
	_, err = c.Namespace(ctx, "missing")
	var apiErr *apiclient.Error
	if !apiclient.IsNotFound(err) || !errors.As(err, &apiErr) || apiErr.Code != "not_found" {
		t.Fatalf("Namespace(missing) error = %v", err)
	}

	g, err := c.CreateGraph(ctx, "books", []byte(spec))
	if err != nil || g.Name != "docs" || len(g.ExtractionPolicies) != 2 || g.ExtractionPolicies[1].ContentSource != "chunks" {
		t.Fatalf("CreateGraph = %+v, %v", g, err)
	}
	if _, err := c.CreateGraph(ctx, "books", []byte("name: [")); err == nil || !errors.As(err, &apiErr) || apiErr.Status != 400 {
		t.Fatalf("bad spec error = %v", err)
	}

	text := "The quick brown fox jumps over the lazy dog, twice over."
	var seen int64
	id, err := c.Upload(ctx, "books", "docs", "fox.txt", strings.NewReader(text), map[string]any{"lang": "en"},
		func(n int64) { seen = n })
	if err != nil || id == "" {
		t.Fatalf("Upload = %q, %v", id, err)
	}
	if seen != int64(len(text)) {
		t.Fatalf("progress reported %d bytes, want %d", seen, len(text))
	}
	if err := c.WaitContent(ctx, "books", id); err != nil {
		t.Fatal(err)
	}
	meta, err := c.ContentMetadata(ctx, "books", id)
	if err != nil || meta.Name != "fox.txt" || meta.Size != uint64(len(text)) || string(meta.Labels["lang"]) != `"en"` {
		t.Fatalf("ContentMetadata = %+v, %v", meta, err)
	}
	chunks, total, err := c.Content(ctx, "books", "docs", apiclient.ContentQuery{Source: "chunks", ParentID: id})
	if err != nil || len(chunks) < 3 || total != uint64(len(chunks)) {
		t.Fatalf("Content(chunks) = %d items (total %d), %v", len(chunks), total, err)
	}
	tasks, _, err := c.Tasks(ctx, "books", "docs", "stats", "", 0)
	if err != nil || len(tasks) != len(chunks) {
		t.Fatalf("Tasks(stats) = %d, %v; want one per chunk (%d)", len(tasks), err, len(chunks))
	}
	for _, tk := range tasks {
		if tk.Outcome != "success" || tk.Extractor != "tensorlake/attributes" {
			t.Fatalf("task %+v", tk)
		}
	}
	execs, err := c.Executors(ctx)
	if err != nil || len(execs) != 1 || len(execs[0].Extractors) < 2 {
		t.Fatalf("Executors = %+v, %v", execs, err)
	}
	st, err := c.Cluster(ctx)
	if err != nil || st.LeaderID != "dev-0" || len(st.Members) != 1 || !st.Members[0].Voter {
		t.Fatalf("Cluster = %+v, %v", st, err)
	}

	if err := c.DeleteContent(ctx, "books", []string{id}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "deleted content gone", func() error {
		if _, err := c.ContentMetadata(ctx, "books", id); !apiclient.IsNotFound(err) {
			return errors.New("still there")
		}
		return nil
	})
	if err := c.DeleteGraph(ctx, "books", "docs"); err != nil {
		t.Fatal(err)
	}
	if gs, err := c.Graphs(ctx, "books"); err != nil || len(gs) != 0 {
		t.Fatalf("Graphs after delete = %+v, %v", gs, err)
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "localhost:8900", "ftp://x", "http://"} {
		if _, err := apiclient.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}
