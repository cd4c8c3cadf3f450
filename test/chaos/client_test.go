package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/wire"
)

// The workload client runs as its own process inside the clients' network
// namespace (this test binary re-executed with CHAOS_MODE=client), because
// the test process in the root namespace must not talk to namespace
// addresses. It appends every operation to a JSON-lines history file as the
// operation returns; the test tails that file to measure recovery and reads
// it whole for the checks.

const (
	resOK            = "ok"
	resFailed        = "failed"        // definitely had no effect
	resIndeterminate = "indeterminate" // may or may not have taken effect
)

// op is one history entry. Times are unix nanoseconds from the same host
// clock the test process uses for fault times.
type op struct {
	Client int    `json:"c"`
	Kind   string `json:"k"` // write | read | ingest | setup
	Key    int    `json:"key,omitempty"`
	Val    int64  `json:"v,omitempty"` // value written
	ID     string `json:"id,omitempty"`
	Call   int64  `json:"call"`
	Ret    int64  `json:"ret"`
	Res    string `json:"res"`
	Out    int64  `json:"out,omitempty"` // value read
	Err    string `json:"err,omitempty"`
}

type clientConfig struct {
	API           string `json:"api"`
	Namespace     string `json:"namespace"`
	Graph         string `json:"graph"`
	Registers     int    `json:"registers"`
	RegClients    int    `json:"reg_clients"`
	IngestClients int    `json:"ingest_clients"`
	History       string `json:"history"`
	Seed          int64  `json:"seed"`
	// MaxOps bounds operations per client; MaxDuration bounds the whole
	// run; SIGTERM ends it earlier (the normal way).
	MaxOps      int           `json:"max_ops"`
	MaxDuration time.Duration `json:"max_duration"`
	OpTimeout   time.Duration `json:"op_timeout"`
}

const graphYAML = `name: %s
extraction_policies:
  - extractor: tensorlake/attributes
    name: attrs
`

func registerID(k int) string { return fmt.Sprintf("reg-%d", k) }

type historyWriter struct {
	mu sync.Mutex
	f  *os.File
}

func (h *historyWriter) add(o op) {
	b, _ := json.Marshal(o)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, _ = h.f.Write(append(b, '\n'))
}

type apiClient struct {
	base string
	http *http.Client
}

func (a *apiClient) do(ctx context.Context, method, path, ctype string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// writeResult classifies a mutation's answer. Only a 4xx proves that nothing
// happened; a 5xx or a broken connection may follow a committed proposal.
func writeResult(code int, err error) string {
	switch {
	case err == nil && code/100 == 2:
		return resOK
	case err == nil && code/100 == 4 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests:
		return resFailed
	default:
		return resIndeterminate
	}
}

func errText(code int, body []byte, err error) string {
	if err != nil {
		return err.Error()
	}
	if code/100 == 2 {
		return ""
	}
	s := string(body)
	if len(s) > 200 {
		s = s[:200]
	}
	return fmt.Sprintf("%d %s", code, s)
}

func multipartBody(data []byte) (string, []byte) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.txt")
	_, _ = fw.Write(data)
	_ = mw.Close()
	return mw.FormDataContentType(), buf.Bytes()
}

func (a *apiClient) ingest(ctx context.Context, ns, graph, id string, data []byte) (int, []byte, error) {
	ct, body := multipartBody(data)
	return a.do(ctx, http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/"+graph+"/extract?id="+url.QueryEscape(id), ct, body)
}

func (a *apiClient) writeLabel(ctx context.Context, ns, id string, v int64) (int, []byte, error) {
	body := fmt.Sprintf(`{"labels":{"v":%d}}`, v)
	return a.do(ctx, http.MethodPut, "/namespaces/"+ns+"/content/"+id+"/labels", "application/json", []byte(body))
}

// readLabel reads the register at the linearizable level; -1 = no label.
func (a *apiClient) readLabel(ctx context.Context, ns, id string) (int64, int, []byte, error) {
	code, b, err := a.do(ctx, http.MethodGet, "/namespaces/"+ns+"/content/"+id+"/metadata?consistency=linearizable", "", nil)
	if err != nil || code != http.StatusOK {
		return 0, code, b, err
	}
	var out wire.ContentMetadata
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, code, b, err
	}
	raw, ok := out.ContentMetadata.Labels["v"]
	if !ok {
		return -1, code, b, nil
	}
	var v int64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, code, b, fmt.Errorf("label v = %s: %v", raw, err)
	}
	return v, code, b, nil
}

// setup creates the namespace, the graph and the registers (value 0),
// retrying until the cluster is up; it tolerates its own earlier attempts.
func (a *apiClient) setup(ctx context.Context, cfg clientConfig) error {
	okOr := func(code int, body []byte, err error, what string) error {
		if err != nil {
			return fmt.Errorf("%s: %v", what, err)
		}
		if code/100 == 2 || code == http.StatusConflict {
			return nil
		}
		return fmt.Errorf("%s: %d %s", what, code, body)
	}
	steps := []func() error{
		func() error {
			body, _ := json.Marshal(wire.NamespaceRequest{Name: cfg.Namespace})
			code, b, err := a.do(ctx, http.MethodPost, "/namespaces", "application/json", body)
			return okOr(code, b, err, "create namespace")
		},
		func() error {
			code, b, err := a.do(ctx, http.MethodPost, "/namespaces/"+cfg.Namespace+"/extraction_graphs", "application/x-yaml",
				[]byte(fmt.Sprintf(graphYAML, cfg.Graph)))
			return okOr(code, b, err, "create graph")
		},
	}
	for k := 0; k < cfg.Registers; k++ {
		id := registerID(k)
		steps = append(steps, func() error {
			code, b, err := a.ingest(ctx, cfg.Namespace, cfg.Graph, id, []byte("register "+id))
			return okOr(code, b, err, "create "+id)
		}, func() error {
			code, b, err := a.writeLabel(ctx, cfg.Namespace, id, 0)
			return okOr(code, b, err, "init "+id)
		})
	}
	for _, step := range steps {
		// Retried while the cluster forms, until ctx ends.
		if err := retry.Poll(ctx, 200*time.Millisecond, step); err != nil {
			return err
		}
	}
	return nil
}

func clientMain() int {
	var cfg clientConfig
	if err := readConfig(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "client config:", err)
		return 2
	}
	f, err := os.OpenFile(cfg.History, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer f.Close()
	hist := &historyWriter{f: f}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()
	api := &apiClient{base: strings.TrimRight(cfg.API, "/"), http: &http.Client{Timeout: cfg.OpTimeout}}

	start := time.Now().UnixNano()
	if err := api.setup(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	hist.add(op{Kind: "setup", Call: start, Ret: time.Now().UnixNano(), Res: resOK})

	var wg sync.WaitGroup
	for c := 0; c < cfg.RegClients+cfg.IngestClients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(cfg.Seed + int64(c)))
			for n := 1; n <= cfg.MaxOps && ctx.Err() == nil; n++ {
				// An operation, once invoked, runs to its own timeout even
				// if the run is ending, so its result is real.
				opCtx := context.Background()
				o := op{Client: c, Call: time.Now().UnixNano()}
				if c >= cfg.RegClients {
					o.Kind, o.ID = "ingest", fmt.Sprintf("in-%d-%d", c, n)
					code, b, err := api.ingest(opCtx, cfg.Namespace, cfg.Graph, o.ID, []byte(fmt.Sprintf("payload %d/%d %d", c, n, rng.Int63())))
					o.Res, o.Err = writeResult(code, err), errText(code, b, err)
				} else if o.Key = rng.Intn(cfg.Registers); rng.Intn(2) == 0 {
					o.Kind, o.Val = "write", int64(c+1)*1_000_000+int64(n)
					code, b, err := api.writeLabel(opCtx, cfg.Namespace, registerID(o.Key), o.Val)
					o.Res, o.Err = writeResult(code, err), errText(code, b, err)
				} else {
					o.Kind = "read"
					v, code, b, err := api.readLabel(opCtx, cfg.Namespace, registerID(o.Key))
					o.Res, o.Out, o.Err = resFailed, v, errText(code, b, err)
					if err == nil && code == http.StatusOK {
						o.Res = resOK
					}
				}
				o.Ret = time.Now().UnixNano()
				hist.add(o)
				// Pacing keeps the history small enough to check.
				time.Sleep(time.Duration(10+rng.Intn(30)) * time.Millisecond)
			}
		}(c)
	}
	wg.Wait()
	return 0
}
