// Package wire holds the JSON shapes of the HTTP API, answers and request
// bodies (requests.go): the one definition that the API server writes and
// parses, and the CLI client, the executor and the tests use, so a change
// of shape fails to compile instead of drifting. It also holds their
// conversions from the protobuf model (convert.go) and the executor's
// task-result upload contract and route (result.go). Field names are the
// original Indexify's (its Python client reads them). Values of labels,
// params and metadata stay raw JSON so nothing is lost between server and
// client.
package wire

import "encoding/json"

// Content is one content item's metadata.
type Content struct {
	ID                   string                     `json:"id"`
	ParentID             string                     `json:"parent_id"`
	RootContentID        string                     `json:"root_content_id"`
	Namespace            string                     `json:"namespace"`
	Name                 string                     `json:"name"`
	MimeType             string                     `json:"mime_type"`
	Labels               map[string]json.RawMessage `json:"labels"`
	ExtractionGraphNames []string                   `json:"extraction_graph_names"`
	StorageURL           string                     `json:"storage_url"`
	CreatedAt            int64                      `json:"created_at"` // unix seconds
	Source               string                     `json:"source"`
	Size                 uint64                     `json:"size"`
	Hash                 string                     `json:"hash"`
	ExtractedMetadata    map[string]json.RawMessage `json:"extracted_metadata"`
	Version              uint64                     `json:"version"`
}
