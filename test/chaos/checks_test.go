package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// registerInput is one register operation for porcupine.
type registerInput struct {
	Key   int
	Write bool
	Val   int64
}

// registerModel: each content id's label "v" is a read/write register whose
// initial value is 0 (written during setup, before the history starts).
var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		for _, o := range h {
			k := o.Input.(registerInput).Key
			byKey[k] = append(byKey[k], o)
		}
		keys := make([]int, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		in := input.(registerInput)
		if in.Write {
			return true, in.Val
		}
		return output.(int64) == state.(int64), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(registerInput)
		if in.Write {
			if output == nil {
				return fmt.Sprintf("write(reg-%d, %d) ?", in.Key, in.Val)
			}
			return fmt.Sprintf("write(reg-%d, %d)", in.Key, in.Val)
		}
		return fmt.Sprintf("read(reg-%d) -> %d", in.Key, output.(int64))
	},
	DescribeState: func(state any) string { return strconv.FormatInt(state.(int64), 10) },
}

// registerHistory turns the client history into porcupine operations.
// Failed reads and definitely failed writes had no effect and are dropped;
// an indeterminate write may take effect at any time after its call, so it
// returns "at the end of time" (after every other operation).
func registerHistory(ops []op) []porcupine.Operation {
	var end int64
	for _, o := range ops {
		end = max(end, o.Ret)
	}
	var out []porcupine.Operation
	for _, o := range ops {
		switch {
		case o.Kind == "write" && o.Res == resOK:
			out = append(out, porcupine.Operation{ClientId: o.Client, Input: registerInput{Key: o.Key, Write: true, Val: o.Val},
				Call: o.Call, Output: int64(0), Return: o.Ret})
		case o.Kind == "write" && o.Res == resIndeterminate:
			out = append(out, porcupine.Operation{ClientId: o.Client, Input: registerInput{Key: o.Key, Write: true, Val: o.Val},
				Call: o.Call, Output: nil, Return: end + 1})
		case o.Kind == "read" && o.Res == resOK:
			out = append(out, porcupine.Operation{ClientId: o.Client, Input: registerInput{Key: o.Key},
				Call: o.Call, Output: o.Out, Return: o.Ret})
		}
	}
	return out
}

// checkLinearizable runs porcupine and writes the HTML visualisation, with
// the faults drawn as annotations.
func checkLinearizable(ops []op, faults []fault, htmlPath string, timeout time.Duration) (porcupine.CheckResult, error) {
	h := registerHistory(ops)
	res, info := porcupine.CheckOperationsVerbose(registerModel, h, timeout)
	var notes []porcupine.Annotation
	for _, f := range faults {
		notes = append(notes, porcupine.Annotation{Tag: "nemesis", Start: f.Start, End: f.Heal,
			Description: f.Kind, Details: f.Target, BackgroundColor: "#f5c6cb"})
	}
	info.AddAnnotations(notes)
	return res, porcupine.VisualizePath(registerModel, info, htmlPath)
}

// logLine is a parsed slog text line.
type logLine struct {
	t     time.Time
	attrs map[string]string
}

// parseLogs reads slog text lines (key=value, values optionally quoted).
func parseLogs(path string) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		attrs := splitLogfmt(sc.Text())
		ts, err := time.Parse(time.RFC3339Nano, attrs["time"])
		if err != nil {
			continue
		}
		out = append(out, logLine{t: ts, attrs: attrs})
	}
	return out, sc.Err()
}

func splitLogfmt(s string) map[string]string {
	m := map[string]string{}
	for len(s) > 0 {
		s = strings.TrimLeft(s, " ")
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			break
		}
		key := s[:eq]
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			if v, err := strconv.QuotedPrefix(s); err == nil {
				val, _ = strconv.Unquote(v)
				s = s[len(v):]
			} else {
				val, s = s, ""
			}
		} else if sp := strings.IndexByte(s, ' '); sp >= 0 {
			val, s = s[:sp], s[sp:]
		} else {
			val, s = s, ""
		}
		m[key] = val
	}
	return m
}

// holding is one executor's possession of a task, from the executor's log.
type holding struct {
	executor string
	task     string
	from, to time.Time
	success  bool // the executor's result was accepted as success
}

// endMessages close a holding on the executor side.
var endMessages = map[string]bool{
	"task done": true, "task abandoned": true, "task abandoned during upload": true,
	"result dropped: the task is no longer assigned to this executor": true,
	"could not upload the task result":                                true,
}

func executorHoldings(dir string, executors int) ([]holding, error) {
	var out []holding
	for i := 0; i < executors; i++ {
		id := fmt.Sprintf("executor-%d", i)
		lines, err := parseLogs(filepath.Join(dir, id+".log"))
		if err != nil {
			return nil, err
		}
		open := map[string]*holding{}
		var last time.Time
		for _, l := range lines {
			last = l.t
			task := l.attrs["task"]
			switch msg := l.attrs["msg"]; {
			case msg == "task received" && task != "":
				if open[task] == nil {
					open[task] = &holding{executor: id, task: task, from: l.t}
				}
			case msg == "task cancelled by coordinator" && l.attrs["running"] == "false" && open[task] != nil:
				// Queued, never started: the executor drops it silently.
				h := open[task]
				h.to = l.t
				out = append(out, *h)
				delete(open, task)
			case endMessages[msg] && open[task] != nil:
				h := open[task]
				h.to = l.t
				h.success = msg == "task done" && l.attrs["outcome"] == "success"
				out = append(out, *h)
				delete(open, task)
			}
		}
		for _, h := range open { // still held when the run ended
			h.to = last
			out = append(out, *h)
		}
	}
	return out, nil
}

// doubleHolds lists tasks held by two executors at overlapping times, and
// tasks whose success was accepted from two executors.
func doubleHolds(hs []holding) []string {
	byTask := map[string][]holding{}
	for _, h := range hs {
		byTask[h.task] = append(byTask[h.task], h)
	}
	var bad []string
	for task, list := range byTask {
		succ := map[string]bool{}
		for i, a := range list {
			if a.success {
				succ[a.executor] = true
			}
			for _, b := range list[i+1:] {
				if a.executor != b.executor && !a.from.After(b.to) && !b.from.After(a.to) {
					bad = append(bad, fmt.Sprintf("%s held by %s [%s..%s] and %s [%s..%s]", task,
						a.executor, a.from.Format("15:04:05.000"), a.to.Format("15:04:05.000"),
						b.executor, b.from.Format("15:04:05.000"), b.to.Format("15:04:05.000")))
				}
			}
		}
		if len(succ) > 1 {
			bad = append(bad, fmt.Sprintf("%s completed successfully by %d executors", task, len(succ)))
		}
	}
	sort.Strings(bad)
	return bad
}

// schedulerTerms maps each term to the coordinators that started a
// scheduler in it, from "leadership gained: scheduler starting" lines.
func schedulerTerms(coords []*coord) (map[uint64][]string, error) {
	terms := map[uint64][]string{}
	for _, c := range coords {
		lines, err := parseLogs(c.logPath)
		if err != nil {
			return nil, err
		}
		seen := map[uint64]bool{}
		for _, l := range lines {
			if l.attrs["msg"] != "leadership gained: scheduler starting" {
				continue
			}
			term, err := strconv.ParseUint(l.attrs["term"], 10, 64)
			if err != nil || seen[term] {
				continue
			}
			seen[term] = true
			terms[term] = append(terms[term], c.id)
		}
	}
	return terms, nil
}
