package wire

import "encoding/json"

// Error is the one error body of the whole API: a message for people and
// a stable code for programs.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Namespace is one namespace.
type Namespace struct {
	Name      string `json:"name"`
	CreatedAt int64  `json:"created_at,omitempty"` // unix seconds
}

// Namespaces is the body of GET /namespaces.
type Namespaces struct {
	Namespaces []Namespace `json:"namespaces"`
}

// NamespaceBody is the body of GET /namespaces/{ns} and of a create.
type NamespaceBody struct {
	Namespace Namespace `json:"namespace"`
}

// Policy is one extraction policy of a graph.
type Policy struct {
	ID            string          `json:"id"`
	Extractor     string          `json:"extractor"`
	Name          string          `json:"name"`
	Filter        []string        `json:"filter"`
	InputParams   json.RawMessage `json:"input_params"`
	ContentSource string          `json:"content_source"`
	GraphName     string          `json:"graph_name"`
}

// Graph is an extraction graph (GET /namespaces/{ns}/extraction_graphs/{g}).
type Graph struct {
	ID                 string   `json:"id"`
	Name               string   `json:"name"`
	Namespace          string   `json:"namespace"`
	Description        string   `json:"description"`
	ExtractionPolicies []Policy `json:"extraction_policies"`
}

// Graphs is the body of GET /namespaces/{ns}/extraction_graphs.
type Graphs struct {
	ExtractionGraphs []Graph `json:"extraction_graphs"`
}

// Link sends a graph's content (of one source, or all) on to another graph.
type Link struct {
	GraphName       string `json:"graph_name"`
	ContentSource   string `json:"content_source"`
	LinkedGraphName string `json:"linked_graph_name"`
}

// Links is the body of GET .../extraction_graphs/{g}/links.
type Links struct {
	Links []Link `json:"links"`
}

// ContentList is the body of GET .../extraction_graphs/{g}/content.
type ContentList struct {
	ContentList []Content `json:"content_list"`
	Total       uint64    `json:"total"`
}

// ContentTree is the body of GET .../content/{id}/extraction_policies/{p}.
type ContentTree struct {
	ContentTreeMetadata []Content `json:"content_tree_metadata"`
}

// ContentID is the answer of an upload or a label update.
type ContentID struct {
	ContentID string `json:"content_id"`
}

// OutcomeUnknown is Task.Outcome of a task not finished yet; a finished
// one is OutcomeSuccess or OutcomeFailed, the values of TaskResult.Outcome.
const OutcomeUnknown = "unknown"

// Task is one extraction task.
type Task struct {
	ID                   string          `json:"id"`
	Extractor            string          `json:"extractor"`
	ExtractionPolicyID   string          `json:"extraction_policy_id"` // the policy name (unique in its graph)
	ExtractionPolicyName string          `json:"extraction_policy_name"`
	ExtractionGraphName  string          `json:"extraction_graph_name"`
	Namespace            string          `json:"namespace"`
	ContentID            string          `json:"content_id"`
	ContentVersion       uint64          `json:"content_version"`
	ContentMetadata      *Content        `json:"content_metadata"`
	InputParams          json.RawMessage `json:"input_params"`
	Outcome              string          `json:"outcome"` // OutcomeUnknown | OutcomeSuccess | OutcomeFailed
	ExecutorID           string          `json:"executor_id"`
	Attempts             uint32          `json:"attempts"`
	LastError            string          `json:"last_error,omitempty"`
	CreatedAt            int64           `json:"created_at"`   // unix seconds
	CompletedAt          int64           `json:"completed_at"` // unix seconds, 0 = not finished
}

// Tasks is the body of GET .../extraction_policies/{p}/tasks.
type Tasks struct {
	Tasks []Task `json:"tasks"`
	Total uint64 `json:"total"`
}

// Analytics counts one policy's tasks by outcome.
type Analytics struct {
	Pending uint64 `json:"pending"`
	Success uint64 `json:"success"`
	Failure uint64 `json:"failure"`
}

// TaskAnalytics is the body of GET .../extraction_graphs/{g}/analytics.
type TaskAnalytics struct {
	TaskAnalytics map[string]Analytics `json:"task_analytics"` // policy -> counts
}

// Executor is a registered executor (GET /executors).
type Executor struct {
	ID              string   `json:"id"`
	Address         string   `json:"address"`
	Extractors      []string `json:"extractors"`
	MaxPendingTasks uint32   `json:"max_pending_tasks"`
	LastSeen        int64    `json:"last_seen"`     // unix seconds
	RegisteredAt    int64    `json:"registered_at"` // unix seconds
}

// Executors is the body of GET /executors.
type Executors struct {
	Executors []Executor `json:"executors"`
}
