// Package console tests the web console in a real headless Chromium against
// a real 3-coordinator cluster: the page shows the leader, and after the
// leader process is killed it shows the new one. Needs the `chromium`
// package (.ci/run installs it).
package console

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/indexify-go/indexify/test/harness"
)

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium binary found: apt-get install -y chromium (see .ci/run)")
	return ""
}

// artifactDir is where screenshots go: $INDEXIFY_ARTIFACTS, else a temp dir.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("INDEXIFY_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
		// The browser may talk to loopback only: every other host name
		// fails to resolve, so no update or telemetry request leaves.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Flag("no-proxy-server", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// waitText polls the text of a CSS selector until check accepts it.
func waitText(t *testing.T, ctx context.Context, sel string, timeout time.Duration, check func(string) error) string {
	t.Helper()
	var text string
	harness.Eventually(t, timeout, "console "+sel, func() error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		if text, err = chromedp.Run(cctx, chromedp.TextContent(chromedp.CSS(sel))); err != nil {
			return err
		}
		return check(text)
	})
	return text
}

func equals(want string) func(string) error {
	return func(got string) error {
		if strings.TrimSpace(got) != want {
			return fmt.Errorf("shows %q, want %q", got, want)
		}
		return nil
	}
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot saved: %s", path)
}

const graphYAML = `name: docs
description: chunk text, then compute attributes of each chunk
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 40, overlap: 0}
  - extractor: tensorlake/attributes
    name: stats
    content_source: chunks
  - extractor: tensorlake/attributes
    name: file-stats
`

func TestConsoleFollowsLeaderFailover(t *testing.T) {
	ctx := newBrowser(t)
	dir := artifactDir(t)

	c := harness.NewCluster(t, 3, 61)
	for i := range c.Nodes {
		c.Start(i)
	}
	leader := c.WaitLeader(60 * time.Second)
	_, api := c.StartServer()
	harness.Start(t, "executor", "executor", "--coordinator-addr", c.Targets(), "--api-server", api.Base, "--executor-id", "exec-1")

	harness.Eventually(t, 30*time.Second, "executor registered", func() error {
		code, body, err := api.Do(context.Background(), "GET", "/executors", "", nil)
		if err != nil || code != 200 || !strings.Contains(string(body), "exec-1") {
			return fmt.Errorf("GET /executors: %d %v %s", code, err, body)
		}
		return nil
	})
	// The API server creates the "default" namespace in the background
	// once a leader takes writes; with the 300ms Raft timing the executor
	// can register before that commit is visible here.
	harness.Eventually(t, 30*time.Second, "the default namespace exists", func() error {
		code, body, err := api.Do(context.Background(), "GET", "/namespaces/default", "", nil)
		if err != nil || code != 200 {
			return fmt.Errorf("GET /namespaces/default: %d %v %s", code, err, body)
		}
		return nil
	})
	// Some data, so the screenshot shows every part of the console.
	code, body, err := api.Do(context.Background(), "POST", "/namespaces/default/extraction_graphs", "application/x-yaml", strings.NewReader(graphYAML))
	if err != nil || code != 200 {
		t.Fatalf("create graph: %d %v %s", code, err, body)
	}
	uploadText(t, api, "Indexify extracts structured data from unstructured content, continuously and reliably.")

	if err := chromedp.Do(ctx, chromedp.Navigate(api.Base+"/ui/")); err != nil {
		t.Fatal(err)
	}
	old := c.Nodes[leader].ID
	waitText(t, ctx, "#leader", 20*time.Second, equals(old))
	waitText(t, ctx, "#cluster-members", 20*time.Second, func(s string) error {
		for _, n := range c.Nodes {
			if !strings.Contains(s, n.ID) {
				return fmt.Errorf("member %s not listed: %q", n.ID, s)
			}
		}
		if strings.Count(s, "voter") != 3 {
			return fmt.Errorf("want 3 voters: %q", s)
		}
		if strings.Count(s, "healthy") != 3 || strings.Contains(s, "unhealthy") || strings.Contains(s, "unknown") {
			return fmt.Errorf("want 3 healthy members: %q", s)
		}
		return nil
	})
	waitText(t, ctx, "#graph-svg", 20*time.Second, func(s string) error {
		for _, p := range []string{"chunks", "stats", "file-stats", "tensorlake/chunk-extractor"} {
			if !strings.Contains(s, p) {
				return fmt.Errorf("graph drawing lacks %q: %q", p, s)
			}
		}
		return nil
	})
	waitText(t, ctx, "#executor-rows", 20*time.Second, func(s string) error {
		if !strings.Contains(s, "exec-1") {
			return fmt.Errorf("executor not listed: %q", s)
		}
		return nil
	})
	waitText(t, ctx, "#task-rows", 30*time.Second, func(s string) error {
		if strings.Count(s, "success") < 3 { // chunks, file-stats, and stats of at least one chunk
			return fmt.Errorf("tasks not finished yet: %q", s)
		}
		return nil
	})
	screenshot(t, ctx, dir, "console-before-failover.png")

	c.Nodes[leader].Proc.Kill()
	next := c.WaitLeader(30 * time.Second)
	if c.Nodes[next].ID == old {
		t.Fatalf("killed leader %s still leads", old)
	}
	waitText(t, ctx, "#leader", 30*time.Second, equals(c.Nodes[next].ID))
	waitText(t, ctx, fmt.Sprintf(`tr[data-node=%q]`, old), 30*time.Second, func(s string) error {
		if !strings.Contains(s, "unhealthy") {
			return fmt.Errorf("killed node's row: %q", s)
		}
		return nil
	})
	screenshot(t, ctx, dir, "console-after-failover.png")
}

func uploadText(t *testing.T, api *harness.HTTP, text string) {
	t.Helper()
	var buf strings.Builder
	const boundary = "consoletestboundary"
	fmt.Fprintf(&buf, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"note.txt\"\r\nContent-Type: text/plain\r\n\r\n%s\r\n--%s--\r\n", boundary, text, boundary)
	code, body, err := api.Do(context.Background(), "POST", "/namespaces/default/extraction_graphs/docs/extract",
		"multipart/form-data; boundary="+boundary, strings.NewReader(buf.String()))
	if err != nil || code != 200 {
		t.Fatalf("upload: %d %v %s", code, err, body)
	}
}
