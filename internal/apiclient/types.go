package apiclient

import "encoding/json"

// The JSON shapes of the API server (see internal/api/wire.go). Values of
// labels, params and extracted metadata stay raw JSON so nothing is lost
// when the CLI prints them back out.

// Namespace is one namespace.
type Namespace struct {
	Name      string `json:"name"`
	CreatedAt int64  `json:"created_at,omitempty"`
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

// Graph is an extraction graph.
type Graph struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Namespace   string   `json:"namespace"`
	Description string   `json:"description"`
	Policies    []Policy `json:"extraction_policies"`
}

// Content is one content item's metadata.
type Content struct {
	ID                string                     `json:"id"`
	ParentID          string                     `json:"parent_id"`
	RootContentID     string                     `json:"root_content_id"`
	Namespace         string                     `json:"namespace"`
	Name              string                     `json:"name"`
	MimeType          string                     `json:"mime_type"`
	Labels            map[string]json.RawMessage `json:"labels"`
	GraphNames        []string                   `json:"extraction_graph_names"`
	StorageURL        string                     `json:"storage_url"`
	CreatedAt         int64                      `json:"created_at"`
	Source            string                     `json:"source"`
	Size              uint64                     `json:"size"`
	Hash              string                     `json:"hash"`
	ExtractedMetadata map[string]json.RawMessage `json:"extracted_metadata"`
	Version           uint64                     `json:"version"`
}

// Task is one extraction task.
type Task struct {
	ID          string `json:"id"`
	Extractor   string `json:"extractor"`
	Policy      string `json:"extraction_policy_name"`
	Graph       string `json:"extraction_graph_name"`
	Namespace   string `json:"namespace"`
	ContentID   string `json:"content_id"`
	Outcome     string `json:"outcome"`
	ExecutorID  string `json:"executor_id"`
	Attempts    uint32 `json:"attempts"`
	LastError   string `json:"last_error,omitempty"`
	CreatedAt   int64  `json:"created_at"`
	CompletedAt int64  `json:"completed_at"`
}

// Executor is a registered executor.
type Executor struct {
	ID              string   `json:"id"`
	Address         string   `json:"address"`
	Extractors      []string `json:"extractors"`
	MaxPendingTasks uint32   `json:"max_pending_tasks"`
	LastSeen        int64    `json:"last_seen"`
	RegisteredAt    int64    `json:"registered_at"`
}

// Member is one coordinator in the Raft configuration.
type Member struct {
	ID            string `json:"id"`
	RaftAddr      string `json:"raft_addr"`
	GRPCAddr      string `json:"grpc_addr"`
	Suffrage      string `json:"suffrage"`
	Voter         bool   `json:"voter"`
	Leader        bool   `json:"leader"`
	LastContactMs int64  `json:"last_contact_ms"`
	Healthy       bool   `json:"healthy"`
}

// ClusterStatus is GET /cluster.
type ClusterStatus struct {
	NodeID       string   `json:"node_id"`
	ClusterID    string   `json:"cluster_id"`
	State        string   `json:"state"`
	LeaderID     string   `json:"leader_id"`
	LeaderAddr   string   `json:"leader_addr"`
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	LastLogIndex uint64   `json:"last_log_index"`
	Members      []Member `json:"members"`
}
