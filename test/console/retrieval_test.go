package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// retrievalYAML chunks uploaded text, embeds each chunk (an index) and
// computes its attributes (a row of the graph's SQL table).
const retrievalYAML = `name: notes
description: chunk, embed and describe text
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 200, overlap: 0}
  - extractor: tensorlake/lexical-embedding
    name: embeddings
    content_source: chunks
  - extractor: tensorlake/attributes
    name: stats
    content_source: chunks
`

const (
	consoleNS    = "findings"
	consoleIndex = "notes.embeddings.embedding"
	answerText   = "Olympus Mons on Mars is the tallest volcano in the solar system."
)

// uploadTo uploads text as a text/plain file into ns's graph and returns
// the content id.
func uploadTo(t *testing.T, api *harness.HTTP, ns, graph, text string) string {
	t.Helper()
	var buf strings.Builder
	const boundary = "consoletestboundary"
	fmt.Fprintf(&buf, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"facts.txt\"\r\nContent-Type: text/plain\r\n\r\n%s\r\n--%s--\r\n", boundary, text, boundary)
	code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/"+graph+"/extract",
		"multipart/form-data; boundary="+boundary, strings.NewReader(buf.String()))
	if err != nil || code/100 != 2 {
		t.Fatalf("upload: %d %v %s", code, err, body)
	}
	var out wire.ContentID
	if err := json.Unmarshal(body, &out); err != nil || out.ContentID == "" {
		t.Fatalf("upload answer %s: %v", body, err)
	}
	return out.ContentID
}

// selectOption picks value in a <select> the way a person does: the value
// changes and a change event fires.
func selectOption(t *testing.T, ctx context.Context, id, value string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, "option "+value+" in #"+id, func() error {
		js := fmt.Sprintf(`(() => { const s = document.getElementById(%q);
			if (![...s.options].some((o) => o.value === %q)) return false;
			s.value = %q; s.dispatchEvent(new Event("change", { bubbles: true })); return true; })()`, id, value, value)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("#%s has no option %q yet", id, value)
		}
		return nil
	})
}

// clearField empties a text input or textarea before typing into it.
func clearField(id string) chromedp.Action[chromedp.Void] {
	ev := chromedp.Evaluate[bool](fmt.Sprintf(`(() => { document.getElementById(%q).value = ""; return true; })()`, id))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := ev(ctx, t)
		return chromedp.Void{}, err
	}
}

// TestConsoleSearchAndSQL drives the Search and SQL pages of the console in
// a real Chromium against a real `indexify dev`: a search finds the chunk
// holding the answer first, with its score and a working download link; an
// SQL query shows the graph's rows; a refused query shows the API's error.
func TestConsoleSearchAndSQL(t *testing.T) {
	ctx := newBrowser(t)
	dir := artifactDir(t)
	dev := harness.StartDev(t, t.TempDir())
	api := dev.API

	if code, body, err := api.JSON(http.MethodPost, "/namespaces", wire.NamespaceRequest{Name: consoleNS}, nil); err != nil || code/100 != 2 {
		t.Fatalf("create namespace: %d %v %s", code, err, body)
	}
	if code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/"+consoleNS+"/extraction_graphs",
		"application/x-yaml", strings.NewReader(retrievalYAML)); err != nil || code != 200 {
		t.Fatalf("create graph: %d %v %s", code, err, body)
	}
	// Three files of one sentence each, shorter than a chunk: one chunk
	// (and one table row) per file.
	for _, text := range []string{
		"The Pacific Ocean is the largest and deepest ocean on Earth.",
		answerText,
		"Honey never spoils: edible honey was found in ancient Egyptian tombs.",
	} {
		uploadTo(t, api, consoleNS, "notes", text)
	}
	// Wait until the API has the three chunks embedded and described, so
	// what the page shows is the finished state.
	five := 5
	harness.Eventually(t, 60*time.Second, "chunks indexed and described", func() error {
		var out wire.SQLResult
		code, body, err := api.JSON(http.MethodPost, "/namespaces/"+consoleNS+"/sql_query", wire.SQLQuery{Query: "select content_id from notes"}, &out)
		if err != nil || code != 200 || len(out.Rows) < 3 {
			return fmt.Errorf("sql: %d %v %s", code, err, body)
		}
		var res wire.SearchResponse
		code, body, err = api.JSON(http.MethodPost, "/namespaces/"+consoleNS+"/indexes/"+consoleIndex+"/search", wire.SearchRequest{Query: "volcano", K: &five}, &res)
		if err != nil || code != 200 || len(res.Results) < 3 {
			return fmt.Errorf("search: %d %v %s", code, err, body)
		}
		return nil
	})

	if err := chromedp.Do(ctx, chromedp.Navigate(api.Base+"/ui/")); err != nil {
		t.Fatal(err)
	}
	// dev also has the "default" namespace; pick ours, then the index.
	selectOption(t, ctx, "ns-select", consoleNS)
	selectOption(t, ctx, "index-select", consoleIndex)
	waitText(t, ctx, "#sql-tables", 20*time.Second, func(s string) error {
		if !strings.Contains(s, "notes (") || !strings.Contains(s, "words") {
			return fmt.Errorf("table list: %q", s)
		}
		return nil
	})

	// Search.
	if err := chromedp.Do(ctx,
		clearField("search-query"),
		chromedp.SendKeys(chromedp.CSS("#search-query"), "which is the tallest volcano on Mars?"),
		chromedp.Click(chromedp.CSS("#search-go")),
	); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#search-status", 20*time.Second, func(s string) error {
		if !strings.Contains(s, "result(s) from "+consoleIndex) || strings.HasPrefix(s, "0 ") {
			return fmt.Errorf("status: %q", s)
		}
		return nil
	})
	first := "#search-results li.hit:first-child"
	waitText(t, ctx, first+" .hit-text", 5*time.Second, func(s string) error {
		if !strings.Contains(s, "Olympus Mons") {
			return fmt.Errorf("first hit text %q, want the Olympus Mons chunk", s)
		}
		return nil
	})
	// The hit's labels are shown (a chunk's own: its index in the file).
	waitText(t, ctx, first+" .hit-labels", 5*time.Second, equals("chunk_index=0"))
	score, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(first+" .score")))
	if err != nil {
		t.Fatal(err)
	}
	link, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(first+" a"), "href"))
	if err != nil {
		t.Fatal(err)
	}
	linkText, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(first+" a")))
	if err != nil {
		t.Fatal(err)
	}
	href, ok := link.Value, link.Exists
	var sc float64
	if _, err := fmt.Sscanf(score, "%g", &sc); err != nil || sc <= 0 || sc > 1.0001 {
		t.Fatalf("first hit score %q: want a cosine similarity in (0, 1]", score)
	}
	wantHref := "/namespaces/" + consoleNS + "/content/" + linkText + "/download"
	if !ok || href != wantHref {
		t.Fatalf("first hit link %q (present %v), want %q", href, ok, wantHref)
	}
	// The link serves the chunk itself.
	code, body, err := api.Do(context.Background(), http.MethodGet, href, "", nil)
	if err != nil || code != 200 || !strings.Contains(string(body), "Olympus Mons") {
		t.Fatalf("GET %s: %d %v %q", href, code, err, body)
	}
	screenshot(t, ctx, dir, "console-search.png")

	// A label filter no chunk passes: the page says so and shows no hit.
	if err := chromedp.Do(ctx,
		clearField("search-filter"),
		chromedp.SendKeys(chromedp.CSS("#search-filter"), "chunk_index!=0"),
		chromedp.Click(chromedp.CSS("#search-go")),
	); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#search-status", 20*time.Second, equals("0 result(s) from "+consoleIndex))
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#search-results li").length`)); err != nil || n != 0 {
		t.Fatalf("hits shown for a filter no chunk passes: %d %v", n, err)
	}
	if err := chromedp.Do(ctx, clearField("search-filter")); err != nil {
		t.Fatal(err)
	}

	// SQL: the graph's rows.
	runSQL := func(q string) {
		t.Helper()
		if err := chromedp.Do(ctx,
			clearField("sql-query"),
			chromedp.SendKeys(chromedp.CSS("#sql-query"), q),
			chromedp.Click(chromedp.CSS("#sql-go")),
		); err != nil {
			t.Fatal(err)
		}
	}
	runSQL("select content_id, words from notes")
	waitText(t, ctx, "#sql-status", 20*time.Second, equals("3 row(s)"))
	waitText(t, ctx, "#sql-head", 5*time.Second, equals("content_idwords"))
	rowsText := waitText(t, ctx, "#sql-rows", 5*time.Second, func(s string) error {
		if !strings.Contains(s, linkText) {
			return fmt.Errorf("rows lack the hit's content id %s: %q", linkText, s)
		}
		return nil
	})
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#sql-rows tr td").length`))
	if err != nil {
		t.Fatal(err)
	}
	if cells != 6 {
		t.Fatalf("want 3 rows x 2 cells, got %d cells: %q", cells, rowsText)
	}
	screenshot(t, ctx, dir, "console-sql.png")

	// A write is refused by the API, and the page says why.
	runSQL("delete from notes")
	status := waitText(t, ctx, "#sql-status", 20*time.Second, func(s string) error {
		if !strings.HasPrefix(s, "query failed: ") || len(s) <= len("query failed: ") {
			return fmt.Errorf("status: %q", s)
		}
		return nil
	})
	// The page shows the API's own error text, not just a status code.
	code, body, err = api.Do(context.Background(), http.MethodPost, "/namespaces/"+consoleNS+"/sql_query", "application/json",
		strings.NewReader(`{"query":"delete from notes"}`))
	var apiErr wire.Error
	if err != nil || code != 400 || json.Unmarshal(body, &apiErr) != nil || apiErr.Error == "" {
		t.Fatalf("refused query: %d %v %s", code, err, body)
	}
	if strings.TrimSpace(status) != "query failed: "+apiErr.Error {
		t.Fatalf("page shows %q, API says %q", status, apiErr.Error)
	}
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#sql-rows tr").length`))
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("rows of the previous query still shown after an error: %d", n)
	}
	screenshot(t, ctx, dir, "console-sql-refused.png")

	// Another namespace, without indexes: the old answers go, and a search
	// says there is nothing to search instead of calling the API.
	selectOption(t, ctx, "ns-select", "default")
	harness.Eventually(t, 20*time.Second, "index list of namespace default", func() error {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.getElementById("index-select").options.length + document.querySelectorAll("#search-results li").length`))
		if err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d index options and old results still shown", n)
		}
		return nil
	})
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#search-go"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#search-status", 10*time.Second, func(s string) error {
		if !strings.HasPrefix(s, "no index in this namespace") {
			return fmt.Errorf("status: %q", s)
		}
		return nil
	})
}
