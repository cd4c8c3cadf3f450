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
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/indexify-go/indexify/internal/labels"
	"github.com/indexify-go/indexify/internal/wire"
)

// Fixed limits of the data model. They keep single Raft entries, scheduler
// passes and label filters cheap; real uses stay far below them.
const (
	MaxPoliciesPerGraph   = 64      // extraction policies per graph
	MaxGraphSpecBytes     = 1 << 20 // bytes of one graph spec body
	MaxFiltersPerPolicy   = 64      // label expressions per policy
	MaxInputParamsBytes   = 64 << 10
	MaxDescriptionBytes   = 4 << 10
	codeLimit             = "limit_exceeded"
	codeTooManyUploads    = "too_many_uploads"
	codeRequestTimeout    = "request_timeout"
	defaultMaxUploads     = 64
	defaultMinUploadRate  = 1 << 10 // bytes per second
	defaultUploadGrace    = 30 * time.Second
	defaultBodyIdle       = 30 * time.Second
	defaultBodyRead       = 60 * time.Second
	defaultReadHeader     = 10 * time.Second
	defaultIdleConnection = 2 * time.Minute
	maxHeaderBytes        = 64 << 10
)

// Label bounds are those of the one label rule (internal/labels), which the
// coordinator's FSM applies too; checkLabelLimits applies them early, before
// values are parsed.
const (
	MaxLabels          = labels.MaxLabels     // labels per content
	MaxLabelKeyBytes   = labels.MaxKeyBytes   // bytes of one label name
	MaxLabelValueBytes = labels.MaxValueBytes // bytes of one label value (JSON text)
)

// Limits bounds concurrency and client slowness. Zero fields get defaults.
type Limits struct {
	// MaxConcurrentUploads caps uploads (multipart, new versions, remote
	// ingests, task results) in progress at once; more get 429 (default 64).
	MaxConcurrentUploads int
	// MaxUploadsPerClient caps the uploads of one client (remote IPv4
	// address or IPv6 /64, clientKey) in progress at once, so one client cannot hold every slot (default:
	// MaxConcurrentUploads/2, at least 1). Behind a proxy that hides client
	// addresses, set it to MaxConcurrentUploads.
	MaxUploadsPerClient int
	// BodyIdleTimeout: an upload body that delivers no byte for this long
	// is abandoned (default 30s).
	BodyIdleTimeout time.Duration
	// MinUploadRate (bytes/s, default 1 KiB/s) is the average rate an
	// upload body must keep once UploadRateGrace (default 30s) has passed:
	// after t seconds spent waiting for the client's bytes (time the server
	// spends storing them does not count), at least MinUploadRate*(t-grace)
	// bytes must have arrived. There is no total deadline: a large file on a slow but
	// moving link is fine, a trickle of a byte every few seconds is not.
	MinUploadRate   int64
	UploadRateGrace time.Duration
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
	if l.MaxUploadsPerClient <= 0 {
		l.MaxUploadsPerClient = max(1, l.MaxConcurrentUploads/2)
	}
	if l.MinUploadRate <= 0 {
		l.MinUploadRate = defaultMinUploadRate
	}
	if l.UploadRateGrace <= 0 {
		l.UploadRateGrace = defaultUploadGrace
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

// checkGraphLimits bounds a parsed graph spec.
func checkGraphLimits(req *wire.GraphSpec) error {
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
			wire.IsResultPath(r.URL.EscapedPath())
	case http.MethodPut:
		// PUT /namespaces/{ns}/content/{id} (a new version), not .../labels.
		parts := strings.Split(strings.Trim(p, "/"), "/")
		return len(parts) == 4 && parts[0] == "namespaces" && parts[2] == "content"
	}
	return false
}

// uploadSlots is the global and per-client concurrency cap of uploads.
type uploadSlots struct {
	mu        sync.Mutex
	total     int
	perClient map[string]int
	lim       Limits
}

// acquire takes a slot for client, or says which cap refused it.
func (u *uploadSlots) acquire(client string) (release func(), refusal string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.total >= u.lim.MaxConcurrentUploads {
		return nil, fmt.Sprintf("too many uploads in progress (limit %d); retry shortly", u.lim.MaxConcurrentUploads)
	}
	if u.perClient[client] >= u.lim.MaxUploadsPerClient {
		return nil, fmt.Sprintf("too many uploads in progress from this client (limit %d per client); retry shortly", u.lim.MaxUploadsPerClient)
	}
	u.total++
	u.perClient[client]++
	return func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.total--
		if u.perClient[client]--; u.perClient[client] <= 0 {
			delete(u.perClient, client)
		}
	}, ""
}

// clientKey identifies a client for fairness: its IPv4 address, or the
// /64 prefix of its IPv6 address. One IPv6 host (one subscriber, one VM)
// usually owns a whole /64 and can source connections from any address in
// it, so keying by the exact IPv6 address would give it 2^64 shares.
// IPv4-mapped IPv6 addresses count as their IPv4 address.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.WithZone("").Unmap()
	if addr.Is4() {
		return addr.String()
	}
	return netip.PrefixFrom(addr, 64).Masked().String()
}

// limit applies the concurrency caps and body deadlines around next.
func (s *Server) limit(next http.Handler) http.Handler {
	slots := &uploadSlots{perClient: map[string]int{}, lim: s.cfg.Limits}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upload := isUpload(r)
		if upload {
			release, refusal := slots.acquire(clientKey(r))
			if release == nil {
				w.Header().Set("Retry-After", "1")
				writeJSON(w, http.StatusTooManyRequests, errorBody{Error: refusal, Code: codeTooManyUploads})
				return
			}
			defer release()
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
	total  time.Time     // non-upload: whole-body deadline
	n      int64         // bytes read so far
	waited time.Duration // time spent blocked reading the body
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
	rateBound := false
	if d.upload {
		dl = time.Now().Add(d.lim.BodyIdleTimeout)
		// The rate counts only time spent waiting for the client (inside
		// Read), not time the handler spends storing what it read, so a
		// slow blob store is never blamed on the client. The bytes so far
		// buy grace + n/rate of waiting; after that the client's average
		// has fallen below MinUploadRate.
		budget := d.lim.UploadRateGrace + time.Duration(float64(d.n)/float64(d.lim.MinUploadRate)*float64(time.Second)) - d.waited
		if enough := time.Now().Add(budget); enough.Before(dl) {
			dl, rateBound = enough, true
		}
	}
	// Unsupported writers (httptest recorders) simply get no deadline.
	_ = d.rc.SetReadDeadline(dl)
	began := time.Now()
	n, err := d.body.Read(p)
	d.waited += time.Since(began)
	d.n += int64(n)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			switch {
			case !d.upload:
				d.slow = &errSlowBody{fmt.Sprintf("request body not received within %s", d.lim.BodyReadTimeout)}
			case rateBound:
				d.slow = &errSlowBody{fmt.Sprintf("request body too slow: below %d bytes/s on average", d.lim.MinUploadRate)}
			default:
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
