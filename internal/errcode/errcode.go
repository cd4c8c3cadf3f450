// Package errcode is the one table of what an error means at each layer:
// the state machine's ErrorCode, the gRPC code the coordinators answer
// with, and the HTTP status and JSON code the API answers with. Every layer
// converts through it, so a code means the same thing everywhere:
// FailedPrecondition is a conflict (HTTP 409), never "try another node".
//
// "Try another node" has its own signal, NotLeader: gRPC Unavailable with
// an ErrorInfo detail (reason NOT_LEADER) carrying the leader hint. The
// refusing node proposed nothing, so a caller may retry at the leader
// whatever the command; other Unavailable answers may follow a proposal.
package errcode

import (
	"net/http"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// JSON codes of the API's error body for the refusals in the table.
const (
	JSONInvalidArgument = "invalid_argument"
	JSONNotFound        = "not_found"
	JSONAlreadyExists   = "already_exists"
	JSONConflict        = "conflict"
	JSONTaskCompleted   = "task_already_completed"
	JSONUnavailable     = "unavailable"
	JSONDeadline        = "deadline_exceeded"
	JSONCancelled       = "cancelled"
	// JSONResourceExhausted: a bound was reached (a namespace's unfinished
	// tasks); retry later. HTTP 429.
	JSONResourceExhausted = "resource_exhausted"
	JSONInternal          = "internal"
)

// StatusClientClosed is nginx's convention for "client went away"; nobody
// reads it, but it keeps such requests out of the 5xx statistics.
const StatusClientClosed = 499

// Entry is one row of the table.
type Entry struct {
	State pb.ErrorCode
	GRPC  codes.Code
	HTTP  int
	JSON  string
}

// Table maps each state-machine refusal to its gRPC and HTTP form. Two
// refusals share FailedPrecondition; the state code travels as a status
// detail (Status) so the API can still tell them apart.
var Table = []Entry{
	{pb.ErrorCode_ERROR_CODE_INVALID, codes.InvalidArgument, http.StatusBadRequest, JSONInvalidArgument},
	{pb.ErrorCode_ERROR_CODE_NOT_FOUND, codes.NotFound, http.StatusNotFound, JSONNotFound},
	{pb.ErrorCode_ERROR_CODE_ALREADY_EXISTS, codes.AlreadyExists, http.StatusConflict, JSONAlreadyExists},
	{pb.ErrorCode_ERROR_CODE_CONFLICT, codes.FailedPrecondition, http.StatusConflict, JSONConflict},
	{pb.ErrorCode_ERROR_CODE_ALREADY_COMPLETED, codes.FailedPrecondition, http.StatusConflict, JSONTaskCompleted},
	{pb.ErrorCode_ERROR_CODE_UNAVAILABLE, codes.Unavailable, http.StatusServiceUnavailable, JSONUnavailable},
}

// grpcOnly is the HTTP form of gRPC codes no state code maps to (and the
// fallback for statuses that carry no state code).
var grpcOnly = map[codes.Code]Entry{
	codes.InvalidArgument:    {GRPC: codes.InvalidArgument, HTTP: http.StatusBadRequest, JSON: JSONInvalidArgument},
	codes.OutOfRange:         {GRPC: codes.OutOfRange, HTTP: http.StatusBadRequest, JSON: JSONInvalidArgument},
	codes.NotFound:           {GRPC: codes.NotFound, HTTP: http.StatusNotFound, JSON: JSONNotFound},
	codes.AlreadyExists:      {GRPC: codes.AlreadyExists, HTTP: http.StatusConflict, JSON: JSONAlreadyExists},
	codes.FailedPrecondition: {GRPC: codes.FailedPrecondition, HTTP: http.StatusConflict, JSON: JSONConflict},
	codes.Aborted:            {GRPC: codes.Aborted, HTTP: http.StatusConflict, JSON: JSONConflict},
	codes.Unavailable:        {GRPC: codes.Unavailable, HTTP: http.StatusServiceUnavailable, JSON: JSONUnavailable},
	codes.DeadlineExceeded:   {GRPC: codes.DeadlineExceeded, HTTP: http.StatusGatewayTimeout, JSON: JSONDeadline},
	codes.Canceled:           {GRPC: codes.Canceled, HTTP: StatusClientClosed, JSON: JSONCancelled},
	codes.ResourceExhausted:  {GRPC: codes.ResourceExhausted, HTTP: http.StatusTooManyRequests, JSON: JSONResourceExhausted},
}

// internal is the row of anything unclassified (its State is OK: none).
var internal = Entry{GRPC: codes.Internal, HTTP: http.StatusInternalServerError, JSON: JSONInternal}

// ForState returns the row of a state code; an unknown code is internal.
func ForState(c pb.ErrorCode) Entry {
	for _, e := range Table {
		if e.State == c {
			return e
		}
	}
	return internal
}

// GRPC is the gRPC code of a state code.
func GRPC(c pb.ErrorCode) codes.Code { return ForState(c).GRPC }

// Status is the gRPC error of a state-machine refusal. The state code
// travels as a detail (a CommandResult with only error_code set) so that
// callers can tell apart refusals that share a gRPC code.
func Status(c pb.ErrorCode, msg string) error {
	st := status.New(GRPC(c), msg)
	if ds, err := st.WithDetails(&pb.CommandResult{ErrorCode: c}); err == nil {
		st = ds
	}
	return st.Err()
}

// StateCode returns the state code a status carries as a detail, if any.
func StateCode(st *status.Status) (pb.ErrorCode, bool) {
	for _, d := range st.Details() {
		if cr, ok := d.(*pb.CommandResult); ok && cr.GetErrorCode() != pb.ErrorCode_ERROR_CODE_OK {
			return cr.GetErrorCode(), true
		}
	}
	return pb.ErrorCode_ERROR_CODE_OK, false
}

// ForStatus returns the HTTP row of a gRPC status: by its state code when
// it carries one, else by its gRPC code; anything else is internal.
func ForStatus(st *status.Status) Entry {
	if c, ok := StateCode(st); ok {
		if e := ForState(c); e != internal {
			return e
		}
	}
	if e, ok := grpcOnly[st.Code()]; ok {
		return e
	}
	return internal
}

// notApplied are the gRPC codes of an answer that proves a write had no
// effect: the state machine or the coordinator's validation refused it
// (invalid, not found, exists, conflict), or the call was refused before
// any handler ran (authentication, authorisation, unknown method). Every
// other code may come after the command was proposed, so its outcome is
// unknown: Unavailable, DeadlineExceeded, Canceled, Internal, Unknown, and
// Aborted, which the cluster's forwarding also reads as "leadership lost
// mid-write" (internal/cluster/apply.go). A NotLeader answer proposed
// nothing itself, but it may end the retries of a write an earlier attempt
// applied, so it is not proof either.
var notApplied = map[codes.Code]bool{
	codes.InvalidArgument:    true,
	codes.OutOfRange:         true,
	codes.NotFound:           true,
	codes.AlreadyExists:      true,
	codes.FailedPrecondition: true,
	codes.PermissionDenied:   true,
	codes.Unauthenticated:    true,
	codes.Unimplemented:      true,
}

// NotApplied reports whether a failed write's error proves that it had no
// effect, so whatever it would have referenced (a stored blob) may be
// discarded. False means the outcome is unknown: ask before discarding.
func NotApplied(err error) bool {
	st, ok := status.FromError(err)
	return ok && err != nil && notApplied[st.Code()]
}

// Reason and domain of the not-leader ErrorInfo detail.
const (
	ReasonNotLeader = "NOT_LEADER"
	Domain          = "indexify.cluster"
)

// NotLeader is the answer of a node that did not propose a command and
// will not: it is not the leader, or it is shutting down. leaderID and
// leaderAddr (gRPC) are the leader as this node knows it, or empty.
func NotLeader(msg, leaderID, leaderAddr string) error {
	st := status.New(codes.Unavailable, msg)
	info := &errdetails.ErrorInfo{Reason: ReasonNotLeader, Domain: Domain,
		Metadata: map[string]string{"leader_id": leaderID, "leader_addr": leaderAddr}}
	if ds, err := st.WithDetails(info); err == nil {
		st = ds
	}
	return st.Err()
}

// LeaderHint reports whether err is a NotLeader answer, and the leader it
// names (empty when the refusing node knew none).
func LeaderHint(err error) (leaderID, leaderAddr string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.Unavailable {
		return "", "", false
	}
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.ErrorInfo); isInfo && info.GetReason() == ReasonNotLeader && info.GetDomain() == Domain {
			return info.GetMetadata()["leader_id"], info.GetMetadata()["leader_addr"], true
		}
	}
	return "", "", false
}

// LeaderTrailer is the trailer key in which a coordinator that forwarded a
// call's write to the leader names that leader's gRPC address: the success
// side of the NotLeader hint. A client may send the same method's next
// calls there and save the forwarding hop (internal/coordclient).
const LeaderTrailer = "x-indexify-leader"

// IsNotLeader reports whether err is a NotLeader answer.
func IsNotLeader(err error) bool {
	_, _, ok := LeaderHint(err)
	return ok
}
