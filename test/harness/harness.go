// Package harness runs the real indexify binary as child processes for
// end-to-end tests: it builds the binary once, picks free loopback ports,
// starts and kills processes, and polls HTTP endpoints with deadlines.
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/freeport"
	"github.com/indexify-go/indexify/internal/retry"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds ./cmd/indexify once per test process and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "indexify-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "indexify")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/indexify")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the harness source")
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
}

// FreePort returns a TCP port free on host, outside the kernel's ephemeral
// range and reserved against every other test on the machine until t ends
// (see internal/freeport).
func FreePort(t testing.TB, host string) int {
	t.Helper()
	return freeport.Take(t, host)
}

// Proc is one running child process.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
	err  error
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Start runs the binary with args; the process is killed when the test ends
// and its output is printed if the test failed.
func Start(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	return StartEnv(t, name, nil, args...)
}

// StartEnv is Start with extra environment variables (KEY=VALUE).
func StartEnv(t testing.TB, name string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	p := &Proc{Name: name, cmd: cmd, log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	w := lockedWriter{mu: p.mu, b: p.log}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Env = append(append(os.Environ(), "INDEXIFY_LOG_FORMAT=text"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("---- output of %s ----\n%s", name, p.Output())
		}
	})
	return p
}

// Output returns what the process printed so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Kill sends SIGKILL to the process group and waits for the exit.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// Wait waits for the process to exit, up to timeout; it reports whether it did.
func (p *Proc) Wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Eventually polls cond every 50ms until it returns nil or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := retry.PollFor(timeout, 50*time.Millisecond, cond); err != nil {
		t.Fatalf("%s: not true within %s: %v", what, timeout, err)
	}
}

// Spread picks up to max of n items evenly: their indices, ascending,
// always the first and the last (for checking a sample of a long run).
func Spread(n, max int) []int {
	if n <= 0 || max <= 0 {
		return nil
	}
	if n <= max {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	if max == 1 {
		return []int{n - 1}
	}
	out := make([]int, 0, max)
	for i := range max {
		j := (i*(n-1) + (max-1)/2) / (max - 1) // i*(n-1)/(max-1), rounded
		if len(out) == 0 || out[len(out)-1] != j {
			out = append(out, j)
		}
	}
	return out
}

// HTTP is a tiny JSON client for the API server.
type HTTP struct {
	Base   string
	Client *http.Client
}

// NewHTTP returns a client for base (e.g. http://127.0.0.1:8900).
func NewHTTP(base string) *HTTP {
	return &HTTP{Base: strings.TrimRight(base, "/"), Client: &http.Client{Timeout: 30 * time.Second}}
}

// Do sends a request with an optional body and returns status and body.
func (h *HTTP) Do(ctx context.Context, method, path, contentType string, body io.Reader) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, h.Base+path, body)
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// JSON sends v as JSON (nil = no body) and decodes a 2xx answer into out.
func (h *HTTP) JSON(method, path string, v, out any) (int, []byte, error) {
	var body io.Reader
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	code, b, err := h.Do(context.Background(), method, path, "application/json", body)
	if err == nil && out != nil && code/100 == 2 {
		err = json.Unmarshal(b, out)
	}
	return code, b, err
}
