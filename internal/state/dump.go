package state

// Canonical dumps used to prove that two stores hold identical state
// (snapshot/restore round trips, replicas applying the same log).

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// Dump renders the replicated state (not derived indexes) as canonical text:
// equal dumps mean equal state. Meant for tests and debugging; it is linear
// in the size of the store.
func (s *Store) Dump() string {
	ss := s.snapshot()
	var b strings.Builder
	fmt.Fprintf(&b, "applied=%d changeSeq=%d offsetSeq=%d\n", ss.applied, ss.changeSeq, ss.offsetSeq)
	section := func(name string, n int, item func(i int) proto.Message) {
		lines := make([]string, 0, n)
		for i := 0; i < n; i++ {
			lines = append(lines, prototext.MarshalOptions{}.Format(item(i)))
		}
		sort.Strings(lines)
		fmt.Fprintf(&b, "== %s (%d)\n", name, n)
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	section("namespaces", len(ss.namespaces), func(i int) proto.Message { return ss.namespaces[i] })
	section("graphs", len(ss.graphs), func(i int) proto.Message { return ss.graphs[i] })
	section("links", len(ss.links), func(i int) proto.Message { return ss.links[i] })
	section("executors", len(ss.executors), func(i int) proto.Message { return ss.executors[i] })
	section("nodes", len(ss.nodes), func(i int) proto.Message { return ss.nodes[i] })
	section("contents", len(ss.contents), func(i int) proto.Message { return ss.contents[i] })
	section("tasks", len(ss.tasks), func(i int) proto.Message { return ss.tasks[i] })
	section("gc", len(ss.gcTasks), func(i int) proto.Message { return ss.gcTasks[i] })
	// Order matters for changes (processing order) and requests (eviction
	// order), so they are not sorted.
	fmt.Fprintf(&b, "== changes (%d)\n", len(ss.changes))
	for _, c := range ss.changes {
		b.WriteString(prototext.MarshalOptions{}.Format(c))
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "== requests (%d)\n", len(ss.requestIDs))
	for i, id := range ss.requestIDs {
		fmt.Fprintf(&b, "%q %s\n", id, prototext.MarshalOptions{}.Format(ss.requests[i]))
	}
	return b.String()
}

// Equal reports whether two stores hold identical replicated state.
func (s *Store) Equal(o *Store) bool { return s.Dump() == o.Dump() }
