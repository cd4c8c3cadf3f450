package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// TestDevReadyMeansUsable (issue 18 item 11): the first moment `indexify
// dev` answers at all, its built-in extractors are registered, the default
// namespace exists, /readyz is 200 and the ready line is printed, so the
// README's first request succeeds without retrying.
func TestDevReadyMeansUsable(t *testing.T) {
	port := func() string { return "127.0.0.1:" + strconv.Itoa(harness.FreePort(t, "127.0.0.1")) }
	api, health := port(), port()
	p := harness.Start(t, "indexify-dev", "dev", "--data-dir", filepath.Join(t.TempDir(), "d"), "--node-id", "dev-0",
		"--api-addr", api, "--coordinator-addr", port(), "--coordinator-http-addr", health, "--raft-addr", port())
	h := harness.NewHTTP("http://" + api)
	harness.Eventually(t, 60*time.Second, "indexify dev answers", func() error {
		if p.Exited() {
			t.Fatalf("indexify dev exited:\n%s", p.Output())
		}
		code, _, err := h.Do(context.Background(), http.MethodGet, "/", "", nil)
		if err == nil && code != 200 {
			err = fmt.Errorf("GET / = %d", code)
		}
		return err
	})
	// No retries from here on: answering means ready.
	var ex wire.Extractors
	if code, body, err := h.JSON(http.MethodGet, "/extractors", nil, &ex); err != nil || code != 200 || len(ex.Extractors) == 0 {
		t.Fatalf("GET /extractors right after the first answer: %d %v %s", code, err, body)
	}
	code, body, err := h.Do(context.Background(), http.MethodPost, "/namespaces/default/extraction_graphs", "application/yaml",
		strings.NewReader("name: docs\nextraction_policies:\n  - {extractor: tensorlake/chunk-extractor, name: chunks}\n"))
	if err != nil || code != 200 {
		t.Fatalf("creating a graph right after the first answer: %d %v %s", code, err, body)
	}
	hz := harness.NewHTTP("http://" + health)
	if code, body, err := hz.Do(context.Background(), http.MethodGet, "/readyz", "", nil); err != nil || code != 200 {
		t.Fatalf("/readyz once the API answers: %d %v %s", code, err, body)
	}
	if want := "indexify dev ready: http://" + api; strings.Count(p.Output(), want) != 1 {
		t.Fatalf("output has no single %q line:\n%s", want, p.Output())
	}
}

// TestDevListensOnLoopbackByDefault (issue 16): dev's listeners default to
// 127.0.0.1, while server and coordinator keep their all-interface defaults.
func TestDevListensOnLoopbackByDefault(t *testing.T) {
	dev := newDevCmd().Flags()
	for name, want := range map[string]string{"api-addr": "127.0.0.1:8900", "coordinator-addr": "127.0.0.1:8950",
		"coordinator-http-addr": "127.0.0.1:8960", "raft-addr": "127.0.0.1:8970"} {
		if f := dev.Lookup(name); f.DefValue != want || f.Value.String() != want || !loopbackListen(f.Value.String()) {
			t.Errorf("dev --%s default %q (value %q), want %q", name, f.DefValue, f.Value, want)
		}
	}
	if got := newServerCmd().Flags().Lookup("api-addr").DefValue; got != ":8900" {
		t.Errorf("server --api-addr default %q, want :8900", got)
	}
	if got := newCoordinatorCmd().Flags().Lookup("coordinator-addr").DefValue; got != ":8950" {
		t.Errorf("coordinator --coordinator-addr default %q, want :8950", got)
	}
}

// TestDevRestartReplacesItsExecutor (issue 16): after a restart over the
// same data directory, /executors lists one executor, the restarted one,
// with the id of the previous run: no ghost until the executor timeout.
func TestDevRestartReplacesItsExecutor(t *testing.T) {
	dev := harness.StartDev(t, filepath.Join(t.TempDir(), "d"))
	list := func() []string {
		var out wire.Executors
		if code, body, err := dev.API.JSON(http.MethodGet, "/executors", nil, &out); err != nil || code != 200 {
			t.Fatalf("GET /executors: %d %v %s", code, err, body)
		}
		ids := make([]string, 0, len(out.Executors))
		for _, e := range out.Executors {
			ids = append(ids, e.ID)
		}
		return ids
	}
	before := list()
	if len(before) != 1 {
		t.Fatalf("executors before restart: %v", before)
	}
	dev.Restart()
	if after := list(); len(after) != 1 || after[0] != before[0] {
		t.Fatalf("executors right after restart: %v, want just %v", after, before)
	}
}
