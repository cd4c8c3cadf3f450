package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// An executor killed with SIGKILL in the middle of a task loses the task to
// another executor, which completes it.
func TestExecutorKilledMidTaskIsReplaced(t *testing.T) {
	dir := t.TempDir()
	dev := harness.StartDev(t, filepath.Join(dir, "data"), "--executor-timeout", "3s")
	api := dev.API

	started := filepath.Join(dir, "started")
	// Executor A's extractor announces itself and then hangs (bounded).
	hang := writeScript(t, dir, "hang.sh", fmt.Sprintf("touch %q\nsleep 120\n", started))
	// Executor B's extractor of the same name finishes at once.
	quick := writeScript(t, dir, "quick.sh", `cat >/dev/null
echo '{"features":[{"name":"done","value":{"by":"quick"}}]}'
`)
	cfgA := writeExtractorsConfig(t, dir, "a.yaml", "test/slow", hang)
	cfgB := writeExtractorsConfig(t, dir, "b.yaml", "test/slow", quick)

	execArgs := func(id, cfg string) []string {
		return []string{"executor", "--executor-id", id, "--coordinator-addr", dev.GRPC,
			"--api-server", "http://" + dev.APIAddr, "--extractors-config", cfg}
	}
	a := harness.Start(t, "executor-a", execArgs("exec-a", cfgA)...)
	harness.Eventually(t, 30*time.Second, "extractor test/slow registered", func() error {
		code, body, err := api.JSON(http.MethodGet, "/extractors", nil, nil)
		if err != nil || !strings.Contains(string(body), "test/slow") {
			return fmt.Errorf("extractors: %d %v %s", code, err, body)
		}
		return nil
	})

	ns := newNamespace(t, api, "killed")
	createGraphYAML(t, api, ns, "name: g\nextraction_policies:\n  - extractor: test/slow\n    name: slow\n")
	id := upload(t, api, ns, "g", "", []byte("payload"), nil)
	harness.Eventually(t, 30*time.Second, "executor A started the task", func() error {
		_, err := os.Stat(started)
		return err
	})
	a.Kill()
	harness.Start(t, "executor-b", execArgs("exec-b", cfgB)...)

	waitContent(t, api, ns, id)
	ts := tasks(t, api, ns, "g", "slow")
	if len(ts) != 1 || ts[0].Outcome != "success" {
		t.Fatalf("tasks after executor loss: %+v", ts)
	}
	if _, ok := metadata(t, api, ns, id).ExtractedMetadata["done"]; !ok {
		t.Fatalf("the replacement executor's result is missing: %+v", metadata(t, api, ns, id))
	}
}

// A failing external extractor is retried, then its task ends failed with
// the extractor's stderr kept.
func TestFailingExtractorIsRetriedThenFailed(t *testing.T) {
	dir := t.TempDir()
	counter := filepath.Join(dir, "runs")
	fail := writeScript(t, dir, "fail.sh", fmt.Sprintf("cat >/dev/null\necho run >> %q\necho 'boom: cannot parse input' >&2\nexit 3\n", counter))
	cfg := writeExtractorsConfig(t, dir, "x.yaml", "test/failing", fail)
	dev := harness.StartDev(t, filepath.Join(dir, "data"), "--extractors-config", cfg,
		"--task-max-attempts", "3", "--task-retry-backoff", "100ms")
	api := dev.API

	ns := newNamespace(t, api, "failing")
	createGraphYAML(t, api, ns, "name: g\nextraction_policies:\n  - extractor: test/failing\n    name: f\n")
	id := upload(t, api, ns, "g", "", []byte("payload"), nil)
	waitContent(t, api, ns, id)

	ts := tasks(t, api, ns, "g", "f")
	if len(ts) != 1 {
		t.Fatalf("tasks: %+v", ts)
	}
	if ts[0].Outcome != "failed" || ts[0].Attempts != 3 || !strings.Contains(ts[0].LastError, "boom") {
		t.Fatalf("task = %+v, want failed after 3 attempts with the stderr tail", ts[0])
	}
	runs, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(runs), "run"); n != 3 {
		t.Fatalf("extractor ran %d times, want 3", n)
	}
}

// A restart keeps every namespace, graph, content and task.
func TestRestartKeepsEverything(t *testing.T) {
	dev := harness.StartDev(t, t.TempDir())
	api := dev.API
	ns := newNamespace(t, api, "restart")
	createGraphYAML(t, api, ns, chunkGraph)
	var ids []string
	for i := 0; i < 3; i++ {
		id := upload(t, api, ns, "docs", "", []byte(fmt.Sprintf("document number %d with text", i)), map[string]any{"n": i})
		waitContent(t, api, ns, id)
		ids = append(ids, id)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		for _, p := range []string{
			"/namespaces",
			"/namespaces/" + ns + "/extraction_graphs",
			"/namespaces/" + ns + "/extraction_graphs/docs/content",
			"/namespaces/" + ns + "/extraction_graphs/docs/extraction_policies/chunks/tasks",
			"/namespaces/" + ns + "/extraction_graphs/docs/extraction_policies/chunk-stats/tasks",
		} {
			code, body, err := api.JSON(http.MethodGet, p, nil, nil)
			mustStatus(t, http.StatusOK, code, body, err, p)
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			norm, _ := json.Marshal(v)
			out[p] = string(norm)
		}
		for _, id := range ids {
			out["download/"+id] = download(t, api, ns, id)
		}
		return out
	}
	before := snapshot()
	dev.Restart()
	after := snapshot()
	if !reflect.DeepEqual(before, after) {
		for k := range before {
			if before[k] != after[k] {
				t.Errorf("%s changed across restart:\nbefore %s\nafter  %s", k, before[k], after[k])
			}
		}
	}
}

// Every user mistake gets a 4xx with the same JSON error shape.
func TestBadInput(t *testing.T) {
	dev := harness.StartDev(t, t.TempDir(), "--max-upload-bytes", "1024")
	api := dev.API
	ns := newNamespace(t, api, "bad")
	createGraphYAML(t, api, ns, chunkGraph)
	big := make([]byte, 4096)

	cases := []struct {
		name   string
		method string
		path   string
		ctype  string
		body   string
		want   int
	}{
		{"unknown namespace", "GET", "/namespaces/nope/extraction_graphs", "", "", 404},
		{"unknown graph", "GET", "/namespaces/" + ns + "/extraction_graphs/nope/content", "", "", 404},
		{"unknown content", "GET", "/namespaces/" + ns + "/content/nope/metadata", "", "", 404},
		{"malformed JSON graph", "POST", "/namespaces/" + ns + "/extraction_graphs", "application/json", `{"name": "x", `, 400},
		{"malformed YAML graph", "POST", "/namespaces/" + ns + "/extraction_graphs", "application/x-yaml", "name: [unclosed", 400},
		{"unknown extractor", "POST", "/namespaces/" + ns + "/extraction_graphs", "application/json", `{"name":"g2","extraction_policies":[{"extractor":"no/such","name":"p"}]}`, 404},
		{"bad input params", "POST", "/namespaces/" + ns + "/extraction_graphs", "application/json", `{"name":"g3","extraction_policies":[{"extractor":"tensorlake/chunk-extractor","name":"p","input_params":{"chunk_size":"big"}}]}`, 400},
		{"bad label filter", "POST", "/namespaces/" + ns + "/extraction_graphs", "application/json", `{"name":"g4","extraction_policies":[{"extractor":"tensorlake/attributes","name":"p","filter":["=x"]}]}`, 400},
		{"bad labels_filter query", "GET", "/namespaces/" + ns + "/extraction_graphs/docs/content?labels_filter=%3D%3D", "", "", 400},
		{"missing multipart file", "POST", "/namespaces/" + ns + "/extraction_graphs/docs/extract", "multipart/form-data; boundary=x", "--x--\r\n", 400},
		{"content id with dots", "GET", "/namespaces/" + ns + "/content/..%2Fetc/metadata", "", "", 400},
		{"content id with control char", "GET", "/namespaces/" + ns + "/content/a%01b/metadata", "", "", 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body, err := api.Do(context.Background(), c.method, c.path, c.ctype, strings.NewReader(c.body))
			checkError(t, code, body, err, c.want)
		})
	}
	t.Run("upload over the size limit", func(t *testing.T) {
		code, body, err := uploadRaw(api, http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/docs/extract", "", big, nil)
		checkError(t, code, body, err, http.StatusRequestEntityTooLarge)
	})
	t.Run("upload id with slash", func(t *testing.T) {
		code, body, err := uploadRaw(api, http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/docs/extract", "a/b", []byte("x"), nil)
		checkError(t, code, body, err, http.StatusBadRequest)
	})
	t.Run("rejected uploads leave no blobs", func(t *testing.T) {
		var files []string
		_ = filepath.Walk(filepath.Join(dev.DataDir, "blobs"), func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				files = append(files, p)
			}
			return nil
		})
		if len(files) != 0 {
			t.Fatalf("blobs left behind by failed uploads: %v", files)
		}
	})
}

func checkError(t *testing.T, code int, body []byte, err error, want int) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("status %d, want %d: %s", code, want, body)
	}
	var e wire.Error
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" || e.Code == "" {
		t.Fatalf("error body %q is not the JSON error shape", body)
	}
}
