// Package executor runs extraction tasks: it registers its extractors with
// the coordinators over a heartbeat stream, receives the tasks assigned to
// it, downloads their content from an API server, runs the extractor and
// uploads the result back to the API server.
//
// The executor holds no durable state but, optionally, its id (StateDir, so
// a restart replaces its own registration). Whatever it loses (a crash, a
// broken stream, a reassigned task) the coordinator recovers by reassigning
// work,
// and result uploads are fenced by the coordinator so a stale executor cannot
// complete a task that moved elsewhere.
package executor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/executor/extractors"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// The extractor contract lives in the extractors package (so built-ins can
// implement it without an import cycle); these aliases are the names callers
// use.
type (
	Extractor  = extractors.Extractor
	Input      = extractors.Input
	Output     = extractors.Output
	OutContent = extractors.OutContent
)

// Builtins returns the extractors compiled into the executor.
func Builtins() []Extractor {
	return BuiltinsWith(embed.OpenAIDefaults{})
}

// BuiltinsWith returns the built-ins, the OpenAI-compatible embedding
// extractor taking base URL, model and key file from openai where a policy's
// params leave them out.
func BuiltinsWith(openai embed.OpenAIDefaults) []Extractor {
	return []Extractor{
		extractors.NewChunker(),
		extractors.NewAttributes(),
		extractors.NewPDF(),
		extractors.NewLexicalEmbedding(),
		extractors.NewOpenAIEmbedding(openai),
	}
}

// Defaults for Config fields left zero.
const (
	DefaultMaxPendingTasks   = 20
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultReconnectBackoff  = 250 * time.Millisecond
	DefaultMaxReconnect      = 10 * time.Second
	DefaultHTTPAttempts      = 10
	DefaultHTTPBackoff       = 250 * time.Millisecond
	DefaultRequestTimeout    = 5 * time.Minute
	DefaultRerunDelay        = 5 * time.Second
	// maxBackoff caps the delay between HTTP retries.
	maxHTTPBackoff = 10 * time.Second
	// MaxContentBytes bounds a downloaded content: the whole content is
	// held in memory while an extractor runs.
	MaxContentBytes = 1 << 30
)

// Config configures an Executor. Zero values take the defaults above.
type Config struct {
	ID                string        // default: hostname plus a random suffix
	Coordinators      []string      // informational (logged); the caller dials them into conn
	APIServer         string        // base URL of an API server, e.g. http://127.0.0.1:8900
	Advertise         string        // address reported in the registration (informational)
	MaxPendingTasks   int           // default 20
	Concurrency       int           // tasks run in parallel; default runtime.NumCPU()
	HeartbeatInterval time.Duration // default 5s
	Extractors        []Extractor
	Logger            *slog.Logger

	// Tuning, mostly for tests.
	HTTPClient          *http.Client  // default: http.DefaultTransport without a global timeout
	ReconnectBackoff    time.Duration // first delay after the stream broke; doubles up to MaxReconnectBackoff
	MaxReconnectBackoff time.Duration
	HTTPAttempts        int           // tries per download/upload on 5xx/429/network errors; default 10
	HTTPBackoff         time.Duration // first delay between HTTP tries; doubles up to 10s
	RequestTimeout      time.Duration // per HTTP try; default 5m
	RerunDelay          time.Duration // first wait before a task whose result upload gave up runs again; doubles up to 1m; default 5s
}

// Executor is the executor runtime. Create it with New and start it with Run.
type Executor struct {
	cfg        Config
	client     pb.CoordinatorServiceClient
	log        *slog.Logger
	http       *http.Client
	api        string // APIServer without a trailing slash
	extractors map[string]Extractor
	reg        *pb.Executor

	mu      sync.Mutex
	running bool                  // Run was called
	tasks   map[string]*taskEntry // queued or running, by task id
	queue   []*taskEntry          // queued, FIFO
	recent  map[taskKey]struct{}  // recently finished assignments (dedupe)
	order   []taskKey             // insertion order of recent, for eviction
	wake    chan struct{}         // signals workers that the queue is non-empty
	stats   Stats
}

// Stats counts what the executor did; read with Executor.Stats.
type Stats struct {
	Succeeded int // results uploaded with outcome success
	Failed    int // results uploaded with outcome failed
	Dropped   int // finished or cancelled tasks whose result was not accepted (reassigned, cancelled, gave up)
	Connects  int // heartbeat streams opened
}

// New validates cfg and builds an executor talking to the coordinators
// through conn (any gRPC connection, typically one spanning every
// coordinator).
func New(cfg Config, conn grpc.ClientConnInterface) (*Executor, error) {
	if conn == nil {
		return nil, errors.New("executor: no coordinator connection")
	}
	if err := applyDefaults(&cfg); err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.APIServer)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("executor: API server %q must be an http(s) URL such as http://127.0.0.1:8900", cfg.APIServer)
	}
	e := &Executor{
		cfg:        cfg,
		client:     pb.NewCoordinatorServiceClient(conn),
		log:        cfg.Logger.With("executor", cfg.ID),
		http:       cfg.HTTPClient,
		api:        strings.TrimRight(cfg.APIServer, "/"),
		extractors: make(map[string]Extractor),
		tasks:      make(map[string]*taskEntry),
		recent:     make(map[taskKey]struct{}),
		wake:       make(chan struct{}, 1),
	}
	e.reg = &pb.Executor{Id: cfg.ID, Address: cfg.Advertise, MaxPendingTasks: uint32(cfg.MaxPendingTasks)}
	if len(cfg.Extractors) == 0 {
		return nil, errors.New("executor: no extractors configured")
	}
	for i, x := range cfg.Extractors {
		if x == nil {
			return nil, fmt.Errorf("executor: extractor %d is nil", i)
		}
		d := x.Describe()
		name := d.GetName()
		if name == "" {
			return nil, fmt.Errorf("executor: extractor %d has no name", i)
		}
		if _, dup := e.extractors[name]; dup {
			return nil, fmt.Errorf("executor: extractor %q configured twice", name)
		}
		e.extractors[name] = x
		e.reg.Extractors = append(e.reg.Extractors, d)
	}
	return e, nil
}

func applyDefaults(cfg *Config) error {
	if cfg.MaxPendingTasks < 0 || cfg.Concurrency < 0 || cfg.HeartbeatInterval < 0 || cfg.HTTPAttempts < 0 {
		return errors.New("executor: max pending tasks, concurrency, heartbeat interval and HTTP attempts must not be negative")
	}
	if cfg.ID == "" {
		cfg.ID = defaultID()
	}
	if cfg.MaxPendingTasks == 0 {
		cfg.MaxPendingTasks = DefaultMaxPendingTasks
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = runtime.NumCPU()
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		// No client-wide timeout: content can be large; each try has its
		// own deadline (RequestTimeout).
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.ReconnectBackoff <= 0 {
		cfg.ReconnectBackoff = DefaultReconnectBackoff
	}
	if cfg.MaxReconnectBackoff <= 0 {
		cfg.MaxReconnectBackoff = DefaultMaxReconnect
	}
	if cfg.MaxReconnectBackoff < cfg.ReconnectBackoff {
		cfg.MaxReconnectBackoff = cfg.ReconnectBackoff
	}
	if cfg.HTTPAttempts == 0 {
		cfg.HTTPAttempts = DefaultHTTPAttempts
	}
	if cfg.HTTPBackoff <= 0 {
		cfg.HTTPBackoff = DefaultHTTPBackoff
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.RerunDelay <= 0 {
		cfg.RerunDelay = DefaultRerunDelay
	}
	return nil
}

// defaultID is the host name plus a random suffix, so two executors started
// on one host (or a restarted pod) never share an id. An executor keeps one
// across restarts through a StateDir.
func defaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "executor"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// ID returns the executor's id.
func (e *Executor) ID() string { return e.cfg.ID }

// Registration returns the executor registration sent to the coordinator.
func (e *Executor) Registration() *pb.Executor { return e.reg }

// Stats returns a snapshot of the counters.
func (e *Executor) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// Pending returns the number of tasks queued or running.
func (e *Executor) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.tasks)
}
