package api

// JSON shapes of the original API (field names as its Python client reads
// them) and their conversion from the protobuf model.

import (
	"encoding/json"
	"sort"
	"strings"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

type namespaceJSON struct {
	Name      string `json:"name"`
	CreatedAt int64  `json:"created_at,omitempty"` // unix seconds
}

type contentJSON struct {
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

type policyJSON struct {
	ID            string          `json:"id"`
	Extractor     string          `json:"extractor"`
	Name          string          `json:"name"`
	Filter        []string        `json:"filter"`
	InputParams   json.RawMessage `json:"input_params"`
	ContentSource string          `json:"content_source"`
	GraphName     string          `json:"graph_name"`
}

type graphJSON struct {
	ID                 string       `json:"id"`
	Name               string       `json:"name"`
	Namespace          string       `json:"namespace"`
	Description        string       `json:"description"`
	ExtractionPolicies []policyJSON `json:"extraction_policies"`
}

type linkJSON struct {
	GraphName       string `json:"graph_name"`
	ContentSource   string `json:"content_source"`
	LinkedGraphName string `json:"linked_graph_name"`
}

type embeddingJSON struct {
	Dim      uint32 `json:"dim"`
	Distance string `json:"distance"`
}

type outputJSON struct {
	Embedding *embeddingJSON  `json:"embedding,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

type extractorJSON struct {
	Name           string                `json:"name"`
	Description    string                `json:"description"`
	InputMimeTypes []string              `json:"input_mime_types"`
	InputParams    json.RawMessage       `json:"input_params"`
	Outputs        map[string]outputJSON `json:"outputs"`
}

type taskJSON struct {
	ID                   string          `json:"id"`
	Extractor            string          `json:"extractor"`
	ExtractionPolicyID   string          `json:"extraction_policy_id"` // the policy name (unique in its graph)
	ExtractionPolicyName string          `json:"extraction_policy_name"`
	ExtractionGraphName  string          `json:"extraction_graph_name"`
	Namespace            string          `json:"namespace"`
	ContentID            string          `json:"content_id"`
	ContentVersion       uint64          `json:"content_version"`
	ContentMetadata      *contentJSON    `json:"content_metadata"`
	InputParams          json.RawMessage `json:"input_params"`
	Outcome              string          `json:"outcome"` // unknown | success | failed
	ExecutorID           string          `json:"executor_id"`
	Attempts             uint32          `json:"attempts"`
	LastError            string          `json:"last_error,omitempty"`
	CreatedAt            int64           `json:"created_at"`   // unix seconds
	CompletedAt          int64           `json:"completed_at"` // unix seconds, 0 = not finished
}

// unixSeconds converts the model's unix milliseconds to the seconds the
// original API returned.
func unixSeconds(ms int64) int64 { return ms / 1000 }

// rawJSON returns stored JSON text as a raw value. Text that is not valid
// JSON (a hand-written label) is returned as a JSON string rather than
// breaking the whole response.
func rawJSON(text string) json.RawMessage {
	if text == "" {
		return json.RawMessage("null")
	}
	if json.Valid([]byte(text)) {
		return json.RawMessage(text)
	}
	b, _ := json.Marshal(text)
	return b
}

// objectJSON is rawJSON for values that are JSON objects by contract
// (input params, schemas): empty means {}.
func objectJSON(text string) json.RawMessage {
	if strings.TrimSpace(text) == "" {
		return json.RawMessage("{}")
	}
	return rawJSON(text)
}

func toContentJSON(c *pb.Content) *contentJSON {
	labels := make(map[string]json.RawMessage, len(c.GetLabels()))
	for k, v := range c.GetLabels() {
		labels[k] = rawJSON(v)
	}
	meta := make(map[string]json.RawMessage, len(c.GetFeatures()))
	for _, f := range c.GetFeatures() {
		meta[f.GetName()] = rawJSON(f.GetValueJson())
	}
	graphs := c.GetGraphNames()
	if graphs == nil {
		graphs = []string{}
	}
	return &contentJSON{
		ID:                   c.GetId(),
		ParentID:             c.GetParentId(),
		RootContentID:        c.GetRootContentId(),
		Namespace:            c.GetNamespace(),
		Name:                 c.GetName(),
		MimeType:             c.GetMimeType(),
		Labels:               labels,
		ExtractionGraphNames: graphs,
		StorageURL:           c.GetStorageUrl(),
		CreatedAt:            unixSeconds(c.GetCreatedAt()),
		Source:               c.GetSource(),
		Size:                 c.GetSizeBytes(),
		Hash:                 c.GetHash(),
		ExtractedMetadata:    meta,
		Version:              c.GetVersion(),
	}
}

func toContentList(cs []*pb.Content) []*contentJSON {
	out := make([]*contentJSON, 0, len(cs))
	for _, c := range cs {
		out = append(out, toContentJSON(c))
	}
	return out
}

func toGraphJSON(g *pb.ExtractionGraph) graphJSON {
	pols := make([]policyJSON, 0, len(g.GetPolicies()))
	for _, p := range g.GetPolicies() {
		filter := p.GetFilter()
		if filter == nil {
			filter = []string{}
		}
		pols = append(pols, policyJSON{
			ID:            p.GetId(),
			Extractor:     p.GetExtractor(),
			Name:          p.GetName(),
			Filter:        filter,
			InputParams:   objectJSON(p.GetInputParamsJson()),
			ContentSource: p.GetContentSource(),
			GraphName:     g.GetName(),
		})
	}
	return graphJSON{
		ID:                 g.GetId(),
		Name:               g.GetName(),
		Namespace:          g.GetNamespace(),
		Description:        g.GetDescription(),
		ExtractionPolicies: pols,
	}
}

func toExtractorJSON(e *pb.ExtractorDescription) extractorJSON {
	outs := make(map[string]outputJSON, len(e.GetOutputs()))
	for name, o := range e.GetOutputs() {
		var oj outputJSON
		if emb := o.GetEmbedding(); emb != nil {
			oj.Embedding = &embeddingJSON{Dim: emb.GetDim(), Distance: emb.GetDistance()}
		} else {
			oj.Metadata = objectJSON(o.GetMetadataSchemaJson())
		}
		outs[name] = oj
	}
	mimes := e.GetInputMimeTypes()
	if mimes == nil {
		mimes = []string{}
	}
	return extractorJSON{
		Name:           e.GetName(),
		Description:    e.GetDescription(),
		InputMimeTypes: mimes,
		InputParams:    objectJSON(e.GetInputParamsSchemaJson()),
		Outputs:        outs,
	}
}

func outcomeString(o pb.TaskOutcome) string {
	switch o {
	case pb.TaskOutcome_TASK_OUTCOME_SUCCESS:
		return "success"
	case pb.TaskOutcome_TASK_OUTCOME_FAILED:
		return "failed"
	}
	return "unknown"
}

func toTaskJSON(t *pb.Task) taskJSON {
	var content *contentJSON
	if t.GetContent() != nil {
		content = toContentJSON(t.GetContent())
	}
	return taskJSON{
		ID:                   t.GetId(),
		Extractor:            t.GetExtractor(),
		ExtractionPolicyID:   t.GetPolicyName(),
		ExtractionPolicyName: t.GetPolicyName(),
		ExtractionGraphName:  t.GetGraphName(),
		Namespace:            t.GetNamespace(),
		ContentID:            t.GetContentId(),
		ContentVersion:       t.GetContentVersion(),
		ContentMetadata:      content,
		InputParams:          objectJSON(t.GetInputParamsJson()),
		Outcome:              outcomeString(t.GetOutcome()),
		ExecutorID:           t.GetExecutorId(),
		Attempts:             t.GetAttempts(),
		LastError:            t.GetLastError(),
		CreatedAt:            unixSeconds(t.GetCreatedAt()),
		CompletedAt:          unixSeconds(t.GetCompletedAt()),
	}
}

// labelsToProto turns JSON label values into the model's JSON text,
// compacted so equal labels compare equal in filters and hashes.
func labelsToProto(in map[string]json.RawMessage) (map[string]string, error) {
	if err := checkLabelLimits(in); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(in))
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic error messages
	for _, k := range keys {
		if k == "" || strings.ContainsFunc(k, isControlOrSep) {
			return nil, badRequest(codeInvalidArgument, "label name %q is empty or contains control characters or filter operators", k)
		}
		v := in[k]
		var buf strings.Builder
		if err := compactJSON(&buf, v); err != nil {
			return nil, badRequest(codeInvalidJSON, "label %q: value is not valid JSON", k)
		}
		out[k] = buf.String()
	}
	return out, nil
}

// isControlOrSep rejects characters that would make a label name
// unaddressable in a filter expression (`key=value`, `key>3`, ...).
func isControlOrSep(r rune) bool {
	return r < 0x20 || r == 0x7f || strings.ContainsRune("=!<>", r)
}
