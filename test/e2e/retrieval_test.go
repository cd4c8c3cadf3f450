package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"codeberg.org/go-pdf/fpdf"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// retrievalGraph: a PDF becomes pages, pages become chunks, chunks get an
// embedding (searchable) and attributes (SQL rows). Text uploads are
// chunked and embedded by a second chain into a second index.
const retrievalGraph = `name: library
extraction_policies:
  - extractor: tensorlake/pdf-extractor
    name: pages
  - extractor: tensorlake/chunk-extractor
    name: chunks
    content_source: pages
    input_params: {chunk_size: 400, overlap: 0}
  - extractor: tensorlake/lexical-embedding
    name: embeddings
    content_source: chunks
  - extractor: tensorlake/attributes
    name: stats
    content_source: chunks
  - extractor: tensorlake/chunk-extractor
    name: notes
    input_params: {chunk_size: 80, overlap: 0}
  - extractor: tensorlake/lexical-embedding
    name: note-embeddings
    content_source: notes
    input_params: {dim: 256}
`

// noteText is the text file of the user story: the notes policy (chunks
// of 80 characters) cuts it into noteChunks chunks.
const noteText = "Bring an umbrella tomorrow. The weather forecast says heavy rain in the afternoon.\nBuy milk, eggs and bread at the corner shop before it closes at six."

const noteChunks = 2

var pdfPages = []string{
	"The Pacific Ocean is the largest and deepest ocean on Earth, covering about a third of the planet's surface.",
	"Olympus Mons on Mars is the tallest volcano in the solar system, nearly three times the height of Mount Everest.",
	"Honey never spoils: archaeologists have found edible honey in ancient Egyptian tombs thousands of years old.",
}

func makePDF(t *testing.T, pages []string) []byte {
	t.Helper()
	f := fpdf.New("P", "mm", "A4", "")
	f.SetFont("Helvetica", "", 12)
	for _, p := range pages {
		f.AddPage()
		f.MultiCell(0, 6, p, "", "L", false)
	}
	var buf bytes.Buffer
	if err := f.Output(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// uploadTyped uploads data as a file part with an explicit media type.
func uploadTyped(t *testing.T, api *harness.HTTP, ns, graph, name, mime string, data []byte) string {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
	h.Set("Content-Type", mime)
	fw, _ := mw.CreatePart(h)
	_, _ = fw.Write(data)
	_ = mw.Close()
	code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/"+graph+"/extract", mw.FormDataContentType(), &buf)
	if err != nil || code/100 != 2 {
		t.Fatalf("upload %s: %d %v %s", name, code, err, body)
	}
	var out wire.ContentID
	if err := json.Unmarshal(body, &out); err != nil || out.ContentID == "" {
		t.Fatalf("upload answer %s: %v", body, err)
	}
	return out.ContentID
}

func search(t *testing.T, api *harness.HTTP, ns, index string, req wire.SearchRequest) (int, []wire.SearchResult, []byte) {
	t.Helper()
	var out wire.SearchResponse
	code, body, err := api.JSON(http.MethodPost, "/namespaces/"+ns+"/indexes/"+index+"/search", req, &out)
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	return code, out.Results, body
}

func sqlQuery(api *harness.HTTP, ns, q string) (int, wire.SQLResult, []byte, error) {
	var out wire.SQLResult
	code, body, err := api.JSON(http.MethodPost, "/namespaces/"+ns+"/sql_query", wire.SQLQuery{Query: q}, &out)
	return code, out, body, err
}

// The user story of retrieval on `indexify dev` with nothing installed:
// upload a PDF and a text file, wait, search returns the chunk holding the
// answer first, SQL returns the metadata rows; after a restart both still
// answer; deleting the content removes its vectors and rows.
func TestRetrievalOnDev(t *testing.T) {
	dev := harness.StartDev(t, t.TempDir())
	api := dev.API
	ns := newNamespace(t, api, "retrieval")
	createGraphYAML(t, api, ns, retrievalGraph)

	// Indexes exist as soon as the graph does, named <graph>.<policy>.<output>.
	var idx wire.Indexes
	code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/indexes", nil, &idx)
	mustStatus(t, http.StatusOK, code, body, err, "list indexes")
	want := map[string]int{"library.embeddings.embedding": 384, "library.note-embeddings.embedding": 256}
	if len(idx.Indexes) != len(want) {
		t.Fatalf("indexes %+v, want %v", idx.Indexes, want)
	}
	for _, i := range idx.Indexes {
		if want[i.Name] != i.EmbeddingSchema.Dim || i.EmbeddingSchema.Distance != "cosine" {
			t.Fatalf("index %+v, want dims %v and cosine", i, want)
		}
	}

	pdfID := uploadTyped(t, api, ns, "library", "facts.pdf", "application/pdf", makePDF(t, pdfPages))
	noteID := uploadTyped(t, api, ns, "library", "note.txt", "text/plain", []byte(noteText))
	waitContent(t, api, ns, pdfID)
	waitContent(t, api, ns, noteID)

	// The chunk with the answer comes first, with text, score, labels and
	// the metadata of its content and of the uploaded PDF.
	k := 3
	code, res, body := search(t, api, ns, "library.embeddings.embedding", wire.SearchRequest{Query: "which volcano is the tallest in the solar system?", K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search")
	if len(res) != 3 {
		t.Fatalf("got %d results, want 3 (one chunk per page): %s", len(res), body)
	}
	top := res[0]
	if !strings.Contains(top.Text, "Olympus Mons") || top.ConfidenceScore <= res[1].ConfidenceScore {
		t.Fatalf("top hit is not the volcano page: %s", body)
	}
	if top.ContentMetadata == nil || top.ContentMetadata.ID != top.ContentID || top.MimeType != "text/plain" {
		t.Fatalf("top hit lacks its content metadata: %s", body)
	}
	if top.RootContentMetadata == nil || top.RootContentMetadata.ID != pdfID || top.RootContentMetadata.MimeType != "application/pdf" {
		t.Fatalf("top hit's root is not the PDF %s: %s", pdfID, body)
	}
	if _, ok := top.Labels["chunk_index"]; !ok {
		t.Fatalf("top hit has no labels: %s", body)
	}
	// The text index answers the note, and a label filter applies.
	code, res, body = search(t, api, ns, "library.note-embeddings.embedding", wire.SearchRequest{Query: "rain forecast umbrella", K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search notes")
	if len(res) == 0 || !strings.Contains(res[0].Text, "umbrella") {
		t.Fatalf("note search: %s", body)
	}
	code, res, body = search(t, api, ns, "library.note-embeddings.embedding", wire.SearchRequest{Query: "rain forecast umbrella", K: &k, Filters: []string{"chunk_index!=0"}})
	mustStatus(t, http.StatusOK, code, body, nil, "filtered search")
	for _, r := range res {
		if string(r.Labels["chunk_index"]) == "0" {
			t.Fatalf("filter chunk_index!=0 returned chunk 0: %s", body)
		}
	}

	// Bad searches are 4xx with a JSON body.
	for _, tc := range []struct {
		index string
		req   wire.SearchRequest
		want  int
	}{
		{"library.nope.embedding", wire.SearchRequest{Query: "x"}, http.StatusNotFound},
		{"library.embeddings.embedding", wire.SearchRequest{Query: ""}, http.StatusBadRequest},
		{"library.embeddings.embedding", wire.SearchRequest{Query: "x", K: new(int)}, http.StatusBadRequest},
		{"library.embeddings.embedding", wire.SearchRequest{Query: "x", Filters: []string{"=="}}, http.StatusBadRequest},
	} {
		code, _, body := search(t, api, ns, tc.index, tc.req)
		checkError(t, code, body, nil, tc.want)
	}

	// Structured data: one table per graph, rows of the chunks' attributes.
	var schemas wire.Schemas
	code, body, err = api.JSON(http.MethodGet, "/namespaces/"+ns+"/schemas", nil, &schemas)
	mustStatus(t, http.StatusOK, code, body, err, "schemas")
	if len(schemas.Schemas) != 1 || schemas.Schemas[0].ExtractionGraphName != "library" || schemas.Schemas[0].Columns["words"].Type == "" ||
		!strings.Contains(strings.ToUpper(schemas.DDLs["library"]), "CREATE TABLE") {
		t.Fatalf("schemas: %s", body)
	}
	code, rows, body, err := sqlQuery(api, ns, "select content_id, words from library where words > 5")
	mustStatus(t, http.StatusOK, code, body, err, "sql")
	if len(rows.Rows) != 3 {
		t.Fatalf("sql rows: %s", body)
	}
	for _, q := range []string{"delete from library", "select 1; select 2", "select * from sqlite_master", "select * from nope", "drop table library"} {
		code, _, body, err := sqlQuery(api, ns, q)
		checkError(t, code, body, err, http.StatusBadRequest)
	}
	// The client's get_structured_data sees the rows through the metadata route.
	var cm wire.ContentMetadata
	code, body, err = api.JSON(http.MethodGet, "/namespaces/"+ns+"/content/"+top.ContentID+"/metadata", nil, &cm)
	mustStatus(t, http.StatusOK, code, body, err, "content metadata")
	// The top hit is a chunk: the stats policy ran on it.
	if len(cm.Metadata) != 1 || cm.Metadata[0].ContentID != top.ContentID || cm.Metadata[0].Metadata["words"] == nil {
		t.Fatalf("structured metadata of %s: %s", top.ContentID, body)
	}

	// Restart: the embedded stores are files in the data dir.
	dev.Restart()
	api = dev.API
	code, res, body = search(t, api, ns, "library.embeddings.embedding", wire.SearchRequest{Query: "tallest volcano", K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search after restart")
	if len(res) == 0 || !strings.Contains(res[0].Text, "Olympus Mons") {
		t.Fatalf("search after restart: %s", body)
	}

	// Deleting the PDF removes its vectors and rows (through the GC).
	code, body, err = api.JSON(http.MethodDelete, "/namespaces/"+ns+"/content", map[string][]string{"content_ids": {pdfID}}, nil)
	mustStatus(t, http.StatusOK, code, body, err, "delete")
	harness.Eventually(t, 60*time.Second, "deleted PDF's chunks gone from search and SQL", func() error {
		code, res, body := search(t, api, ns, "library.embeddings.embedding", wire.SearchRequest{Query: "tallest volcano", K: &k})
		if code != http.StatusOK || len(res) != 0 {
			return fmt.Errorf("search still answers %d %s", code, body)
		}
		code, rows, body, err := sqlQuery(api, ns, "select content_id from library")
		if err != nil || code != http.StatusOK || len(rows.Rows) != 0 {
			return fmt.Errorf("sql still answers %d %s %v", code, body, err)
		}
		return nil
	})
}
