package coordinator

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestUnavailableRetriedCallsLogAtDebug (issue 16): the Unavailable answers
// a restart produces before the first election (the callers retry, then
// succeed) stay out of the info log; a streak lasting past unavailableQuiet
// logs at info; other failures log at info as before.
func TestUnavailableRetriedCallsLogAtDebug(t *testing.T) {
	var buf bytes.Buffer
	c := newCallLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), newNodeMetrics(prometheus.NewRegistry()))
	ctx := context.Background()
	unavailable := status.Error(codes.Unavailable, "no leader")
	for range 7 {
		c.done(ctx, "/m/Register", "", time.Now(), unavailable, true)
	}
	c.done(ctx, "/m/Register", "", time.Now(), nil, true)
	if buf.Len() != 0 {
		t.Fatalf("retried-then-succeeded calls logged at info:\n%s", buf.String())
	}
	if c.unavailSince.Load() != 0 {
		t.Fatal("a successful call did not end the Unavailable streak")
	}
	c.done(ctx, "/m/Register", "", time.Now(), unavailable, true)
	c.unavailSince.Store(time.Now().Add(-unavailableQuiet - time.Second).UnixNano())
	c.done(ctx, "/m/Register", "", time.Now(), unavailable, true)
	if n := strings.Count(buf.String(), "code=Unavailable"); n != 1 {
		t.Fatalf("a lasting Unavailable streak logged %d info lines, want 1:\n%s", n, buf.String())
	}
	buf.Reset()
	c.done(ctx, "/m/Register", "", time.Now(), status.Error(codes.Internal, "boom"), true)
	if !strings.Contains(buf.String(), "code=Internal") {
		t.Fatalf("an Internal error is not logged at info: %q", buf.String())
	}
}
