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

// TestConsoleTaskBadgesPastTheFirstPage (issue 16): a policy with more than
// 100 tasks (one per chunk) shows its state on every chunk's row, not only
// on the chunks whose tasks are among the first 100; the task table lists
// the first 100 of them and says how many there are.
func TestConsoleTaskBadgesPastTheFirstPage(t *testing.T) {
	ctx := newBrowser(t)
	dev := harness.StartDev(t, filepath.Join(t.TempDir(), "d"))
	api := dev.API
	code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/default/extraction_graphs", "application/x-yaml", strings.NewReader(
		"name: docs\nextraction_policies:\n"+
			"  - {extractor: tensorlake/chunk-extractor, name: chunks, input_params: {chunk_size: 5, overlap: 0}}\n"+
			"  - {extractor: tensorlake/attributes, name: stats, content_source: chunks}\n"))
	if err != nil || code != 200 {
		t.Fatalf("create graph: %d %v %s", code, err, body)
	}
	uploadText(t, api, strings.Repeat("abcd ", 130))
	var chunks int
	harness.Eventually(t, 120*time.Second, "a stats task finished for every chunk", func() error {
		var content wire.ContentList
		if code, body, err := api.JSON(http.MethodGet, "/namespaces/default/extraction_graphs/docs/content?limit=1", nil, &content); err != nil || code != 200 {
			return fmt.Errorf("content: %d %v %s", code, err, body)
		}
		var an wire.TaskAnalytics
		if code, body, err := api.JSON(http.MethodGet, "/namespaces/default/extraction_graphs/docs/analytics", nil, &an); err != nil || code != 200 {
			return fmt.Errorf("analytics: %d %v %s", code, err, body)
		}
		chunks = int(content.Total) - 1
		if st := an.TaskAnalytics["stats"]; chunks < 1 || st.Success != uint64(chunks) || st.Pending != 0 {
			return fmt.Errorf("%d chunks, stats tasks %+v", chunks, st)
		}
		return nil
	})
	if chunks <= 101 {
		t.Fatalf("only %d chunks; the test needs more than 101", chunks)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+dev.APIAddr+"/ui/")); err != nil {
		t.Fatal(err)
	}
	all := chunks + 1 // the chunks and the uploaded text
	waitText(t, ctx, "#content-scope", 20*time.Second, equals(fmt.Sprintf("100 of %d shown", all)))
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#content-more"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#content-scope", 20*time.Second, equals(fmt.Sprintf("%d of %d shown", all, all)))
	harness.Eventually(t, 20*time.Second, "every chunk row shows its stats task's state", func() error {
		badges, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll("#content-rows tr")].filter((r) => r.children[2].textContent === "chunks").map((r) => r.children[6].textContent.trim())`))
		if err != nil {
			return err
		}
		missing := 0
		for _, b := range badges {
			if b != "stats: success" {
				missing++
			}
		}
		if len(badges) != chunks || missing != 0 {
			return fmt.Errorf("%d chunk rows (want %d), %d without the badge \"stats: success\"", len(badges), chunks, missing)
		}
		return nil
	})
	waitText(t, ctx, "#task-scope", 20*time.Second, equals(fmt.Sprintf("100 of %d shown", chunks+1)))
}
