package wire

import (
	"encoding/json"
	"reflect"
	"sort"
	"testing"
)

// keys returns the JSON object keys of v, recursively for the named nested
// objects, as "a", "a.b", ...
func keys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			out = append(out, prefix+k)
			switch x := v.(type) {
			case map[string]any:
				if prefix == "" || len(x) > 0 {
					walk(prefix+k+".", x)
				}
			case []any:
				if len(x) > 0 {
					if o, ok := x[0].(map[string]any); ok {
						walk(prefix+k+"[].", o)
					}
				}
			}
		}
	}
	walk("", m)
	sort.Strings(out)
	return out
}

// The original Python client (0.0.36) reads exactly these names:
// indexes(), search_index(), list_schemas(), sql_query() and
// get_structured_data(). A rename here breaks it, so it must break this test.
func TestShapesTheOriginalClientReads(t *testing.T) {
	k := 3
	c := &Content{ID: "c", Labels: map[string]json.RawMessage{"page": json.RawMessage("1")}}
	cases := []struct {
		name string
		v    any
		want []string
	}{
		{"indexes", Indexes{Indexes: []Index{{Name: "g.p.embedding", EmbeddingSchema: EmbeddingSchema{Dim: 384, Distance: "cosine"}}}},
			[]string{"indexes", "indexes[].embedding_schema", "indexes[].embedding_schema.dim", "indexes[].embedding_schema.distance", "indexes[].name"}},
		{"search request", SearchRequest{Query: "q", K: &k, Filters: []string{"a=b"}},
			[]string{"filters", "k", "query"}},
		{"search", SearchResponse{Results: []SearchResult{{ContentID: "c", Labels: c.Labels, ContentMetadata: c, RootContentMetadata: c}}},
			[]string{"results", "results[].confidence_score", "results[].content_id", "results[].content_metadata",
				"results[].content_metadata.created_at", "results[].content_metadata.extracted_metadata", "results[].content_metadata.extraction_graph_names",
				"results[].content_metadata.hash", "results[].content_metadata.id", "results[].content_metadata.labels", "results[].content_metadata.labels.page",
				"results[].content_metadata.mime_type", "results[].content_metadata.name", "results[].content_metadata.namespace",
				"results[].content_metadata.parent_id", "results[].content_metadata.root_content_id", "results[].content_metadata.size",
				"results[].content_metadata.source", "results[].content_metadata.storage_url", "results[].content_metadata.version",
				"results[].labels", "results[].labels.page", "results[].mime_type", "results[].root_content_metadata",
				"results[].root_content_metadata.created_at", "results[].root_content_metadata.extracted_metadata", "results[].root_content_metadata.extraction_graph_names",
				"results[].root_content_metadata.hash", "results[].root_content_metadata.id", "results[].root_content_metadata.labels", "results[].root_content_metadata.labels.page",
				"results[].root_content_metadata.mime_type", "results[].root_content_metadata.name", "results[].root_content_metadata.namespace",
				"results[].root_content_metadata.parent_id", "results[].root_content_metadata.root_content_id", "results[].root_content_metadata.size",
				"results[].root_content_metadata.source", "results[].root_content_metadata.storage_url", "results[].root_content_metadata.version",
				"results[].text"}},
		{"schemas", Schemas{Schemas: []Schema{{ExtractionGraphName: "g", Namespace: "n", Columns: map[string]Column{"words": {Type: "integer"}}}}, DDLs: map[string]string{"g": "CREATE TABLE"}},
			[]string{"ddls", "ddls.g", "schemas", "schemas[].columns", "schemas[].columns.words", "schemas[].columns.words.comment", "schemas[].columns.words.type",
				"schemas[].extraction_graph_name", "schemas[].namespace"}},
		{"sql", SQLResult{Rows: []SQLRow{{Data: map[string]any{"content_id": "c"}}}},
			[]string{"rows", "rows[].data", "rows[].data.content_id"}},
		{"structured data", ContentMetadata{ContentMetadata: *c, Metadata: []Metadata{{ID: "m", ContentID: "c", Metadata: map[string]any{"words": 3}, ExtractorName: "x"}}},
			[]string{"content_metadata", "content_metadata.created_at", "content_metadata.extracted_metadata", "content_metadata.extraction_graph_names",
				"content_metadata.hash", "content_metadata.id", "content_metadata.labels", "content_metadata.labels.page", "content_metadata.mime_type",
				"content_metadata.name", "content_metadata.namespace", "content_metadata.parent_id", "content_metadata.root_content_id",
				"content_metadata.size", "content_metadata.source", "content_metadata.storage_url", "content_metadata.version",
				"metadata", "metadata[].content_id", "metadata[].extractor_name", "metadata[].id", "metadata[].metadata", "metadata[].metadata.words"}},
	}
	for _, tc := range cases {
		if got := keys(t, tc.v); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: JSON keys\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
