package extractors

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// AttributesName is the registered name of the attributes extractor.
const AttributesName = "tensorlake/attributes"

// AttributesFeature is the name of the metadata feature (and of the output)
// the attributes extractor produces.
const AttributesFeature = "metadata"

var attributesMetadataSchema = mustJSON(map[string]any{
	"type": "object",
	"properties": map[string]any{
		"lines":     map[string]any{"type": "integer", "minimum": 0},
		"words":     map[string]any{"type": "integer", "minimum": 0},
		"bytes":     map[string]any{"type": "integer", "minimum": 0},
		"mime_type": map[string]any{"type": "string"},
	},
	"required": []string{"lines", "words", "bytes", "mime_type"},
})

// Attributes computes simple facts about any content (line, word and byte
// counts and the sniffed mime type) as one metadata feature.
type Attributes struct{}

// NewAttributes returns the built-in attributes extractor.
func NewAttributes() *Attributes { return &Attributes{} }

// Describe implements Extractor.
func (*Attributes) Describe() *pb.ExtractorDescription {
	return &pb.ExtractorDescription{
		Name:                  AttributesName,
		Description:           "Counts lines, words and bytes of any content and sniffs its mime type.",
		InputParamsSchemaJson: `{"type":"object"}`,
		InputMimeTypes:        []string{"*/*"},
		Outputs: map[string]*pb.ExtractorOutput{
			AttributesFeature: {MetadataSchemaJson: attributesMetadataSchema},
		},
	}
}

// ContentAttributes is the value of the metadata feature.
type ContentAttributes struct {
	Lines    int    `json:"lines"`
	Words    int    `json:"words"`
	Bytes    int    `json:"bytes"`
	MimeType string `json:"mime_type"`
}

// ComputeAttributes counts like wc: lines are newline-terminated lines plus a
// final unterminated one, words are runs of non-space characters.
func ComputeAttributes(data []byte) ContentAttributes {
	lines := bytes.Count(data, []byte{'\n'})
	if len(data) > 0 && data[len(data)-1] != '\n' {
		lines++
	}
	return ContentAttributes{
		Lines:    lines,
		Words:    len(bytes.Fields(data)),
		Bytes:    len(data),
		MimeType: http.DetectContentType(data),
	}
}

// Extract implements Extractor.
func (*Attributes) Extract(_ context.Context, in Input) (*Output, error) {
	if _, err := paramsObject(in.Params); err != nil {
		return nil, err
	}
	v, err := json.Marshal(ComputeAttributes(in.Data))
	if err != nil {
		return nil, err
	}
	return &Output{Features: []*pb.Feature{{Name: AttributesFeature, ValueJson: string(v)}}}, nil
}
