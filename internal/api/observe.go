package api

// Request ids, access logs and HTTP metrics. Every request gets an id: the
// client's X-Request-Id when it is usable, else a fresh one. The id is echoed
// in the response, put on every log line about the request, and sent to the
// coordinator as gRPC metadata (RequestIDInterceptors), whose logs show it.
//
// Metrics use a registry per Server (Config.Metrics, or a new one), never
// the process-wide default, so several servers can live in one process.

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/indexify-go/indexify/internal/requestid"
)

// unmatchedRoute labels requests no route pattern matched, so scanners
// probing random paths cannot create unbounded label values.
const unmatchedRoute = "unmatched"

type apiMetrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	seconds      *prometheus.HistogramVec
	inflight     prometheus.Gauge
	ingested     prometheus.Counter
	ingestedBlob prometheus.Counter
}

func newAPIMetrics(reg *prometheus.Registry) *apiMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &apiMetrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "indexify_http_requests_total",
			Help: "HTTP requests served by the API server, by route pattern and status code.",
		}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "indexify_http_request_duration_seconds",
			Help:    "Duration of HTTP requests by route pattern (long polls and streams included).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "indexify_http_requests_in_flight",
			Help: "HTTP requests being served right now.",
		}),
		ingested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "indexify_api_ingested_bytes_total",
			Help: "Bytes of content (uploads, remote files, extracted children) stored in the blob store.",
		}),
		ingestedBlob: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "indexify_api_ingested_blobs_total",
			Help: "Blobs stored in the blob store for new content.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.seconds, m.inflight, m.ingested, m.ingestedBlob,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				// Only a caller-supplied registry holding a clashing
				// collector gets here: a programming error at startup.
				panic(err)
			}
		}
	}
	return m
}

// Metrics returns the registry the server's GET /metrics serves.
func (s *Server) Metrics() *prometheus.Registry { return s.metrics.reg }

// countIngested records one stored blob of n bytes.
func (s *Server) countIngested(n int64) {
	s.metrics.ingested.Add(float64(n))
	s.metrics.ingestedBlob.Inc()
}

// statusWriter remembers the status code; it passes Flush through (event
// streams need it) and unwraps for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.code == 0 {
			w.code = http.StatusOK
		}
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe wraps the whole handler: request id, metrics, access log.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get(requestid.Header)
		if !requestid.Valid(id) {
			id = requestid.New()
		}
		w.Header().Set(requestid.Header, id)
		r = r.WithContext(requestid.With(r.Context(), id))
		route := unmatchedRoute
		if _, pattern := s.mux.Handler(r); pattern != "" {
			route = pattern
		}
		sw := &statusWriter{ResponseWriter: w}
		s.metrics.inflight.Inc()
		defer func() {
			s.metrics.inflight.Dec()
			code := sw.code
			if code == 0 {
				code = http.StatusOK // handler wrote nothing: net/http sends 200
			}
			d := time.Since(start)
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			s.metrics.seconds.WithLabelValues(route).Observe(d.Seconds())
			level := slog.LevelDebug
			if code >= 500 {
				level = slog.LevelInfo
			}
			s.log.Log(r.Context(), level, "http request", "method", r.Method, "route", route,
				"path", r.URL.Path, "status", code, "duration", d, "request_id", id)
		}()
		next.ServeHTTP(sw, r)
	})
}

// RequestIDInterceptors must be installed on the API server's coordinator
// connection for request ids to reach the coordinators' logs.
func RequestIDInterceptors() []grpc.DialOption { return requestid.DialOptions() }
