package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The rest of the API's shapes, as the original Python client and the CLI
// read them. A renamed or dropped field must break this test.
func TestShapesOfTheAPI(t *testing.T) {
	raw := json.RawMessage(`{}`)
	emb := &EmbeddingSchema{Dim: 3, Distance: "cosine"}
	cases := []struct {
		name string
		v    any
		want []string
	}{
		{"error", Error{Error: "e", Code: "c"}, []string{"code", "error"}},
		{"namespaces", Namespaces{Namespaces: []Namespace{{Name: "n", CreatedAt: 1}}},
			[]string{"namespaces", "namespaces[].created_at", "namespaces[].name"}},
		{"namespace without a time", NamespaceBody{Namespace: Namespace{Name: "n"}},
			[]string{"namespace", "namespace.name"}},
		{"graphs", Graphs{ExtractionGraphs: []Graph{{Name: "g", ExtractionPolicies: []Policy{{Name: "p", InputParams: raw}}}}},
			[]string{"extraction_graphs", "extraction_graphs[].description", "extraction_graphs[].extraction_policies",
				"extraction_graphs[].extraction_policies[].content_source", "extraction_graphs[].extraction_policies[].extractor",
				"extraction_graphs[].extraction_policies[].filter", "extraction_graphs[].extraction_policies[].graph_name",
				"extraction_graphs[].extraction_policies[].id", "extraction_graphs[].extraction_policies[].input_params",
				"extraction_graphs[].extraction_policies[].name", "extraction_graphs[].id", "extraction_graphs[].name",
				"extraction_graphs[].namespace"}},
		{"links", Links{Links: []Link{{GraphName: "a"}}},
			[]string{"links", "links[].content_source", "links[].graph_name", "links[].linked_graph_name"}},
		{"extractors", Extractors{Extractors: []Extractor{{Name: "x", InputParams: raw,
			Outputs:          map[string]ExtractorOutput{"e": {Embedding: emb}, "m": {Metadata: raw}},
			EmbeddingSchemas: map[string]EmbeddingSchema{"e": *emb}, MetadataSchemas: map[string]json.RawMessage{"m": raw}}}},
			[]string{"extractors", "extractors[].description", "extractors[].embedding_schemas", "extractors[].embedding_schemas.e",
				"extractors[].embedding_schemas.e.dim", "extractors[].embedding_schemas.e.distance", "extractors[].input_mime_types",
				"extractors[].input_params", "extractors[].metadata_schemas", "extractors[].metadata_schemas.m", "extractors[].name",
				"extractors[].outputs", "extractors[].outputs.e", "extractors[].outputs.e.embedding", "extractors[].outputs.e.embedding.dim",
				"extractors[].outputs.e.embedding.distance", "extractors[].outputs.m", "extractors[].outputs.m.metadata"}},
		{"content list", ContentList{ContentList: []Content{{ID: "c"}}, Total: 1},
			[]string{"content_list", "content_list[].created_at", "content_list[].extracted_metadata", "content_list[].extraction_graph_names",
				"content_list[].hash", "content_list[].id", "content_list[].labels", "content_list[].mime_type", "content_list[].name",
				"content_list[].namespace", "content_list[].parent_id", "content_list[].root_content_id", "content_list[].size",
				"content_list[].source", "content_list[].storage_url", "content_list[].version", "total"}},
		{"content tree", ContentTree{}, []string{"content_tree_metadata"}},
		{"content id", ContentID{ContentID: "c"}, []string{"content_id"}},
		{"content ids", ContentIDs{ContentIDs: []string{"c"}}, []string{"content_ids"}},
		{"content version", ContentVersion{ContentID: "c", Version: 2}, []string{"content_id", "created", "version"}},
		{"content done", ContentDone{ContentID: "c", Done: true}, []string{"content_id", "done"}},
		{"empty", Empty{}, nil},
		{"result accepted", ResultAccepted{TaskID: "t", ContentIDs: []string{"c"}}, []string{"content_ids", "task_id"}},
		{"duplicate result", ResultAccepted{TaskID: "t", Duplicate: true}, []string{"content_ids", "duplicate", "task_id"}},
		{"namespace request", NamespaceRequest{Name: "n"}, []string{"name"}},
		{"graph spec", GraphSpec{Name: "g", ExtractionPolicies: []PolicySpec{{Extractor: "x", Name: "p", Filter: raw, LabelsEq: raw, InputParams: raw, ContentSource: "s"}}},
			[]string{"extraction_policies", "extraction_policies[].content_source", "extraction_policies[].extractor",
				"extraction_policies[].filter", "extraction_policies[].input_params", "extraction_policies[].labels_eq",
				"extraction_policies[].name", "name"}},
		{"ingest remote file", IngestRemoteFile{URL: "u", ExtractionGraphNames: []string{"g"}}, []string{"extraction_graph_names", "url"}},
		{"labels update", LabelsUpdate{Labels: map[string]json.RawMessage{}}, []string{"labels"}},
		{"tasks", Tasks{Tasks: []Task{{ID: "t", InputParams: raw, LastError: "boom"}}, Total: 1},
			[]string{"tasks", "tasks[].attempts", "tasks[].completed_at", "tasks[].content_id", "tasks[].content_metadata",
				"tasks[].content_version", "tasks[].created_at", "tasks[].executor_id", "tasks[].extraction_graph_name",
				"tasks[].extraction_policy_id", "tasks[].extraction_policy_name", "tasks[].extractor", "tasks[].id",
				"tasks[].input_params", "tasks[].last_error", "tasks[].namespace", "tasks[].outcome", "total"}},
		{"analytics", TaskAnalytics{TaskAnalytics: map[string]Analytics{"p": {}}},
			[]string{"task_analytics", "task_analytics.p", "task_analytics.p.failure", "task_analytics.p.pending", "task_analytics.p.success"}},
		{"executors", Executors{Executors: []Executor{{ID: "e"}}},
			[]string{"executors", "executors[].address", "executors[].extractors", "executors[].id", "executors[].last_seen",
				"executors[].max_pending_tasks", "executors[].registered_at"}},
		{"cluster", ClusterStatus{Members: []Member{{ID: "m"}}},
			[]string{"applied_index", "cluster_id", "commit_index", "last_log_index", "leader_addr", "leader_id", "members",
				"members[].grpc_addr", "members[].healthy", "members[].id", "members[].last_contact_ms", "members[].leader",
				"members[].raft_addr", "members[].suffrage", "members[].voter", "node_id", "state", "term", "vote_held", "votes_withheld"}},
		{"task result", TaskResult{Outcome: OutcomeSuccess, Error: "e", Features: []ResultFeature{{Name: "f", Value: raw}},
			Content: []ResultContent{{MimeType: "text/plain", Labels: map[string]json.RawMessage{"l": raw}, Features: []ResultFeature{{Name: "f", Value: raw}}}}},
			[]string{"content", "content[].features", "content[].features[].embedding", "content[].features[].name", "content[].features[].value",
				"content[].index", "content[].labels", "content[].labels.l", "content[].mime_type", "error", "features",
				"features[].embedding", "features[].name", "features[].value", "outcome"}},
	}
	for _, c := range cases {
		if got := keys(t, c.v); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: keys %q, want %q", c.name, got, c.want)
		}
	}
}
