package api

// Limits on what one request may ask for, and on slow or numerous clients.
// Every refusal is a 4xx in the API's JSON error shape naming the limit.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Fixed limits of the data model. They keep single Raft entries, scheduler
// passes and label filters cheap; real uses stay far below them.
const (
	MaxLabels             = 64      // labels per content
	MaxLabelKeyBytes      = 256     // bytes of one label name
	MaxLabelValueBytes    = 4 << 10 // bytes of one label value (JSON text)
	MaxPoliciesPerGraph   = 64      // extraction policies per graph
	MaxGraphSpecBytes     = 1 << 20 // bytes of one graph spec body
	MaxFiltersPerPolicy   = 64      // label expressions per policy
	MaxInputParamsBytes   = 64 << 10
	MaxDescriptionBytes   = 4 << 10
	codeLimit             = "limit_exceeded"
	codeTooManyUploads    = "too_many_uploads"
	codeRequestTimeout    = "request_timeout"
	defaultMaxUploads     = 64
	defaultBodyIdle       = 30 * time.Second
	defaultBodyRead       = 60 * time.Second
	defaultReadHeader     = 10 * time.Second
	defaultIdleConnection = 2 * time.Minute
	maxHeaderBytes        = 64 << 10
)

// Limits bounds concurrency and client slowness. Zero fields get defaults.
type Limits struct {
	// MaxConcurrentUploads caps uploads (multipart, new versions, remote
	// ingests, task results) in progress at once; more get 429 (default 64).
	MaxConcurrentUploads int
	// BodyIdleTimeout: an upload body that delivers no byte for this long
	// is abandoned (default 30s). Uploads have no total deadline: a large
	// file on a slow but moving link is fine.
	BodyIdleTimeout time.Duration
	// BodyReadTimeout bounds reading a whole non-upload body (JSON, graph
	// specs; default 60s).
	BodyReadTimeout time.Duration
	// ReadHeaderTimeout bounds reading request headers (default 10s).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (default 2m).
	IdleTimeout time.Duration
}

func (l *Limits) setDefaults() {
	if l.MaxConcurrentUploads <= 0 {
		l.MaxConcurrentUploads = defaultMaxUploads
	}
	if l.BodyIdleTimeout <= 0 {
		l.BodyIdleTimeout = defaultBodyIdle
	}
	if l.BodyReadTimeout <= 0 {
		l.BodyReadTimeout = defaultBodyRead
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = defaultReadHeader
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = defaultIdleConnection
	}
}

func limitError(format string, args ...any) *apiError {
	return badRequest(codeLimit, format, args...)
}

// checkLabelLimits runs before labels are parsed, so an oversized map costs
// nothing beyond reading it.
func checkLabelLimits(in map[string]json.RawMessage) error {
	if len(in) > MaxLabels {
		return limitError("%d labels given; at most %d labels per content are allowed", len(in), MaxLabels)
	}
	for k, v := range in {
		if len(k) > MaxLabelKeyBytes {
			return limitError("label name %.40q... is %d bytes; the limit is %d", k, len(k), MaxLabelKeyBytes)
		}
		if len(v) > MaxLabelValueBytes {
			return limitError("label %q: value is %d bytes; the limit is %d", k, len(v), MaxLabelValueBytes)
		}
	}
	return nil
}

// checkLimits bounds a parsed graph spec.
func (req *graphRequest) checkLimits() error {
	if n := len(req.ExtractionPolicies); n > MaxPoliciesPerGraph {
		return limitError("extraction graph has %d extraction_policies; the limit is %d", n, MaxPoliciesPerGraph)
	}
	if len(req.Description) > MaxDescriptionBytes {
		return limitError("description is %d bytes; the limit is %d", len(req.Description), MaxDescriptionBytes)
	}
	for i, p := range req.ExtractionPolicies {
		if len(p.InputParams) > MaxInputParamsBytes {
			return limitError("extraction_policies[%d]: input_params is %d bytes; the limit is %d", i, len(p.InputParams), MaxInputParamsBytes)
		}
		if len(p.Filter)+len(p.LabelsEq) > MaxLabelValueBytes*MaxFiltersPerPolicy {
			return limitError("extraction_policies[%d]: filter is too large", i)
		}
	}
	return nil
}

// checkFilterCount bounds the label expressions of one policy.
func checkFilterCount(policy string, exprs []string) error {
	if len(exprs) > MaxFiltersPerPolicy {
		return limitError("extraction policy %q has %d filter expressions; the limit is %d", policy, len(exprs), MaxFiltersPerPolicy)
	}
	return nil
}

// isUpload reports whether a request streams a file body: such requests
// count against MaxConcurrentUploads and get an idle (not total) deadline.
func isUpload(r *http.Request) bool {
	p := r.URL.Path
	switch r.Method {
	case http.MethodPost:
		return strings.HasSuffix(p, "/extract") || strings.HasSuffix(p, "/ingest_remote_file") ||
			(strings.HasPrefix(p, "/internal/executors/") && strings.HasSuffix(p, "/result"))
	case http.MethodPut:
		// PUT /namespaces/{ns}/content/{id} (a new version), not .../labels.
		parts := strings.Split(strings.Trim(p, "/"), "/")
		return len(parts) == 4 && parts[0] == "namespaces" && parts[2] == "content"
	}
	return false
}

// limit applies the concurrency cap and body deadlines around next.
func (s *Server) limit(next http.Handler) http.Handler {
	uploads := make(chan struct{}, s.cfg.Limits.MaxConcurrentUploads)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upload := isUpload(r)
		if upload {
			select {
			case uploads <- struct{}{}:
				defer func() { <-uploads }()
			default:
				w.Header().Set("Retry-After", "1")
				writeJSON(w, http.StatusTooManyRequests, errorBody{
					Error: fmt.Sprintf("too many uploads in progress (limit %d); retry shortly", s.cfg.Limits.MaxConcurrentUploads),
					Code:  codeTooManyUploads})
				return
			}
		}
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			d := s.deadlineBody(w, r.Body, upload)
			r.Body = d
			w = &slowBodyWriter{ResponseWriter: w, body: d}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody sets connection read deadlines while, and only while, the
// handler reads the body: a deadline left behind would also cut the
// server's background read that detects a client hanging up during long
// requests (/wait, event streams).
func (s *Server) deadlineBody(w http.ResponseWriter, body io.ReadCloser, upload bool) *deadlineReader {
	b := &deadlineReader{rc: http.NewResponseController(w), body: body, upload: upload, lim: s.cfg.Limits}
	if !upload {
		b.total = time.Now().Add(s.cfg.Limits.BodyReadTimeout)
	}
	return b
}

type deadlineReader struct {
	rc     *http.ResponseController
	body   io.ReadCloser
	upload bool
	lim    Limits
	total  time.Time // non-upload: whole-body deadline
	done   bool
	slow   *errSlowBody // set once the client was cut off
}

// errSlowBody is what a handler sees when a client stops sending.
type errSlowBody struct{ msg string }

func (e *errSlowBody) Error() string { return e.msg }

func (d *deadlineReader) Read(p []byte) (int, error) {
	if d.done {
		return d.body.Read(p)
	}
	dl := d.total
	if d.upload {
		dl = time.Now().Add(d.lim.BodyIdleTimeout)
	}
	// Unsupported writers (httptest recorders) simply get no deadline.
	_ = d.rc.SetReadDeadline(dl)
	n, err := d.body.Read(p)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			d.slow = &errSlowBody{fmt.Sprintf("request body not received within %s", d.lim.BodyReadTimeout)}
			if d.upload {
				d.slow = &errSlowBody{fmt.Sprintf("request body stalled: no data for %s", d.lim.BodyIdleTimeout)}
			}
			return n, d.slow
		}
		d.done = true
		_ = d.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (d *deadlineReader) Close() error {
	if !d.done {
		d.done = true
		_ = d.rc.SetReadDeadline(time.Time{})
	}
	return d.body.Close()
}

// slowBodyWriter turns whatever error a handler reports after its client
// was cut off (a multipart parse error, a cancelled context: the timeout
// also cancels the request) into one clear 408.
type slowBodyWriter struct {
	http.ResponseWriter
	body    *deadlineReader
	swallow bool
}

func (w *slowBodyWriter) WriteHeader(code int) {
	if code >= 400 && w.body.slow != nil && !w.swallow {
		w.swallow = true
		w.Header().Set("Connection", "close")
		writeJSON(w.ResponseWriter, http.StatusRequestTimeout, errorBody{Error: w.body.slow.msg, Code: codeRequestTimeout})
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *slowBodyWriter) Write(b []byte) (int, error) {
	if w.swallow {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *slowBodyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush keeps streaming handlers (which look for http.Flusher) working.
func (w *slowBodyWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }
