package wire

import "encoding/json"

// Request bodies clients send, and the small answers of writes.

// NamespaceRequest is the body of POST /namespaces; graphs given inline
// (GraphSpec, as JSON) are created after the namespace.
type NamespaceRequest struct {
	Name             string                     `json:"name"`
	ExtractionGraphs []json.RawMessage          `json:"extraction_graphs,omitempty"`
	Labels           map[string]json.RawMessage `json:"labels,omitempty"`
}

// GraphSpec is the body of POST /namespaces/{ns}/extraction_graphs, as
// JSON (YAML with the same keys is accepted too).
type GraphSpec struct {
	Name               string       `json:"name"`
	Namespace          string       `json:"namespace,omitempty"`
	Description        string       `json:"description,omitempty"`
	ExtractionPolicies []PolicySpec `json:"extraction_policies"`
}

// PolicySpec is one policy of a GraphSpec. Filter is a list of label
// expressions or a map of label -> value; LabelsEq is "k:v,k2:v2" or a map.
type PolicySpec struct {
	Extractor     string          `json:"extractor"`
	Name          string          `json:"name"`
	Filter        json.RawMessage `json:"filter,omitempty"`
	LabelsEq      json.RawMessage `json:"labels_eq,omitempty"`
	InputParams   json.RawMessage `json:"input_params,omitempty"`
	ContentSource string          `json:"content_source,omitempty"`
}

// IngestRemoteFile is the body of POST /namespaces/{ns}/ingest_remote_file.
type IngestRemoteFile struct {
	URL                  string                     `json:"url"`
	MimeType             string                     `json:"mime_type,omitempty"`
	Labels               map[string]json.RawMessage `json:"labels,omitempty"`
	ID                   string                     `json:"id,omitempty"`
	ExtractionGraphNames []string                   `json:"extraction_graph_names"`
}

// LabelsUpdate is the body of PUT /namespaces/{ns}/content/{id}/labels:
// the content's new labels (a missing or null "labels" is refused).
type LabelsUpdate struct {
	Labels map[string]json.RawMessage `json:"labels"`
}

// ContentIDs is the body of DELETE /namespaces/{ns}/content and its answer.
type ContentIDs struct {
	ContentIDs []string `json:"content_ids"`
}

// ContentVersion answers PUT /namespaces/{ns}/content/{id}: the version the
// upload is, and whether it made a new one (false: the bytes and labels
// equal the latest version's).
type ContentVersion struct {
	ContentID string `json:"content_id"`
	Created   bool   `json:"created"`
	Version   uint64 `json:"version"`
}

// ContentDone answers GET /namespaces/{ns}/content/{id}/wait once every
// task of the content tree has finished.
type ContentDone struct {
	ContentID string `json:"content_id"`
	Done      bool   `json:"done"`
}

// Empty is the answer of writes that return nothing (a graph deletion): {}.
type Empty struct{}
