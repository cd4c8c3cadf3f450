package state

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// indexDigest renders the derived indexes canonically (order-insensitive
// where order carries no meaning; stale offset refs excluded).
func indexDigest(d *data) string {
	var lines []string
	add := func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }
	for k, kids := range d.children {
		s := append([]string(nil), kids...)
		sort.Strings(s)
		add("child %s/%s -> %v", k.ns, k.id, s)
	}
	for k, ids := range d.tasksByContent {
		s := append([]string(nil), ids...)
		sort.Strings(s)
		add("tbc %s/%s -> %v", k.ns, k.id, s)
	}
	for e, set := range d.tasksByExec {
		var s []string
		for id := range set {
			s = append(s, id)
		}
		sort.Strings(s)
		add("exec %s -> %v", e, s)
	}
	for x, l := range d.pendingIdx {
		// In order: the list's order is part of what must not drift.
		var ids []string
		var prev *pb.Task
		l.each(func(t *pb.Task) bool {
			ids = append(ids, t.Id)
			if d.tasks[t.Id] != t || !unfinished(t) || t.ExecutorId != "" || t.Extractor != x {
				add("STALE pending entry %s %s", x, t.Id)
			}
			if prev != nil && TaskOrder(prev, t) >= 0 {
				add("UNORDERED pending %s %s %s", x, prev.Id, t.Id)
			}
			prev = t
			return true
		})
		add("pending %s n=%d %v", x, l.n, ids)
	}
	npending := 0
	for _, t := range d.tasks {
		if unfinished(t) && t.ExecutorId == "" {
			npending++
		}
	}
	if npending != d.pendingIdx.len() {
		add("PENDING COUNT %d tasks, %d indexed", npending, d.pendingIdx.len())
	}
	for k, st := range d.stats {
		add("stats %v %+v", k, *st)
	}
	live := 0
	for i, e := range d.changes.list {
		if e.c != nil {
			live++
			if i < d.changes.head {
				add("UNPROCESSED change %d before the head", e.id)
			}
			if e.c.Id != e.id {
				add("change %d queued as %d", e.c.Id, e.id)
			}
		}
		if i > 0 && d.changes.list[i-1].id >= e.id {
			add("change %d after %d: not in id order", e.id, d.changes.list[i-1].id)
		}
	}
	if live != d.changes.len() {
		add("CHANGE COUNT %d unprocessed, %d counted", live, d.changes.len())
	}
	for k, n := range d.changedContent {
		add("changed %v %d", k, n)
	}
	for n, x := range d.extractors {
		add("extractor %s %p", n, x)
	}
	for ns, refs := range d.offsets {
		var live []string
		for _, r := range refs {
			if c := d.content[ns][r.id]; c != nil && c.ChangeOffset == r.offset {
				live = append(live, fmt.Sprintf("%d:%s", r.offset, r.id))
			}
		}
		if len(live) > 0 {
			add("offsets %s %v", ns, live)
		}
	}
	for ns, m := range d.content {
		for id := range m {
			if !sort.SliceIsSorted(d.old[ckey{ns, id}], func(i, j int) bool {
				return d.old[ckey{ns, id}][i].Version < d.old[ckey{ns, id}][j].Version
			}) {
				add("UNSORTED old versions %s/%s", ns, id)
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// verifyIndexes rebuilds a store from a snapshot of s and compares both the
// state dump and the derived indexes; any drift in incremental index
// maintenance shows up here.
func verifyIndexes(s *Store) error {
	var buf bytes.Buffer
	if err := s.WriteSnapshot(&buf); err != nil {
		return err
	}
	r := NewStore()
	if err := r.Restore(&buf); err != nil {
		return err
	}
	if a, b := s.Dump(), r.Dump(); a != b {
		return fmt.Errorf("restored dump differs:\n%s\n----\n%s", a, b)
	}
	s.mu.RLock()
	a := indexDigest(s.d)
	s.mu.RUnlock()
	b := indexDigest(r.d)
	// Extractor pointers differ between stores; compare names only.
	strip := func(x string) string {
		var out []string
		for _, l := range strings.Split(x, "\n") {
			if strings.HasPrefix(l, "extractor ") {
				l = strings.Fields(l)[1]
			}
			out = append(out, l)
		}
		return strings.Join(out, "\n")
	}
	if strip(a) != strip(b) {
		return fmt.Errorf("indexes drifted:\nincremental:\n%s\nrebuilt:\n%s", a, b)
	}
	return nil
}
