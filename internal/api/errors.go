package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/blob"
	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/requestid"
)

// Error codes of the JSON error body. Clients of the original API only read
// the status and the text; the code lets newer clients branch reliably.
const (
	codeInvalidArgument  = errcode.JSONInvalidArgument
	codeInvalidJSON      = "invalid_json"
	codeInvalidYAML      = "invalid_yaml"
	codeInvalidID        = "invalid_id"
	codeInvalidFilter    = "invalid_label_filter"
	codeInvalidMultipart = "invalid_multipart"
	codeMissingFile      = "missing_file"
	codeRemoteFetch      = "remote_fetch_failed"
	codeNotFound         = errcode.JSONNotFound
	codeRouteNotFound    = "route_not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeAlreadyExists    = errcode.JSONAlreadyExists
	codeConflict         = errcode.JSONConflict
	codeTaskCompleted    = errcode.JSONTaskCompleted
	codeTooLarge         = "payload_too_large"
	codeUnavailable      = errcode.JSONUnavailable
	codeDeadline         = errcode.JSONDeadline
	codeCancelled        = errcode.JSONCancelled
	codeInternal         = errcode.JSONInternal
)

const statusClientClosed = errcode.StatusClientClosed

// apiError is an error with its HTTP status and code decided.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func badRequest(code, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, code, format, args...)
}

func notFound(format string, args ...any) *apiError {
	return newError(http.StatusNotFound, codeNotFound, format, args...)
}

func tooLarge(limit int64) *apiError {
	return newError(http.StatusRequestEntityTooLarge, codeTooLarge, "request body exceeds the limit of %d bytes", limit)
}

// toAPIError classifies any error returned by a handler: our own apiErrors,
// gRPC statuses from the coordinator, and context errors.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge(mbe.Limit)
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return fromStatus(st)
	}
	switch {
	case errors.Is(err, blob.ErrUnavailable):
		// Storage outage or overload: retryable, like a coordinator outage.
		return newError(http.StatusServiceUnavailable, codeUnavailable, "blob storage unavailable, retry later: %v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return newError(http.StatusGatewayTimeout, codeDeadline, "deadline exceeded: %v", err)
	case errors.Is(err, context.Canceled):
		return newError(statusClientClosed, codeCancelled, "request cancelled")
	}
	return newError(http.StatusInternalServerError, codeInternal, "internal error: %v", err)
}

// fromStatus maps coordinator gRPC statuses to HTTP by the one table
// (internal/errcode). The coordinator's message already names the problem
// (e.g. `namespace "x" not found`), so it is kept.
func fromStatus(st *status.Status) *apiError {
	msg := st.Message()
	e := errcode.ForStatus(st)
	switch {
	case e.JSON == codeInternal:
		return newError(e.HTTP, e.JSON, "coordinator error (%s): %s", st.Code(), msg)
	case e.JSON == codeCancelled:
		return newError(e.HTTP, e.JSON, "request cancelled")
	case e.GRPC == codes.Unavailable:
		return newError(e.HTTP, e.JSON, "coordinator unavailable: %s", msg)
	case e.GRPC == codes.DeadlineExceeded:
		return newError(e.HTTP, e.JSON, "coordinator deadline exceeded: %s", msg)
	}
	return newError(e.HTTP, e.JSON, "%s", msg)
}

// writeError writes the JSON error body. Server-side failures are logged;
// user mistakes are not (they would drown the log).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := toAPIError(err)
	if ae.status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", ae.status, "err", err,
			"request_id", requestid.From(r.Context()))
	} else {
		s.log.Debug("request rejected", "method", r.Method, "path", r.URL.Path, "status", ae.status, "err", ae.msg,
			"request_id", requestid.From(r.Context()))
	}
	if ae.status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", retryAfterBacklog)
	}
	writeJSON(w, ae.status, errorBody{Error: ae.msg, Code: ae.code})
}

// retryAfterBacklog is the Retry-After (seconds) of a 429 from the
// coordinator (a namespace at its bound on unfinished tasks): tasks take
// seconds to run, so sooner would only be refused again.
const retryAfterBacklog = "5"

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v) // a write error means the client left; nothing to do
}

// jsonErrorWriter converts the plain-text 404/405 answers of http.ServeMux
// into the API's JSON error shape, so every error looks the same.
type jsonErrorWriter struct {
	http.ResponseWriter
	swallow bool
}

func (j *jsonErrorWriter) WriteHeader(code int) {
	if code < 400 {
		j.ResponseWriter.WriteHeader(code)
		return
	}
	j.swallow = true
	body := errorBody{Error: "no such route", Code: codeRouteNotFound}
	if code == http.StatusMethodNotAllowed {
		body = errorBody{Error: "method not allowed for this route", Code: codeMethodNotAllowed}
	}
	j.Header().Del("X-Content-Type-Options")
	writeJSON(j.ResponseWriter, code, body)
}

func (j *jsonErrorWriter) Write(b []byte) (int, error) {
	if j.swallow {
		return len(b), nil
	}
	return j.ResponseWriter.Write(b)
}
