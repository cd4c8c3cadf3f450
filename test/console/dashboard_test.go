package console

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// TestDashboardMetricsExist checks that every metric the Grafana dashboard
// queries is exported by a real `indexify dev` that did some work, so a
// renamed metric cannot leave a silently empty panel behind.
func TestDashboardMetricsExist(t *testing.T) {
	dash, err := os.ReadFile("../../deploy/grafana/indexify.json")
	if err != nil {
		t.Fatal(err)
	}
	dev := harness.StartDev(t, t.TempDir())
	harness.Eventually(t, 30*time.Second, "executor registered", func() error {
		code, body, err := dev.API.Do(context.Background(), "GET", "/executors", "", nil)
		if err != nil || code != 200 || !strings.Contains(string(body), "tensorlake/attributes") {
			return fmt.Errorf("GET /executors: %d %v %s", code, err, body)
		}
		return nil
	})
	code, body, err := dev.API.Do(context.Background(), "POST", "/namespaces/default/extraction_graphs", "application/x-yaml",
		strings.NewReader("name: docs\nextraction_policies:\n  - extractor: tensorlake/attributes\n    name: stats\n"))
	if err != nil || code != 200 {
		t.Fatalf("create graph: %d %v %s", code, err, body)
	}
	uploadText(t, dev.API, "metrics for the dashboard")

	scrape := func(base string) string {
		code, body, err := harness.NewHTTP(base).Do(context.Background(), "GET", "/metrics", "", nil)
		if err != nil || code != 200 {
			t.Fatalf("GET %s/metrics: %d %v", base, code, err)
		}
		return string(body)
	}
	var exported string
	harness.Eventually(t, 30*time.Second, "task finished and counted", func() error {
		exported = scrape("http://"+dev.Health) + scrape("http://"+dev.APIAddr)
		if !strings.Contains(exported, `indexify_tasks{extractor="tensorlake/attributes",state="success"} 1`) {
			return fmt.Errorf("no finished task in the metrics yet")
		}
		return nil
	})
	names := regexp.MustCompile(`indexify_[a-z_]+`).FindAllString(string(dash), -1)
	if len(names) < 10 {
		t.Fatalf("dashboard queries only %d metrics", len(names))
	}
	for _, n := range names {
		if !regexp.MustCompile(`(?m)^` + n + `[{ ]`).MatchString(exported) {
			t.Errorf("dashboard queries %s, which neither /metrics exports", n)
		}
	}
}
