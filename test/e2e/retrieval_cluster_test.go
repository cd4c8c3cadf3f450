package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// weaviateObjects returns the root_content_id of every object Weaviate
// holds in the classes of the server's indexes, asking Weaviate's own REST
// API: a deleted content's vectors must be gone from the store, not only
// hidden by the search route (which drops hits of deleted content).
func weaviateObjects(w *harness.WeaviateServer) (map[string]int, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(path string, out any) error {
		req, err := http.NewRequest(http.MethodGet, w.URL()+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+weaviateKey)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s = %d", path, resp.StatusCode)
		}
		return json.NewDecoder(resp.Body).Decode(out)
	}
	var schema struct {
		Classes []struct {
			Class string `json:"class"`
		} `json:"classes"`
	}
	if err := get("/v1/schema", &schema); err != nil {
		return nil, err
	}
	roots := map[string]int{}
	for _, cl := range schema.Classes {
		var objs struct {
			Objects []struct {
				Properties map[string]any `json:"properties"`
			} `json:"objects"`
		}
		if err := get("/v1/objects?class="+cl.Class+"&limit=1000", &objs); err != nil {
			return nil, err
		}
		for _, o := range objs.Objects {
			root, _ := o.Properties["root_content_id"].(string)
			roots[root]++
		}
	}
	return roots, nil
}

// weaviateKey is the API key the cluster test's Weaviate requires.
const weaviateKey = "wv-cluster-test-key"

// hitIDs is the ordered content ids of a search answer.
func hitIDs(res []wire.SearchResult) string {
	ids := make([]string, len(res))
	for i, r := range res {
		ids[i] = r.ContentID
	}
	return strings.Join(ids, ",")
}

// storeUnavailable waits until the executor was answered 503 with the JSON
// error store_unavailable on a result upload (seen through the proxy it
// posts through), after answer number from.
func storeUnavailable(t *testing.T, proxy *harness.RecordingProxy, from int, what string) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, "a result upload answered 503 during the "+what+" outage", func() error {
		got, _ := proxy.Answers(from, func(a harness.Answer) bool {
			return a.Method == http.MethodPost && strings.HasSuffix(a.Path, "/result") && a.Status == http.StatusServiceUnavailable
		})
		if len(got) == 0 {
			return fmt.Errorf("no result upload answered 503 yet")
		}
		var e wire.Error
		if err := json.Unmarshal(got[0].Body, &e); err != nil || e.Code != "store_unavailable" || e.Error == "" ||
			!strings.HasPrefix(got[0].ContentType, "application/json") {
			t.Fatalf("the 503 of a result upload is not the JSON error store_unavailable: %s %q", got[0].ContentType, got[0].Body)
		}
		return nil
	})
}

// The retrieval user story on 3 coordinators and 2 API servers sharing
// S3 (blobs), Weaviate (vectors, behind an API key) and PostgreSQL
// (structured data): a PDF
// and a text file uploaded through A are searchable and queryable through
// B with the same answers; a killed coordinator leader does not stop
// reads; a PostgreSQL or a Weaviate outage makes the stores' reads and the
// executor's result uploads answer 503 (JSON), and the tasks finish once
// the store is back, without duplicates; deleting through B removes the
// vectors from Weaviate and the rows from PostgreSQL.
func TestRetrievalOnCluster(t *testing.T) {
	start := time.Now()
	phase := func(name string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), name) }
	harness.Binary(t) // built once per test binary; timed apart from the story
	phase("indexify binary built")
	s3 := harness.StartS3(t)
	pg := harness.StartPostgres(t)
	// Weaviate requires an API key, as the chart's apiKeySecret sets up.
	wv := harness.StartWeaviate(t,
		"AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED=false",
		"AUTHENTICATION_APIKEY_ENABLED=true",
		"AUTHENTICATION_APIKEY_ALLOWED_KEYS="+weaviateKey,
		"AUTHENTICATION_APIKEY_USERS=indexify")
	phase("S3, PostgreSQL and Weaviate ready")
	secrets := t.TempDir()
	dsnFile, keyFile := filepath.Join(secrets, "dsn"), filepath.Join(secrets, "weaviate-key")
	if err := os.WriteFile(dsnFile, []byte(pg.DSN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(weaviateKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := harness.NewCluster(t, 3, 61)
	for i := range c.Nodes {
		c.Start(i)
	}
	leader := c.WaitLeader(60 * time.Second)
	for i := range c.Nodes {
		c.WaitReady(i, 60*time.Second)
	}
	phase("3 coordinators ready")
	flags := append(s3Flags(s3, "retrieval"),
		"--vector-store", "weaviate", "--weaviate-url", wv.URL(), "--weaviate-api-key-file", keyFile,
		"--structured-store", "postgres", "--postgres-dsn-file", dsnFile)
	_, a := harness.StartAPIServer(t, c.Targets(), filepath.Join(t.TempDir(), "a"), flags...)
	_, b := harness.StartAPIServer(t, c.Targets(), filepath.Join(t.TempDir(), "b"), flags...)
	// The executor posts its results through A, behind a proxy that
	// records what A answers it.
	viaProxy := harness.StartRecordingProxy(t, a.Base)
	harness.Start(t, "executor", "executor", "--coordinator-addr", c.Targets(), "--api-server", viaProxy.URL)
	phase("2 API servers and an executor started")

	ns := newNamespace(t, a, "retrieval")
	createGraphWhenOffered(t, a, ns, retrievalGraph)
	var idx wire.Indexes
	// Linearizable: B may reach a coordinator a few milliseconds behind
	// the one A created the graph through (the default level lists what
	// that replica has applied).
	code, body, err := b.JSON(http.MethodGet, "/namespaces/"+ns+"/indexes?consistency=linearizable", nil, &idx)
	mustStatus(t, http.StatusOK, code, body, err, "list indexes via B")
	if len(idx.Indexes) != 2 {
		t.Fatalf("indexes via B: %s", body)
	}

	pdfID := uploadTyped(t, a, ns, "library", "facts.pdf", "application/pdf", makePDF(t, pdfPages))
	noteID := uploadTyped(t, a, ns, "library", "note.txt", "text/plain", []byte(noteText))
	waitContent(t, a, ns, pdfID)
	waitContent(t, a, ns, noteID)
	phase("PDF and text file uploaded through A and extracted")

	k := 3
	const question = "which volcano is the tallest in the solar system?"
	code, viaB, body := search(t, b, ns, "library.embeddings.embedding", wire.SearchRequest{Query: question, K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search via B")
	if len(viaB) != 3 || !strings.Contains(viaB[0].Text, "Olympus Mons") ||
		viaB[0].RootContentMetadata == nil || viaB[0].RootContentMetadata.ID != pdfID {
		t.Fatalf("search via B does not find the volcano page of %s first: %s", pdfID, body)
	}
	code, viaA, body := search(t, a, ns, "library.embeddings.embedding", wire.SearchRequest{Query: question, K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search via A")
	if hitIDs(viaA) != hitIDs(viaB) {
		t.Fatalf("A and B answer differently: %s vs %s", hitIDs(viaA), hitIDs(viaB))
	}
	// The text file went through its own chain into its own index.
	code, res, body := search(t, b, ns, "library.note-embeddings.embedding", wire.SearchRequest{Query: "rain forecast umbrella", K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search the notes via B")
	if len(res) == 0 || !strings.Contains(res[0].Text, "umbrella") || res[0].RootContentMetadata == nil || res[0].RootContentMetadata.ID != noteID {
		t.Fatalf("search via B does not find the note %s first: %s", noteID, body)
	}
	roots, err := weaviateObjects(wv)
	if err != nil || roots[pdfID] != 3 || roots[noteID] != noteChunks {
		t.Fatalf("Weaviate objects by root: %v %v, want 3 for the PDF and %d for the note", roots, err, noteChunks)
	}
	const rowsQuery = "select content_id, words from library order by content_id"
	code, rowsB, body, err := sqlQuery(b, ns, rowsQuery)
	mustStatus(t, http.StatusOK, code, body, err, "sql via B")
	if len(rowsB.Rows) != 3 {
		t.Fatalf("sql via B: want 3 rows: %s", body)
	}
	code, rowsA, bodyA, err := sqlQuery(a, ns, rowsQuery)
	mustStatus(t, http.StatusOK, code, bodyA, err, "sql via A")
	if ja, jb := fmt.Sprint(rowsA.Rows), fmt.Sprint(rowsB.Rows); ja != jb {
		t.Fatalf("sql answers differ: A %s, B %s", ja, jb)
	}
	phase("A and B give the same search and SQL answers")

	// Reads need a coordinator (content metadata): the leader's death is
	// absorbed by the API server's failover to the survivors.
	c.Nodes[leader].Kill()
	harness.Eventually(t, 30*time.Second, "search and SQL via B answer without the old leader", func() error {
		code, res, body := search(t, b, ns, "library.embeddings.embedding", wire.SearchRequest{Query: question, K: &k})
		if code != http.StatusOK || hitIDs(res) != hitIDs(viaB) {
			return fmt.Errorf("search %d %s", code, body)
		}
		code, rows, body, err := sqlQuery(b, ns, rowsQuery)
		if err != nil || code != http.StatusOK || len(rows.Rows) != 3 {
			return fmt.Errorf("sql %d %s %v", code, body, err)
		}
		return nil
	})
	c.WaitLeader(30 * time.Second)
	phase("leader killed; reads answer")

	// PostgreSQL down: a SQL query answers 503 with the JSON error, and
	// the stats tasks of a new PDF cannot store their rows: their result
	// uploads answer 503 (the executor retries). PostgreSQL back: the
	// tasks finish and the rows are there.
	_, mark := viaProxy.Answers(0, func(harness.Answer) bool { return false })
	pg.Stop(t)
	code, _, body, err = sqlQuery(b, ns, rowsQuery)
	checkError(t, code, body, err, http.StatusServiceUnavailable)
	secondID := uploadTyped(t, a, ns, "library", "more.pdf", "application/pdf", makePDF(t, []string{
		"The blue whale is the largest animal known to have ever lived, longer than a basketball court.",
	}))
	storeUnavailable(t, viaProxy, mark, "PostgreSQL")
	pg.Start(t)
	phase("PostgreSQL outage: result upload answered 503; PostgreSQL restarted")
	waitContent(t, a, ns, secondID)
	harness.Eventually(t, 60*time.Second, "the second PDF's row stored after the outage", func() error {
		code, rows, body, err := sqlQuery(b, ns, rowsQuery)
		if err != nil || code != http.StatusOK || len(rows.Rows) != 4 {
			return fmt.Errorf("sql %d %s %v", code, body, err)
		}
		return nil
	})
	code, res, body = search(t, b, ns, "library.embeddings.embedding", wire.SearchRequest{Query: "largest animal whale", K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search for the second PDF")
	if len(res) == 0 || res[0].RootContentMetadata == nil || res[0].RootContentMetadata.ID != secondID {
		t.Fatalf("the second PDF is not found first: %s", body)
	}
	phase("tasks retried and finished after the PostgreSQL outage")

	// Weaviate down: a search answers 503 with the JSON error, and the
	// embedding task of a new text file cannot store its vector: its
	// result upload answers 503. Weaviate back (same data): the task
	// finishes, the note is found, and it has one object, not one per try.
	_, mark = viaProxy.Answers(0, func(harness.Answer) bool { return false })
	// A graceful stop: a SIGKILL without ASYNC_INDEXING loses the vector
	// index (internal/index/DESIGN.md, "Crashes"), which is not what this
	// checks.
	wv.Shutdown()
	code, _, body = search(t, b, ns, "library.embeddings.embedding", wire.SearchRequest{Query: question, K: &k})
	checkError(t, code, body, nil, http.StatusServiceUnavailable)
	thirdID := uploadTyped(t, a, ns, "library", "penguins.txt", "text/plain", []byte("Emperor penguins huddle together through the Antarctic winter."))
	storeUnavailable(t, viaProxy, mark, "Weaviate")
	wv.Start()
	phase("Weaviate outage: search and result upload answered 503; Weaviate restarted")
	waitContent(t, a, ns, thirdID)
	code, res, body = search(t, b, ns, "library.note-embeddings.embedding", wire.SearchRequest{Query: "penguins in the Antarctic winter", K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search for the note written after the outage")
	if len(res) == 0 || res[0].ContentMetadata == nil || res[0].RootContentMetadata == nil || res[0].RootContentMetadata.ID != thirdID {
		t.Fatalf("the note uploaded during the outage is not found first: %s", body)
	}
	code, viaA, body = search(t, a, ns, "library.embeddings.embedding", wire.SearchRequest{Query: question, K: &k})
	mustStatus(t, http.StatusOK, code, body, nil, "search via A after the Weaviate outage")
	if len(viaA) == 0 || viaA[0].RootContentMetadata == nil || viaA[0].RootContentMetadata.ID != pdfID {
		t.Fatalf("the volcano page is not found first after the outage: %s", body)
	}
	phase("tasks retried and finished after the Weaviate outage")

	// Deleting the first PDF through B: its vectors leave Weaviate and its
	// rows leave PostgreSQL; the others' stay.
	roots, err = weaviateObjects(wv)
	if err != nil || roots[pdfID] != 3 || roots[secondID] != 1 || roots[noteID] != noteChunks || roots[thirdID] != 1 {
		t.Fatalf("Weaviate objects by root before delete (want 3 PDF pages, 1 whale page, %d note chunks, 1 penguin note): %v %v",
			noteChunks, roots, err)
	}
	code, body, err = b.JSON(http.MethodDelete, "/namespaces/"+ns+"/content", map[string][]string{"content_ids": {pdfID}}, nil)
	mustStatus(t, http.StatusOK, code, body, err, "delete via B")
	harness.Eventually(t, 60*time.Second, "deleted PDF's vectors and rows gone from the stores", func() error {
		roots, err := weaviateObjects(wv)
		if err != nil {
			return err
		}
		if roots[pdfID] != 0 || roots[secondID] != 1 || roots[noteID] != noteChunks || roots[thirdID] != 1 {
			return fmt.Errorf("Weaviate objects by root: %v", roots)
		}
		code, rows, body, err := sqlQuery(a, ns, rowsQuery)
		if err != nil || code != http.StatusOK || len(rows.Rows) != 1 {
			return fmt.Errorf("sql %d %s %v", code, body, err)
		}
		return nil
	})
	phase("delete through B collected from Weaviate and PostgreSQL")
}
