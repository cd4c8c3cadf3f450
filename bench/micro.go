package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// microBench is one `go test -bench` benchmark of the repository.
type microBench struct {
	pkg, name, what, goal string
	goalNs                float64 // 0: no goal
}

var micros = []microBench{
	{"./internal/scheduler", "BenchmarkAllocate500kTasks100ExecutorsWithSetup", "allocation planner: 500,000 tasks over 100 executors, setup included (issue 2)", "< 0.5 s (original: 2.7 s + minutes of setup)", 0.5e9},
	{"./internal/scheduler", "BenchmarkAllocate500kTasks100Executors", "allocation planner: 500,000 tasks over 100 executors, allocation only", "", 0},
	{"./internal/scheduler", "BenchmarkPlan1000NewContent", "scheduler pass: 1,000 new content -> 2,000 tasks created and allocated (command not applied)", "", 0},
	{"./internal/state", "BenchmarkApplyCreateContent", "FSM apply of one CreateContent (one item)", "", 0},
}

// microSuite runs the repository's Go benchmarks that have figures in the
// issues and tabulates them; the command to rerun one alone is in the table.
func microSuite(r *runner, o options) (string, error) {
	benchtime := "3x"
	if o.quick {
		benchtime = "1x"
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	var rows [][]string
	for _, m := range micros {
		cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^"+m.name+"$", "-benchtime", benchtime, "-benchmem", m.pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s: %v\n%s", m.name, err, out)
		}
		ns, alloc, ok := parseBench(string(out), m.name)
		if !ok {
			return "", fmt.Errorf("%s: no result in:\n%s", m.name, out)
		}
		met := ""
		if m.goalNs > 0 {
			met = goal(ns <= m.goalNs)
		}
		rows = append(rows, []string{m.what, fmtNs(ns), alloc, m.goal, met,
			fmt.Sprintf("`go test -run '^$' -bench '^%s$' -benchtime %s -benchmem %s`", m.name, benchtime, m.pkg)})
	}
	var b strings.Builder
	b.WriteString("## Micro-benchmarks (`go test -bench`)\n\n")
	b.WriteString(table([]string{"what", "time per op", "allocated per op", "goal", "met", "command"}, rows))
	return b.String(), nil
}

// parseBench finds "BenchmarkName-N  iters  X ns/op  Y B/op ..." in out.
func parseBench(out, name string) (ns float64, alloc string, ok bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || (f[0] != name && !strings.HasPrefix(f[0], name+"-")) {
			continue
		}
		for i := 2; i+1 < len(f); i++ {
			switch f[i+1] {
			case "ns/op":
				ns, _ = strconv.ParseFloat(f[i], 64)
				ok = true
			case "B/op":
				v, _ := strconv.ParseFloat(f[i], 64)
				alloc = fmt.Sprintf("%.1f MiB", v/(1<<20))
				if v < 1<<20 {
					alloc = fmt.Sprintf("%.0f B", v)
				}
			}
		}
	}
	return ns, alloc, ok
}

func fmtNs(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.1f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	default:
		return fmt.Sprintf("%.0f ns", ns)
	}
}
