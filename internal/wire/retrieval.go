package wire

import "encoding/json"

// EmbeddingSchema is an index's vector shape.
type EmbeddingSchema struct {
	Dim      int    `json:"dim"`
	Distance string `json:"distance"` // cosine | dot | euclidean
}

// Index is one entry of GET /namespaces/{ns}/indexes.
type Index struct {
	Name            string          `json:"name"` // <graph>.<policy>.<output>
	EmbeddingSchema EmbeddingSchema `json:"embedding_schema"`
}

// Indexes is the body of GET /namespaces/{ns}/indexes.
type Indexes struct {
	Indexes []Index `json:"indexes"`
}

// SearchRequest is the body of POST /namespaces/{ns}/indexes/{index}/search.
type SearchRequest struct {
	Query          string   `json:"query"`
	K              *int     `json:"k,omitempty"`               // default 5
	Filters        []string `json:"filters,omitempty"`         // label expressions, as in policy filters
	IncludeContent *bool    `json:"include_content,omitempty"` // default true
}

// SearchResult is one hit, best first.
type SearchResult struct {
	ContentID           string                     `json:"content_id"`
	Text                string                     `json:"text"`
	MimeType            string                     `json:"mime_type"`
	ConfidenceScore     float32                    `json:"confidence_score"` // higher is better
	Labels              map[string]json.RawMessage `json:"labels"`
	ContentMetadata     *Content                   `json:"content_metadata"`
	RootContentMetadata *Content                   `json:"root_content_metadata"`
}

// SearchResponse is the body a search answers.
type SearchResponse struct {
	Results []SearchResult `json:"results"`
}

// Column is one column of a graph's structured-data table.
type Column struct {
	Type    string `json:"type"`
	Comment string `json:"comment"`
}

// Schema is one graph's table, in GET /namespaces/{ns}/schemas.
type Schema struct {
	ExtractionGraphName string            `json:"extraction_graph_name"`
	Namespace           string            `json:"namespace"`
	Columns             map[string]Column `json:"columns"`
}

// Schemas is the body of GET /namespaces/{ns}/schemas.
type Schemas struct {
	Schemas []Schema          `json:"schemas"`
	DDLs    map[string]string `json:"ddls"` // graph -> CREATE TABLE ...
}

// SQLQuery is the body of POST /namespaces/{ns}/sql_query.
type SQLQuery struct {
	Query string `json:"query"`
}

// SQLRow is one result row.
type SQLRow struct {
	Data map[string]any `json:"data"`
}

// SQLResult is the body a query answers.
type SQLResult struct {
	Rows []SQLRow `json:"rows"`
}

// Metadata is one structured-data row of a content, in the "metadata" list
// of GET /namespaces/{ns}/content/{id}/metadata.
type Metadata struct {
	ID            string         `json:"id"`
	ContentID     string         `json:"content_id"`
	Metadata      map[string]any `json:"metadata"`
	ExtractorName string         `json:"extractor_name"`
}

// ContentMetadata is the body of GET /namespaces/{ns}/content/{id}/metadata.
type ContentMetadata struct {
	ContentMetadata Content    `json:"content_metadata"`
	Metadata        []Metadata `json:"metadata"`
}

// ExtractorOutput is one declared output of an extractor: an embedding
// (a vector index per policy) or a metadata feature with its JSON schema.
type ExtractorOutput struct {
	Embedding *EmbeddingSchema `json:"embedding,omitempty"`
	Metadata  json.RawMessage  `json:"metadata,omitempty"`
}

// Extractor is one entry of GET /extractors.
type Extractor struct {
	Name           string                     `json:"name"`
	Description    string                     `json:"description"`
	InputMimeTypes []string                   `json:"input_mime_types"`
	InputParams    json.RawMessage            `json:"input_params"`
	Outputs        map[string]ExtractorOutput `json:"outputs"`
	// The same outputs split by kind, as the original's extractor
	// registrations carried them (embedding_schemas / metadata_schemas).
	EmbeddingSchemas map[string]EmbeddingSchema `json:"embedding_schemas"`
	MetadataSchemas  map[string]json.RawMessage `json:"metadata_schemas"`
}

// Extractors is the body of GET /extractors.
type Extractors struct {
	Extractors []Extractor `json:"extractors"`
}
