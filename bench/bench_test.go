package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/bench/loadgen"
)

// TestSmoke runs every suite in its tiny form (what CI runs, so the tool
// keeps working): real coordinator processes, the etcd peer, a few writes,
// one failover trial of each kind, a few thousand items. It checks that
// each suite finished and wrote its section with figures, not that any
// figure is good: timing is never asserted.
func TestSmoke(t *testing.T) {
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	o := options{out: out, quick: true, duration: 300 * time.Millisecond, trials: 1, items: 2000, weaviateBudget: time.Minute}
	for _, s := range suites {
		t.Run(s.name, func(t *testing.T) {
			if err := run(s.name, o, "go run ./bench "+s.name+" --quick"); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			begin, end := markers(s.name)
			doc := string(b)
			i, j := strings.Index(doc, begin), strings.Index(doc, end)
			if i < 0 || j < i {
				t.Fatalf("no %s section in:\n%s", s.name, doc)
			}
			sec := doc[i:j]
			if !strings.Contains(sec, "Reproduce: `go run ./bench "+s.name) || !strings.Contains(sec, "|---|") {
				t.Fatalf("section lacks its command or table:\n%s", sec)
			}
			for _, want := range smokeWants[s.name] {
				if !strings.Contains(sec, want) {
					t.Fatalf("section lacks %q:\n%s", want, sec)
				}
			}
			t.Logf("\n%s", sec)
		})
	}
}

// smokeWants are row labels each section must contain.
var smokeWants = map[string][]string{
	"writes":    {"| 256 | 64 |", "| 4096 | 1 |", "3 nodes / 1 node"},
	"failover":  {"| ours (3 coordinators) | kill -9 leader | 1 |", "| etcd (3 members) | SIGTERM leader (hand-off) | 1 |"},
	"sched":     {"`indexify dev` (1 node) | light", "saturating", "tasks pushed"},
	"scale":     {"state-store memory per item", "restart-to-ready"},
	"retrieval": {"embedded (exact)", "Weaviate (HNSW)", "Upload -> searchable"},
	"micro":     {"500,000 tasks over 100 executors, setup included"},
}

func TestWriteSectionReplacesOnlyItsOwnSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "B.md")
	if err := writeSection(p, "a", "first A"); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(p, "b", "only B"); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(p, "a", "second A"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	doc := string(b)
	if strings.Contains(doc, "first A") || !strings.Contains(doc, "second A") || !strings.Contains(doc, "only B") {
		t.Fatalf("unexpected document:\n%s", doc)
	}
	if strings.Index(doc, "second A") > strings.Index(doc, "only B") {
		t.Fatalf("section a moved:\n%s", doc)
	}
}

// A trial measures only its own successes: trim drops those that ended
// before the trial began and keeps the rest in order (Outage reads them).
func TestProbeSetTrimKeepsOnlyTheTrialsSuccesses(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ps := &probeSet{}
	for _, end := range []int{10, 20, 30, 40, 50} {
		ps.add(loadgen.Success{Start: at(end - 5), End: at(end)})
	}
	ps.trim(at(30))
	got := ps.get()
	if len(got) != 3 || !got[0].End.Equal(at(30)) || !got[2].End.Equal(at(50)) {
		t.Fatalf("after trim at 30 ms: %v, want the successes ending at 30, 40 and 50 ms", got)
	}
	// Failed writes: counted in a trial's window, trimmed like successes.
	ps.fail(loadgen.Success{Start: at(20), End: at(25)}) // before the window
	ps.fail(loadgen.Success{Start: at(28), End: at(35)}) // answered inside it
	ps.fail(loadgen.Success{Start: at(70), End: at(80)}) // sent inside it
	ps.fail(loadgen.Success{Start: at(90), End: at(95)}) // sent after it
	if n := ps.failedIn(at(30), at(85)); n != 2 {
		t.Fatalf("%d failed writes in [30, 85) ms, want 2", n)
	}
	ps.add(loadgen.Success{Start: at(55), End: at(60)})
	ps.trim(at(100))
	if got := ps.get(); len(got) != 0 {
		t.Fatalf("after trim at 100 ms: %v, want none", got)
	}
	if n := ps.failedIn(at(0), at(200)); n != 0 {
		t.Fatalf("after trim at 100 ms: %d failed writes, want none", n)
	}
}
