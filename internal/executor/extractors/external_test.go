package extractors

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/retry"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// writeScript writes an executable shell script into a fresh temp dir.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "extractor.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newExternal(t *testing.T, cfg ExternalConfig) *External {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "test/ext"
	}
	x, err := NewExternal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

var testTask = &pb.Task{Id: "task-1", ContentId: "c-1", ContentVersion: 2, Namespace: "ns", PolicyName: "pol"}

func TestExternalSuccess(t *testing.T) {
	script := writeScript(t, `
data=$(cat)
printf '{"content":[{"text":"%s","labels":{"k":"v","n":3}},{"data_base64":"AAEC","mime_type":"image/x-test","features":[{"name":"emb","embedding":true,"value":[1, 2.5]}]}],' \
  "$data|$INDEXIFY_MIME_TYPE|$INDEXIFY_CONTENT_ID|$INDEXIFY_CONTENT_VERSION|$INDEXIFY_TASK_ID|$INDEXIFY_NAMESPACE|$INDEXIFY_POLICY"
printf '"features":[{"name":"params","value":%s}]}\n' "$INDEXIFY_INPUT_PARAMS"
echo "a warning nobody reads" >&2
`)
	x := newExternal(t, ExternalConfig{
		Command:           []string{script},
		InputParamsSchema: json.RawMessage(`{"type":"object","properties":{"lang":{"type":"string"}}}`),
		InputMimeTypes:    []string{"text/plain"},
		Outputs:           map[string]*pb.ExtractorOutput{"emb": {Embedding: &pb.EmbeddingSchema{Dim: 2, Distance: "cosine"}}},
	})
	out, err := x.Extract(context.Background(), Input{Task: testTask, Data: []byte("hello"), MimeType: "text/plain", Params: json.RawMessage(`{ "lang": "en" }`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Contents) != 2 {
		t.Fatalf("contents %+v", out.Contents)
	}
	c0, c1 := out.Contents[0], out.Contents[1]
	if string(c0.Data) != "hello|text/plain|c-1|2|task-1|ns|pol" || c0.MimeType != "text/plain" {
		t.Errorf("content 0: %q %q", c0.Data, c0.MimeType)
	}
	if string(c0.Labels["k"]) != `"v"` || string(c0.Labels["n"]) != "3" {
		t.Errorf("labels %v", c0.Labels)
	}
	if string(c1.Data) != "\x00\x01\x02" || c1.MimeType != "image/x-test" {
		t.Errorf("content 1: %q %q", c1.Data, c1.MimeType)
	}
	if len(c1.Features) != 1 || !c1.Features[0].GetEmbedding() || c1.Features[0].GetValueJson() != "[1,2.5]" {
		t.Errorf("content 1 features %v", c1.Features)
	}
	if len(out.Features) != 1 || out.Features[0].GetName() != "params" || out.Features[0].GetValueJson() != `{"lang":"en"}` {
		t.Errorf("features %v", out.Features)
	}
	d := x.Describe()
	if d.GetName() != "test/ext" || d.GetInputParamsSchemaJson() != `{"type":"object","properties":{"lang":{"type":"string"}}}` || d.GetOutputs()["emb"].GetEmbedding().GetDim() != 2 {
		t.Errorf("description %v", d)
	}
}

func TestExternalNonZeroExitKeepsStderrTail(t *testing.T) {
	script := writeScript(t, `
cat >/dev/null
i=0
while [ $i -lt 100 ]; do echo "noise line $i with some padding to make it longer" >&2; i=$((i+1)); done
echo "FINAL REASON: model file missing" >&2
exit 3
`)
	x := newExternal(t, ExternalConfig{Command: []string{script}})
	_, err := x.Extract(context.Background(), Input{Task: testTask, Data: []byte("x")})
	if err == nil {
		t.Fatal("non-zero exit succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "exit status 3") || !strings.Contains(msg, "FINAL REASON: model file missing") {
		t.Fatalf("error lacks exit status or stderr tail: %s", msg)
	}
	if strings.Contains(msg, "noise line 0 ") || len(msg) > stderrTailBytes+200 {
		t.Fatalf("error carries more than the stderr tail (%d bytes)", len(msg))
	}
}

func TestExternalBadJSON(t *testing.T) {
	cases := map[string]string{
		`echo "this is not json"; echo "parse hint" >&2`: "stdout is not the expected JSON object",
		`true`: "empty stdout",
		`echo '{"content":[{"mime_type":"text/plain"}]}'`:                      "needs text or data_base64",
		`echo '{"content":[{"text":"a","data_base64":"AA=="}]}'`:               "not both",
		`echo '{"content":[{"data_base64":"%%%"}]}'`:                           "data_base64",
		`echo '{"features":[{"name":"e","embedding":true,"value":"x"}]}'`:      "array of numbers",
		`echo '{"features":[{"value":1}]}'`:                                    "name is required",
		`echo '{"features":[{"name":"a"}]}'`:                                   "value is required",
		`echo '{"content":[]} {"more":1}'`:                                     "unexpected data",
		`echo '{"content":[{"text":"a","features":[{"name":"","value":1}]}]}'`: "content[0].features[0]",
	}
	for body, want := range cases {
		x := newExternal(t, ExternalConfig{Command: []string{writeScript(t, "cat >/dev/null\n"+body+"\n")}})
		_, err := x.Extract(context.Background(), Input{Task: testTask, Data: []byte("x")})
		if err == nil || !strings.Contains(err.Error(), "invalid output") || !strings.Contains(err.Error(), want) {
			t.Errorf("script %q: err %v, want %q", body, err, want)
		}
	}
	x := newExternal(t, ExternalConfig{Command: []string{writeScript(t, `echo "garbage"; echo "parse hint" >&2`)}})
	_, err := x.Extract(context.Background(), Input{Task: testTask})
	if err == nil || !strings.Contains(err.Error(), "stderr: parse hint") {
		t.Fatalf("bad JSON error lacks stderr: %v", err)
	}
}

// processGone reports whether pid no longer runs (absent or a zombie that
// nobody reaped yet, which happens when the container's init does not reap).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// Field 3 (after "pid (comm)") is the state.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	if !retry.PollUntil(10*time.Second, 10*time.Millisecond, func() bool { return processGone(pid) }) {
		t.Fatalf("process %d still running", pid)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var text string
	if !retry.PollUntil(10*time.Second, 10*time.Millisecond, func() bool {
		b, err := os.ReadFile(path)
		text = string(b)
		return err == nil && strings.HasSuffix(text, "\n")
	}) {
		t.Fatalf("pid file %s never written", path)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// hangingScript starts a background grandchild (which inherits stdout) and
// then blocks; it records the grandchild's pid.
func hangingScript(t *testing.T) (script, pidFile string) {
	pidFile = filepath.Join(t.TempDir(), "child.pid")
	script = writeScript(t, `
echo "starting slow work" >&2
sleep 300 &
echo $! > `+pidFile+`
wait
`)
	return script, pidFile
}

func TestExternalTimeoutKillsProcessGroup(t *testing.T) {
	script, pidFile := hangingScript(t)
	x := newExternal(t, ExternalConfig{Command: []string{script}, Timeout: 300 * time.Millisecond})
	_, err := x.Extract(context.Background(), Input{Task: testTask})
	if err == nil || !strings.Contains(err.Error(), "timed out") || !strings.Contains(err.Error(), "starting slow work") {
		t.Fatalf("err = %v", err)
	}
	waitGone(t, readPid(t, pidFile))
}

func TestExternalCancelKillsProcessGroup(t *testing.T) {
	script, pidFile := hangingScript(t)
	x := newExternal(t, ExternalConfig{Command: []string{script}})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := x.Extract(ctx, Input{Task: testTask})
		errc <- err
	}()
	pid := readPid(t, pidFile)
	cancel()
	err := <-errc
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	waitGone(t, pid)
}

func TestExternalOutputLimit(t *testing.T) {
	x := newExternal(t, ExternalConfig{Command: []string{writeScript(t, "exec yes\n")}, MaxOutputBytes: 4096})
	_, err := x.Extract(context.Background(), Input{Task: testTask})
	if err == nil || !strings.Contains(err.Error(), "exceeded the limit of 4096 bytes") {
		t.Fatalf("err = %v", err)
	}
}

func TestExternalParamsValidatedBeforeRunning(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	x := newExternal(t, ExternalConfig{
		Command:           []string{writeScript(t, "touch "+marker+"\necho '{}'\n")},
		InputParamsSchema: json.RawMessage(`{"type":"object","properties":{"lang":{"type":"string"}},"required":["lang"]}`),
	})
	for _, p := range []string{`{"lang":1}`, `{}`, `[]`, `{bad`} {
		if _, err := x.Extract(context.Background(), Input{Task: testTask, Params: json.RawMessage(p)}); err == nil {
			t.Errorf("params %s accepted", p)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("extractor ran despite invalid params")
	}
	if _, err := x.Extract(context.Background(), Input{Task: testTask, Params: json.RawMessage(`{"lang":"en"}`)}); err != nil {
		t.Fatal(err)
	}
}

func TestNewExternalRejectsBadConfig(t *testing.T) {
	ok := writeScript(t, "echo '{}'\n")
	bad := []ExternalConfig{
		{Name: "", Command: []string{ok}},
		{Name: "x"},
		{Name: "x", Command: []string{filepath.Join(t.TempDir(), "missing")}},
		{Name: "x", Command: []string{ok}, InputParamsSchema: json.RawMessage(`{"type":`)},
		{Name: "x", Command: []string{ok}, InputParamsSchema: json.RawMessage(`{"type":"no-such-type"}`)},
		{Name: "x", Command: []string{ok}, Timeout: -time.Second},
		{Name: "x", Command: []string{ok}, Outputs: map[string]*pb.ExtractorOutput{"o": {}}},
		{Name: "x", Command: []string{ok}, Outputs: map[string]*pb.ExtractorOutput{"o": {MetadataSchemaJson: "{"}}},
	}
	for i, cfg := range bad {
		if _, err := NewExternal(cfg); err == nil {
			t.Errorf("config %d accepted: %+v", i, cfg)
		}
	}
	x := newExternal(t, ExternalConfig{Name: "x", Command: []string{ok}})
	if x.timeout != DefaultExternalTimeout || x.maxOut != DefaultMaxOutputBytes || x.Describe().GetInputParamsSchemaJson() != `{"type":"object"}` {
		t.Fatalf("defaults not applied: %+v", x)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{keep: 8}
	for _, s := range []string{"abc", "defgh", "ijklmnopq", "rs"} {
		if _, err := tb.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got := tb.String(); got != "klmnopqrs"[1:] {
		t.Fatalf("tail %q", got)
	}
	// A cut inside a multi-byte character starts at the next character.
	tb = &tailBuffer{keep: 4}
	_, _ = tb.Write([]byte("xx日本"))
	if got := tb.String(); got != "本" {
		t.Fatalf("tail %q", got)
	}
}
