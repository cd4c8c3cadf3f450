package api

// JSON shapes of the original API (field names as its Python client reads
// them) and their conversion from the protobuf model.

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/indexify-go/indexify/internal/blob"
	"github.com/indexify-go/indexify/internal/labels"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// The JSON shapes are internal/wire's; these names keep the handlers short.
type (
	namespaceJSON = wire.Namespace
	contentJSON   = wire.Content
	graphJSON     = wire.Graph
	linkJSON      = wire.Link
	extractorJSON = wire.Extractor
	taskJSON      = wire.Task
	errorBody     = wire.Error
)

func unixSeconds(ms int64) int64 { return wire.UnixSeconds(ms) }

// toContentJSON converts a content item with its storage URL in the public
// form (publicStorageURL).
func toContentJSON(c *pb.Content) *contentJSON {
	out := wire.ContentFromProto(c)
	out.StorageURL = publicStorageURL(out.StorageURL)
	return out
}

// publicStorageURL is a blob URL as API output shows it. A disk blob's URL
// holds the server's absolute blob directory; clients get only the key
// under it ("file:ns/content/blob"), which is all that identifies the blob.
// Object store URLs (s3://bucket/key) name no server path and stay.
func publicStorageURL(u string) string {
	rest, ok := strings.CutPrefix(u, blob.URLScheme)
	if !ok {
		return u
	}
	parts := strings.Split(strings.TrimLeft(rest, "/"), "/")
	if len(parts) > blobKeySegments {
		parts = parts[len(parts)-blobKeySegments:]
	}
	return "file:" + strings.Join(parts, "/")
}

// blobKeySegments: blob keys are namespace/content id/random (ingest.go).
const blobKeySegments = 3

func toContentList(cs []*pb.Content) []contentJSON {
	out := make([]contentJSON, 0, len(cs))
	for _, c := range cs {
		out = append(out, *toContentJSON(c))
	}
	return out
}

func toGraphJSON(g *pb.ExtractionGraph) graphJSON { return wire.GraphFromProto(g) }

func toExtractorJSON(e *pb.ExtractorDescription) extractorJSON { return wire.ExtractorFromProto(e) }

func toTaskJSON(t *pb.Task) taskJSON {
	out := wire.TaskFromProto(t)
	if out.ContentMetadata != nil {
		out.ContentMetadata.StorageURL = publicStorageURL(out.ContentMetadata.StorageURL)
	}
	return out
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
	// Names and values follow the one label rule (internal/labels), the
	// one the coordinator's FSM applies too.
	for _, k := range keys {
		if err := labels.ValidKey(k); err != nil {
			return nil, badRequest(codeInvalidArgument, "%v", err)
		}
		v := in[k]
		var buf strings.Builder
		if err := compactJSON(&buf, v); err != nil {
			return nil, badRequest(codeInvalidJSON, "label %q: value is not valid JSON", k)
		}
		if err := labels.ValidValue(buf.String()); err != nil {
			return nil, badRequest(codeInvalidArgument, "label %q: %v", k, err)
		}
		out[k] = buf.String()
	}
	return out, nil
}
