package console

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// TestConsoleContentTable (issue 16): the content table names each file,
// links each id to its bytes and metadata, pages past 100 items with
// "more" (start_id), and shows one content's children (parent_id).
func TestConsoleContentTable(t *testing.T) {
	ctx := newBrowser(t)
	dev := harness.StartDev(t, filepath.Join(t.TempDir(), "d"))
	api := dev.API
	code, body, err := api.Do(context.Background(), "POST", "/namespaces/default/extraction_graphs", "application/x-yaml", strings.NewReader(
		"name: docs\nextraction_policies:\n  - {extractor: tensorlake/chunk-extractor, name: chunks, input_params: {chunk_size: 5, overlap: 0}}\n"))
	if err != nil || code != 200 {
		t.Fatalf("create graph: %d %v %s", code, err, body)
	}
	uploadText(t, api, strings.Repeat("abcd ", 130))
	var root string
	var total int
	harness.Eventually(t, 60*time.Second, "the text is chunked into more than 100 pieces", func() error {
		var out wire.ContentList
		if code, body, err := api.JSON(http.MethodGet, "/namespaces/default/extraction_graphs/docs/content?source=ingestion", nil, &out); err != nil || code != 200 || len(out.ContentList) != 1 {
			return fmt.Errorf("ingested content: %d %v %s", code, err, body)
		}
		root = out.ContentList[0].ID
		if code, body, err := api.JSON(http.MethodGet, "/namespaces/default/content/"+root+"/wait", nil, nil); err != nil || code != 200 {
			return fmt.Errorf("wait: %d %v %s", code, err, body)
		}
		if code, body, err := api.JSON(http.MethodGet, "/namespaces/default/extraction_graphs/docs/content?limit=1", nil, &out); err != nil || code != 200 {
			return fmt.Errorf("content: %d %v %s", code, err, body)
		}
		if total = int(out.Total); total <= 101 {
			t.Fatalf("only %d content items; the test needs more than 101", total)
		}
		return nil
	})

	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+dev.APIAddr+"/ui/")); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#content-scope", 20*time.Second, equals(fmt.Sprintf("100 of %d shown", total)))
	if links, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#content-rows a[href$="/download"]').length`)); err != nil || links != 100 {
		t.Fatalf("download links: %d %v", links, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#content-more"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#content-scope", 20*time.Second, equals(fmt.Sprintf("%d of %d shown", total, total)))
	rootRow := fmt.Sprintf(`tr[data-content=%q]`, root)
	waitText(t, ctx, rootRow, 10*time.Second, func(s string) error {
		if !strings.Contains(s, "note.txt") || !strings.Contains(s, "ingestion") {
			return fmt.Errorf("root row lacks its file name or source: %q", s)
		}
		return nil
	})
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("content-more").hidden`))
	if err != nil {
		t.Fatal(err)
	}
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector('%s a').getAttribute("href")`, rootRow)))
	if err != nil {
		t.Fatal(err)
	}
	if !hidden || href != "/namespaces/default/content/"+root+"/download" {
		t.Fatalf("after the last page: more hidden %v, root link %q", hidden, href)
	}
	code, body, err = api.Do(context.Background(), "GET", href, "", nil)
	if err != nil || code != 200 || !strings.HasPrefix(string(body), "abcd abcd") {
		t.Fatalf("GET %s: %d %v %.40q", href, code, err, body)
	}

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(rootRow+" button.children"))); err != nil {
		t.Fatal(err)
	}
	scope := waitText(t, ctx, "#content-scope", 20*time.Second, func(s string) error {
		if !strings.HasPrefix(s, "children of "+root) || !strings.HasSuffix(s, fmt.Sprintf(" of %d shown", total-1)) {
			return fmt.Errorf("scope %q", s)
		}
		return nil
	})
	parents, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#content-rows tr")].map((r) => r.children[3].textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parents {
		if p != root {
			t.Fatalf("children view (%s) lists a row with parent %q", scope, p)
		}
	}
	screenshot(t, ctx, artifactDir(t), "console-content-children.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#content-all"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#content-scope", 20*time.Second, equals(fmt.Sprintf("100 of %d shown", total)))
}
