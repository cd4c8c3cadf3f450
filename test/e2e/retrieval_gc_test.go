package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/index"
	"github.com/indexify-go/indexify/test/harness"
)

// versionsGraph chunks a text, embeds and counts the chunks, and embeds
// the whole text as well (a vector keyed by the uploaded content's own id).
const versionsGraph = `name: versions
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 70, overlap: 0}
  - extractor: tensorlake/lexical-embedding
    name: vectors
    content_source: chunks
  - extractor: tensorlake/attributes
    name: stats
    content_source: chunks
  - extractor: tensorlake/lexical-embedding
    name: whole
`

func sortedIDs(cs []content) []string {
	ids := make([]string, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	sort.Strings(ids)
	return ids
}

// storedPoints lists the content ids and texts an embedded index holds,
// read from the files with the server stopped (every point: k above the
// count, no filter).
func storedPoints(t *testing.T, dataDir, ns, name string) map[string]string {
	t.Helper()
	st, err := index.OpenEmbedded(filepath.Join(dataDir, "indexes"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q := embed.NewLexical(embed.DefaultDim).Vector("anything")
	hits, err := st.Search(context.Background(), ns, name, q, 1000, func(*index.Point) bool { return true })
	if err != nil {
		t.Fatalf("reading index %s: %v", name, err)
	}
	out := map[string]string{}
	for _, h := range hits {
		out[h.ContentID] = h.Text
	}
	return out
}

// A new version of an upload supersedes the old one: once the GC has
// collected the old version, the old chunks' vectors and metadata rows are
// gone from the embedded stores (not only hidden by search, which drops
// hits of dead content), the new chunks' are there, and the vector keyed
// by the upload's own id holds the new text.
func TestSupersededVersionLeavesTheStores(t *testing.T) {
	dev := harness.StartDev(t, t.TempDir())
	api := dev.API
	ns := newNamespace(t, api, "supersede")
	createGraphYAML(t, api, ns, versionsGraph)

	const v1 = "Olympus Mons on Mars is the tallest volcano in the solar system. " +
		"Honey never spoils: edible honey was found in ancient Egyptian tombs."
	const v2 = "Emperor penguins huddle together through the Antarctic winter."
	id := upload(t, api, ns, "versions", "doc-1", []byte(v1), nil)
	waitContent(t, api, ns, id)
	oldChunks := sortedIDs(contentTree(t, api, ns, "versions", id, "chunks"))
	if len(oldChunks) < 2 {
		t.Fatalf("version 1 has chunks %v, want at least 2", oldChunks)
	}
	oldBlob := blobPath(t, dev.DataDir, metadata(t, api, ns, oldChunks[0]).StorageURL)
	rowIDs := func() ([]string, error) {
		code, rows, body, err := sqlQuery(api, ns, "select content_id from versions order by content_id")
		if err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("sql: %d %s %v", code, body, err)
		}
		var ids []string
		for _, r := range rows.Rows {
			ids = append(ids, fmt.Sprint(r.Data["content_id"]))
		}
		return ids, nil
	}
	if got, err := rowIDs(); err != nil || strings.Join(got, ",") != strings.Join(oldChunks, ",") {
		t.Fatalf("rows of version 1: %v %v, want %v", got, err, oldChunks)
	}

	code, body, err := uploadRaw(api, http.MethodPut, "/namespaces/"+ns+"/content/"+id, "", []byte(v2), nil)
	if err != nil || code/100 != 2 {
		t.Fatalf("new version: %d %v %s", code, err, body)
	}
	waitContent(t, api, ns, id)
	var newChunks []string
	harness.Eventually(t, 60*time.Second, "version 1 collected: its chunks' blobs and rows gone", func() error {
		if err := fileGone(oldBlob); err != nil {
			return err
		}
		newChunks = sortedIDs(contentTree(t, api, ns, "versions", id, "chunks"))
		if len(newChunks) != 1 || newChunks[0] == oldChunks[0] {
			return fmt.Errorf("live chunks %v", newChunks)
		}
		got, err := rowIDs()
		if err != nil {
			return err
		}
		if strings.Join(got, ",") != newChunks[0] {
			return fmt.Errorf("rows %v, want only the new chunk %s", got, newChunks[0])
		}
		return nil
	})

	// The vectors, read from the index files with dev stopped.
	dev.Proc.Signal(15)
	if !dev.Proc.Wait(30 * time.Second) {
		dev.Proc.Kill()
	}
	chunks := storedPoints(t, dev.DataDir, ns, "versions.vectors.embedding")
	if len(chunks) != 1 || chunks[newChunks[0]] != v2 {
		t.Fatalf("chunk vectors after the new version: %v, want only %s (%q)", chunks, newChunks[0], v2)
	}
	whole := storedPoints(t, dev.DataDir, ns, "versions.whole.embedding")
	if len(whole) != 1 || whole[id] != v2 {
		t.Fatalf("whole-text vectors after the new version: %v, want only %s with the new text", whole, id)
	}
}
