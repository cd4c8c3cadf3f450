package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// TestExecutorStateDirReplacesItsRegistration (issue 16): a standalone
// executor restarted over the same --state-dir registers under its
// previous id, so /executors lists it once (not the killed run as well
// until its removal); a second executor on a held state dir refuses to
// start with a one-line reason.
func TestExecutorStateDirReplacesItsRegistration(t *testing.T) {
	dev := harness.StartDev(t, filepath.Join(t.TempDir(), "d"))
	args := []string{"executor", "--state-dir", filepath.Join(t.TempDir(), "executor"),
		"--coordinator-addr", dev.GRPC, "--api-server", "http://" + dev.APIAddr}
	list := func() []string {
		var out wire.Executors
		if code, body, err := dev.API.JSON(http.MethodGet, "/executors", nil, &out); err != nil || code != 200 {
			t.Fatalf("GET /executors: %d %v %s", code, err, body)
		}
		var ids []string
		for _, e := range out.Executors {
			ids = append(ids, e.ID)
		}
		slices.Sort(ids)
		return ids
	}
	devIDs := list()
	if len(devIDs) != 1 {
		t.Fatalf("dev's executors: %v", devIDs)
	}
	ex := harness.Start(t, "executor", args...)
	var want []string
	harness.Eventually(t, 30*time.Second, "the standalone executor registered", func() error {
		if want = list(); len(want) != 2 {
			return fmt.Errorf("executors %v", want)
		}
		return nil
	})

	second := harness.Start(t, "executor-2", args...)
	if !second.Wait(30 * time.Second) {
		t.Fatal("a second executor on a held --state-dir keeps running")
	}
	if out := second.Output(); !strings.Contains(out, "in use by another executor") {
		t.Fatalf("second executor's output:\n%s", out)
	}

	ex.Kill()
	connected := strings.Count(dev.Output(), "executor connected")
	harness.Start(t, "executor-restarted", args...)
	harness.Eventually(t, 30*time.Second, "the restarted executor registered", func() error {
		if n := strings.Count(dev.Output(), "executor connected"); n == connected {
			return fmt.Errorf("%d registrations logged", n)
		}
		return nil
	})
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("executors right after the restart: %v, want %v", got, want)
	}
}
