package state

// This file is the contract between the state store and its readers (the
// coordinator service, the scheduler, the API server through gRPC). Every
// method here is safe for concurrent use. Messages returned by the store are
// shared, immutable snapshots: the FSM never mutates a message it has handed
// out (it replaces it), so callers may keep them but must not modify them.

import (
	"fmt"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Error is a user-facing failure with a code that callers map to gRPC and HTTP
// status codes (INVALID -> 400, NOT_FOUND -> 404, ALREADY_EXISTS/CONFLICT -> 409).
type Error struct {
	Code pb.ErrorCode
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Errorf builds an *Error.
func Errorf(code pb.ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// ContentQuery selects content for ListContent. Empty fields do not filter.
type ContentQuery struct {
	Namespace  string
	Graph      string // content whose graph_names contain Graph
	Source     string // "ingestion" or a policy name
	ParentID   string
	RootID     string   // ingested_content_id: the tree rooted there
	Labels     []string // label-filter expressions, all must match
	StartID    string   // exclusive cursor on id order
	Limit      int      // 0 = no limit
	Tombstoned bool     // include tombstoned content
}

// TaskQuery selects tasks for ListTasks. Empty fields do not filter.
type TaskQuery struct {
	Namespace string
	Graph     string
	Policy    string
	ContentID string
	StartID   string
	Limit     int
}
