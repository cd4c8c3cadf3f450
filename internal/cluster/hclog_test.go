package cluster

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestHCLoggerFormatsLikeHclog (issue 16): Raft's hclog arguments reach the
// slog output readable: hclog.Fmt values printf-formatted (not
// ["%+v",null]), durations as "20ms" (not 20000000), hclog's number and
// quote wrappers rendered, implied args and names kept.
func TestHCLoggerFormatsLikeHclog(t *testing.T) {
	servers := []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "127.0.0.1:1"}}
	log := func(h slog.Handler) {
		l := newHCLogger(slog.New(h)).Named("snapshot").With("term", 3)
		l.Info("entering leader state", "servers", hclog.Fmt("%+v", servers), "took", 20*time.Millisecond,
			"index", hclog.Hex(255), "mode", hclog.Octal(8), "bits", hclog.Binary(5), "q", hclog.Quote(`a"b`), "dangling")
	}
	var jb bytes.Buffer
	log(slog.NewJSONHandler(&jb, nil))
	var rec map[string]any
	if err := json.Unmarshal(jb.Bytes(), &rec); err != nil {
		t.Fatalf("json log %q: %v", jb.String(), err)
	}
	want := map[string]any{
		"msg": "snapshot: entering leader state", "component": "raft", "term": float64(3),
		"servers": "[{Suffrage:Voter ID:n1 Address:127.0.0.1:1}]", "took": "20ms",
		"index": "0xff", "mode": "010", "bits": "0b101", "q": `"a\"b"`, "EXTRA_VALUE_AT_END": "dangling",
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("json %s = %#v, want %#v (line %s)", k, rec[k], v, jb.String())
		}
	}
	var tb bytes.Buffer
	log(slog.NewTextHandler(&tb, nil))
	line := tb.String()
	for _, w := range []string{`servers="[{Suffrage:Voter ID:n1 Address:127.0.0.1:1}]"`, "took=20ms", "term=3"} {
		if !strings.Contains(line, w) {
			t.Errorf("text line lacks %s: %s", w, line)
		}
	}
	if strings.Contains(line+jb.String(), "%+v") {
		t.Errorf("an unformatted verb is left: %s %s", line, jb.String())
	}
}
