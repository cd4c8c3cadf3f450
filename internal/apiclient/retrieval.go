package apiclient

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/indexify-go/indexify/internal/wire"
)

// Indexes lists a namespace's vector indexes.
func (c *Client) Indexes(ctx context.Context, ns string) ([]wire.Index, error) {
	var out wire.Indexes
	err := c.get(ctx, "/namespaces/"+esc(ns)+"/indexes", &out)
	return out.Indexes, err
}

// Search asks an index for the k contents nearest to query.
func (c *Client) Search(ctx context.Context, ns, index string, req wire.SearchRequest) ([]wire.SearchResult, error) {
	var out wire.SearchResponse
	err := c.sendJSON(ctx, http.MethodPost, "/namespaces/"+esc(ns)+"/indexes/"+esc(index)+"/search", req, &out)
	return out.Results, err
}

// Schemas lists a namespace's structured-data tables.
func (c *Client) Schemas(ctx context.Context, ns string) (wire.Schemas, error) {
	var out wire.Schemas
	err := c.get(ctx, "/namespaces/"+esc(ns)+"/schemas", &out)
	return out, err
}

// SQL runs one read-only query over a namespace's tables.
func (c *Client) SQL(ctx context.Context, ns, query string) ([]wire.SQLRow, error) {
	var out wire.SQLResult
	err := c.sendJSON(ctx, http.MethodPost, "/namespaces/"+esc(ns)+"/sql_query", wire.SQLQuery{Query: query}, &out)
	return out.Rows, err
}

// StructuredMetadata returns a content's metadata rows.
func (c *Client) StructuredMetadata(ctx context.Context, ns, id string) ([]wire.Metadata, error) {
	var out wire.ContentMetadata
	err := c.get(ctx, "/namespaces/"+esc(ns)+"/content/"+esc(id)+"/metadata", &out)
	return out.Metadata, err
}

// Download copies a content's bytes (its latest version) to w.
func (c *Client) Download(ctx context.Context, ns, id string, w io.Writer) (int64, error) {
	path := "/namespaces/" + esc(ns) + "/content/" + esc(id) + "/download"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, decodeError(resp, path)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("GET %s: %w", path, err)
	}
	return n, nil
}

// Extractors lists the registered extractors and their declared outputs.
func (c *Client) Extractors(ctx context.Context) ([]wire.Extractor, error) {
	var out wire.Extractors
	err := c.get(ctx, "/extractors", &out)
	return out.Extractors, err
}
