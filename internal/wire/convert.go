package wire

// Conversions from the protobuf model to the JSON shapes. They live here,
// next to the shapes, so a field added to one is added to the other.

import (
	"encoding/json"
	"strings"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// UnixSeconds converts the model's unix milliseconds to the seconds the
// original API returned.
func UnixSeconds(ms int64) int64 { return ms / 1000 }

// RawJSON returns stored JSON text as a raw value. Text that is not valid
// JSON (a hand-written label) is returned as a JSON string rather than
// breaking the whole response.
func RawJSON(text string) json.RawMessage {
	if text == "" {
		return json.RawMessage("null")
	}
	if json.Valid([]byte(text)) {
		return json.RawMessage(text)
	}
	b, _ := json.Marshal(text)
	return b
}

// ObjectJSON is RawJSON for values that are JSON objects by contract
// (input params, schemas): empty means {}.
func ObjectJSON(text string) json.RawMessage {
	if strings.TrimSpace(text) == "" {
		return json.RawMessage("{}")
	}
	return RawJSON(text)
}

// ContentFromProto converts a content item. StorageURL is the model's URL
// as is; the API server replaces it with its public form.
func ContentFromProto(c *pb.Content) *Content {
	labels := make(map[string]json.RawMessage, len(c.GetLabels()))
	for k, v := range c.GetLabels() {
		labels[k] = RawJSON(v)
	}
	meta := make(map[string]json.RawMessage, len(c.GetFeatures()))
	for _, f := range c.GetFeatures() {
		meta[f.GetName()] = RawJSON(f.GetValueJson())
	}
	graphs := c.GetGraphNames()
	if graphs == nil {
		graphs = []string{}
	}
	return &Content{
		ID:                   c.GetId(),
		ParentID:             c.GetParentId(),
		RootContentID:        c.GetRootContentId(),
		Namespace:            c.GetNamespace(),
		Name:                 c.GetName(),
		MimeType:             c.GetMimeType(),
		Labels:               labels,
		ExtractionGraphNames: graphs,
		StorageURL:           c.GetStorageUrl(),
		CreatedAt:            UnixSeconds(c.GetCreatedAt()),
		Source:               c.GetSource(),
		Size:                 c.GetSizeBytes(),
		Hash:                 c.GetHash(),
		ExtractedMetadata:    meta,
		Version:              c.GetVersion(),
	}
}

// NamespaceFromProto converts a namespace.
func NamespaceFromProto(n *pb.Namespace) Namespace {
	return Namespace{Name: n.GetName(), CreatedAt: UnixSeconds(n.GetCreatedAt())}
}

// GraphFromProto converts an extraction graph and its policies.
func GraphFromProto(g *pb.ExtractionGraph) Graph {
	pols := make([]Policy, 0, len(g.GetPolicies()))
	for _, p := range g.GetPolicies() {
		filter := p.GetFilter()
		if filter == nil {
			filter = []string{}
		}
		pols = append(pols, Policy{
			ID:            p.GetId(),
			Extractor:     p.GetExtractor(),
			Name:          p.GetName(),
			Filter:        filter,
			InputParams:   ObjectJSON(p.GetInputParamsJson()),
			ContentSource: p.GetContentSource(),
			GraphName:     g.GetName(),
		})
	}
	return Graph{
		ID:                 g.GetId(),
		Name:               g.GetName(),
		Namespace:          g.GetNamespace(),
		Description:        g.GetDescription(),
		ExtractionPolicies: pols,
	}
}

// LinkFromProto converts a graph link.
func LinkFromProto(l *pb.GraphLink) Link {
	return Link{GraphName: l.GetGraphName(), ContentSource: l.GetContentSource(), LinkedGraphName: l.GetLinkedGraphName()}
}

// ExtractorFromProto converts an extractor's description.
func ExtractorFromProto(e *pb.ExtractorDescription) Extractor {
	outs := make(map[string]ExtractorOutput, len(e.GetOutputs()))
	embs := map[string]EmbeddingSchema{}
	metas := map[string]json.RawMessage{}
	for name, o := range e.GetOutputs() {
		var oj ExtractorOutput
		if emb := o.GetEmbedding(); emb != nil {
			oj.Embedding = &EmbeddingSchema{Dim: int(emb.GetDim()), Distance: emb.GetDistance()}
			embs[name] = *oj.Embedding
		} else {
			oj.Metadata = ObjectJSON(o.GetMetadataSchemaJson())
			metas[name] = oj.Metadata
		}
		outs[name] = oj
	}
	mimes := e.GetInputMimeTypes()
	if mimes == nil {
		mimes = []string{}
	}
	return Extractor{
		Name:             e.GetName(),
		Description:      e.GetDescription(),
		InputMimeTypes:   mimes,
		InputParams:      ObjectJSON(e.GetInputParamsSchemaJson()),
		Outputs:          outs,
		EmbeddingSchemas: embs,
		MetadataSchemas:  metas,
	}
}

// TaskOutcome is the JSON name of a task outcome.
func TaskOutcome(o pb.TaskOutcome) string {
	switch o {
	case pb.TaskOutcome_TASK_OUTCOME_SUCCESS:
		return OutcomeSuccess
	case pb.TaskOutcome_TASK_OUTCOME_FAILED:
		return OutcomeFailed
	}
	return OutcomeUnknown
}

// TaskFromProto converts a task; its content, when the model carries it,
// converts as ContentFromProto does.
func TaskFromProto(t *pb.Task) Task {
	var content *Content
	if t.GetContent() != nil {
		content = ContentFromProto(t.GetContent())
	}
	return Task{
		ID:                   t.GetId(),
		Extractor:            t.GetExtractor(),
		ExtractionPolicyID:   t.GetPolicyName(),
		ExtractionPolicyName: t.GetPolicyName(),
		ExtractionGraphName:  t.GetGraphName(),
		Namespace:            t.GetNamespace(),
		ContentID:            t.GetContentId(),
		ContentVersion:       t.GetContentVersion(),
		ContentMetadata:      content,
		InputParams:          ObjectJSON(t.GetInputParamsJson()),
		Outcome:              TaskOutcome(t.GetOutcome()),
		ExecutorID:           t.GetExecutorId(),
		Attempts:             t.GetAttempts(),
		LastError:            t.GetLastError(),
		CreatedAt:            UnixSeconds(t.GetCreatedAt()),
		CompletedAt:          UnixSeconds(t.GetCompletedAt()),
	}
}

// ExecutorFromProto converts a registered executor.
func ExecutorFromProto(e *pb.Executor) Executor {
	names := make([]string, 0, len(e.GetExtractors()))
	for _, x := range e.GetExtractors() {
		names = append(names, x.GetName())
	}
	return Executor{
		ID: e.GetId(), Address: e.GetAddress(), Extractors: names, MaxPendingTasks: e.GetMaxPendingTasks(),
		LastSeen: UnixSeconds(e.GetLastSeen()), RegisteredAt: UnixSeconds(e.GetRegisteredAt()),
	}
}
