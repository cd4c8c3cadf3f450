package state

// Canonical dumps used to prove that two stores hold identical state
// (snapshot/restore round trips, replicas applying the same log).

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// Dump renders the replicated state (not derived indexes) as canonical text:
// equal dumps mean equal state. Meant for tests and debugging; it is linear
// in the size of the store.
func (s *Store) Dump() string { return s.snapshot().dump(textItem) }

// Digest is the SHA-256 of the canonical dump with every record in its
// deterministic wire encoding (binaryItem; Dump renders the same records
// as prototext instead, which varies between binaries), and the applied
// index it was taken at, from one consistent view of the store. Two
// replicas at the same applied index must have equal digests, whatever
// binary computed them; the chaos campaign compares them.
func (s *Store) Digest() (applied uint64, sum [sha256.Size]byte) {
	ss := s.snapshot()
	return ss.applied, sha256.Sum256([]byte(ss.dump(binaryItem)))
}

// textItem renders a record readably. prototext's output is deliberately
// unstable across binaries (it varies its spacing by a hash of the
// executable), so it is only for Dump, which one process compares with
// itself.
func textItem(m proto.Message) string { return prototext.MarshalOptions{}.Format(m) }

// binaryItem renders a record as its deterministic wire encoding in hex:
// the same in every binary built from the same schema, so a digest
// computed by a test (from a saved snapshot) equals the one a coordinator
// serves for the same state.
func binaryItem(m proto.Message) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "!" + err.Error()
	}
	return hex.EncodeToString(b)
}

func (ss *storeSnapshot) dump(item func(proto.Message) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "applied=%d changeSeq=%d offsetSeq=%d\n", ss.applied, ss.changeSeq, ss.offsetSeq)
	section := func(name string, n int, rec func(i int) proto.Message) {
		lines := make([]string, 0, n)
		for i := 0; i < n; i++ {
			lines = append(lines, item(rec(i)))
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
		b.WriteString(item(c))
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "== requests (%d)\n", len(ss.requestIDs))
	for i, id := range ss.requestIDs {
		fmt.Fprintf(&b, "%q %s\n", id, item(ss.requests[i]))
	}
	return b.String()
}

// Equal reports whether two stores hold identical replicated state.
func (s *Store) Equal(o *Store) bool { return s.Dump() == o.Dump() }
