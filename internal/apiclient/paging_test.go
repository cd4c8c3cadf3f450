package apiclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/api"
	"github.com/indexify-go/indexify/internal/apiclient"
	"github.com/indexify-go/indexify/test/harness"
)

// The server answers at most apiclient.PageSize items per list request
// (limit 0 or absent included); ContentAll and TasksAll page with start_id.
func TestPagingAgainstDev(t *testing.T) {
	if apiclient.PageSize != api.MaxPageSize {
		t.Fatalf("apiclient.PageSize %d != api.MaxPageSize %d", apiclient.PageSize, api.MaxPageSize)
	}
	dev := harness.StartDev(t, t.TempDir())
	c, err := apiclient.New("http://" + dev.APIAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	spec := "name: pages\nextraction_policies:\n  - {extractor: tensorlake/chunk-extractor, name: chars, input_params: {chunk_size: 1}}\n"
	if _, err := c.CreateGraph(ctx, "default", []byte(spec)); err != nil {
		t.Fatal(err)
	}
	const n = apiclient.PageSize + 500
	id, err := c.Upload(ctx, "default", "pages", "a.txt", strings.NewReader(strings.Repeat("x", n)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitContent(ctx, "default", id); err != nil {
		t.Fatal(err)
	}
	q := apiclient.ContentQuery{Source: "chars"}
	page, total, err := c.Content(ctx, "default", "pages", q)
	if err != nil || len(page) != apiclient.PageSize || total != n {
		t.Fatalf("one request: %d items, total %d, %v; want %d of %d", len(page), total, err, apiclient.PageSize, n)
	}
	all, err := c.ContentAll(ctx, "default", "pages", q, 0)
	if err != nil || len(all) != n {
		t.Fatalf("ContentAll: %d items, %v; want %d", len(all), err, n)
	}
	seen := map[string]bool{}
	for _, it := range all {
		if seen[it.ID] {
			t.Fatalf("ContentAll returned %s twice", it.ID)
		}
		seen[it.ID] = true
	}
	if some, err := c.ContentAll(ctx, "default", "pages", q, apiclient.PageSize+1); err != nil || len(some) != apiclient.PageSize+1 {
		t.Fatalf("ContentAll(max %d): %d, %v", apiclient.PageSize+1, len(some), err)
	}
	if ts, err := c.TasksAll(ctx, "default", "pages", "chars", "", 0); err != nil || len(ts) != 1 {
		t.Fatalf("TasksAll: %d, %v", len(ts), err)
	}
	if _, _, err := c.Content(ctx, "default", "pages", apiclient.ContentQuery{Limit: apiclient.PageSize + 1}); err == nil {
		t.Fatal("a page larger than PageSize was not refused")
	}
}
