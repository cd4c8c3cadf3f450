package layout

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func TestStringComponentsRoundTripAndKeepOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	alphabet := []byte{0x00, 0x01, 'a', 'b', 0xFE, 0xFF}
	type pair struct{ a, b string }
	var ps []pair
	for i := 0; i < 2000; i++ {
		mk := func() string {
			n := r.IntN(5)
			b := make([]byte, n)
			for j := range b {
				b[j] = alphabet[r.IntN(len(alphabet))]
			}
			return string(b)
		}
		ps = append(ps, pair{mk(), mk()})
	}
	enc := func(p pair) []byte { return AppendString(AppendString([]byte{TagContent}, p.a), p.b) }
	for _, p := range ps {
		k := enc(p)
		a, rest, err := ReadString(k[1:])
		if err != nil {
			t.Fatal(err)
		}
		b, rest, err := ReadString(rest)
		if err != nil || a != p.a || b != p.b || len(rest) != 0 {
			t.Fatalf("%q %q -> %q %q %q %v", p.a, p.b, a, b, rest, err)
		}
	}
	// Byte order of the keys is the order of the (a, b) tuples.
	byTuple := slices.Clone(ps)
	sort.Slice(byTuple, func(i, j int) bool {
		if byTuple[i].a != byTuple[j].a {
			return byTuple[i].a < byTuple[j].a
		}
		return byTuple[i].b < byTuple[j].b
	})
	byKey := slices.Clone(ps)
	sort.Slice(byKey, func(i, j int) bool { return bytes.Compare(enc(byKey[i]), enc(byKey[j])) < 0 })
	if !slices.Equal(byTuple, byKey) {
		t.Fatal("key order differs from tuple order")
	}
}

func TestPrefixSelectsOnlyItsOwnComponent(t *testing.T) {
	// "x" must not select keys of extractor "x\x00y" or "xy".
	keys := [][]byte{
		PendingKey("x", 5, "t1"), PendingKey("x\x00y", 1, "t2"), PendingKey("xy", 1, "t3"),
		PendingKey("x", -3, "t0"), PendingKey("w", 9, "t4"),
	}
	p := PendingPrefix("x")
	var got []string
	sort.Slice(keys, func(i, j int) bool { return bytes.Compare(keys[i], keys[j]) < 0 })
	for _, k := range keys {
		if bytes.HasPrefix(k, p) {
			if end := PrefixEnd(p); bytes.Compare(k, end) >= 0 {
				t.Fatalf("key %q under prefix but not below PrefixEnd %q", k, end)
			}
			id, err := TaskIDOfIndexKey(k, p)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, id)
		}
	}
	// FIFO: created_at -3 before 5, negative numbers first.
	if !slices.Equal(got, []string{"t0", "t1"}) {
		t.Fatalf("pending of x = %v", got)
	}
}

func TestNumbersSortNumerically(t *testing.T) {
	us := []uint64{0, 1, 255, 256, 1 << 40, ^uint64(0)}
	for i := 1; i < len(us); i++ {
		if bytes.Compare(OffsetKey("n", us[i-1]), OffsetKey("n", us[i])) >= 0 {
			t.Fatalf("offset %d not before %d", us[i-1], us[i])
		}
	}
	is := []int64{-1 << 63, -2, -1, 0, 1, 1<<63 - 1}
	for i, v := range is {
		got, rest, err := ReadInt(AppendInt(nil, v))
		if err != nil || got != v || len(rest) != 0 {
			t.Fatalf("%d -> %d %v", v, got, err)
		}
		if i > 0 && bytes.Compare(AppendInt(nil, is[i-1]), AppendInt(nil, v)) >= 0 {
			t.Fatalf("%d not before %d", is[i-1], v)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ in, want []byte }{
		{[]byte{1, 2}, []byte{1, 3}},
		{[]byte{1, 0xFF}, []byte{2}},
		{[]byte{0xFF, 0xFF}, nil},
	} {
		if got := PrefixEnd(c.in); !bytes.Equal(got, c.want) {
			t.Fatalf("PrefixEnd(%x) = %x, want %x", c.in, got, c.want)
		}
	}
}

func TestMalformedKeysAreErrors(t *testing.T) {
	for _, b := range [][]byte{{'a'}, {'a', 0x00}, {'a', 0x00, 0x02}} {
		if _, _, err := ReadString(b); err == nil {
			t.Fatalf("ReadString(%x) accepted", b)
		}
	}
	if _, _, err := ReadUint([]byte{1, 2, 3}); err == nil {
		t.Fatal("short number accepted")
	}
	p := AssignedPrefix("e")
	if _, err := TaskIDOfIndexKey(append(AssignedKey("e", 1, "t"), 'x'), p); err == nil {
		t.Fatal("trailing bytes accepted")
	}
	if _, err := ChildIDOfKey([]byte{TagChild}, ChildPrefix("n", "p")); err == nil {
		t.Fatal("short key accepted")
	}
	if err := DecodeRecord([]byte{0x02, 0x08}, &pb.Task{}); err == nil {
		t.Fatal("unknown record version accepted")
	}
	if err := DecodeRecord(nil, &pb.Task{}); err == nil {
		t.Fatal("empty record accepted")
	}
	if _, err := DecodeUint([]byte{1}); err == nil {
		t.Fatal("short counter accepted")
	}
}

// mapWriter is a write batch kept in a map, enough to check which keys a
// state change writes.
type mapWriter map[string][]byte

func (m mapWriter) Set(k, v []byte) error { m[string(k)] = append([]byte{}, v...); return nil }
func (m mapWriter) Delete(k []byte) error { delete(m, string(k)); return nil }

func (m mapWriter) keys() []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestEncodeTaskDropsContentCopyAndLeavesTaskAlone(t *testing.T) {
	c := &pb.Content{Id: "c1", Namespace: "n", Labels: map[string]string{"b": "2", "a": "1", "c": "3"}}
	task := &pb.Task{Id: "t1", Namespace: "n", ContentId: "c1", ContentVersion: 1, Content: c, InputParamsJson: "{}"}
	v, err := EncodeTask(task)
	if err != nil {
		t.Fatal(err)
	}
	if task.Content != c {
		t.Fatal("EncodeTask modified the task")
	}
	var got pb.Task
	if err := DecodeRecord(v, &got); err != nil {
		t.Fatal(err)
	}
	want := &pb.Task{Id: "t1", Namespace: "n", ContentId: "c1", ContentVersion: 1, InputParamsJson: "{}"}
	if !proto.Equal(&got, want) {
		t.Fatalf("decoded %v, want %v", &got, want)
	}
	// Deterministic: a map-valued record encodes to the same bytes every time.
	first, _ := EncodeRecord(c)
	for i := 0; i < 50; i++ {
		again, _ := EncodeRecord(proto.Clone(c))
		if !bytes.Equal(first, again) {
			t.Fatal("content encoding is not deterministic")
		}
	}
}

func TestPutTaskMovesTheSchedulerIndexEntry(t *testing.T) {
	w := mapWriter{}
	pending := &pb.Task{Id: "t1", Extractor: "x", Namespace: "n", ContentId: "c1", CreatedAt: 10}
	if err := PutTask(w, nil, pending); err != nil {
		t.Fatal(err)
	}
	want := []string{string(TaskKey("t1")), string(TaskByContentKey("n", "c1", "t1")), string(PendingKey("x", 10, "t1"))}
	sort.Strings(want)
	if got := w.keys(); !slices.Equal(got, want) {
		t.Fatalf("new task wrote %q, want %q", got, want)
	}
	assigned := proto.Clone(pending).(*pb.Task)
	assigned.ExecutorId = "e1"
	if err := PutTask(w, pending, assigned); err != nil {
		t.Fatal(err)
	}
	if _, ok := w[string(PendingKey("x", 10, "t1"))]; ok {
		t.Fatal("assigned task still pending")
	}
	if v, ok := w[string(AssignedKey("e1", 10, "t1"))]; !ok {
		t.Fatal("assigned task not in its executor's index")
	} else if !bytes.Equal(v, w[string(TaskKey("t1"))]) {
		t.Fatal("the queue entry does not hold the task record")
	}
	// A write that keeps the task in its queue updates the copy.
	retried := proto.Clone(assigned).(*pb.Task)
	retried.Attempts = 1
	if err := PutTask(w, assigned, retried); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w[string(AssignedKey("e1", 10, "t1"))], w[string(TaskKey("t1"))]) {
		t.Fatal("the queue entry kept the old record")
	}
	assigned = retried
	done := proto.Clone(assigned).(*pb.Task)
	done.Outcome = pb.TaskOutcome_TASK_OUTCOME_SUCCESS
	if err := PutTask(w, assigned, done); err != nil {
		t.Fatal(err)
	}
	want = []string{string(TaskKey("t1")), string(TaskByContentKey("n", "c1", "t1"))}
	sort.Strings(want)
	if got := w.keys(); !slices.Equal(got, want) {
		t.Fatalf("finished task left %q, want %q", got, want)
	}
	var stored pb.Task
	if err := DecodeRecord(w[string(TaskKey("t1"))], &stored); err != nil || stored.Outcome != done.Outcome {
		t.Fatalf("stored %v %v", &stored, err)
	}
}

func TestContentAndChangeWrites(t *testing.T) {
	w := mapWriter{}
	c := &pb.Content{Id: "kid", Namespace: "n", ParentId: "doc", ChangeOffset: 7}
	if err := PutContent(w, c); err != nil {
		t.Fatal(err)
	}
	if got, ok := w[string(OffsetKey("n", 7))]; !ok || string(got) != "kid" {
		t.Fatalf("offset entry %q %v", got, ok)
	}
	p := ChildPrefix("n", "doc")
	var kids []string
	for _, k := range w.keys() {
		if strings.HasPrefix(k, string(p)) {
			id, err := ChildIDOfKey([]byte(k), p)
			if err != nil {
				t.Fatal(err)
			}
			kids = append(kids, id)
		}
	}
	if !slices.Equal(kids, []string{"kid"}) {
		t.Fatalf("children %v", kids)
	}
	ch := &pb.StateChange{Id: 3, ObjectId: "kid", Namespace: "n", Type: pb.ChangeType_CHANGE_TYPE_NEW_CONTENT}
	before := len(w)
	if err := PutChange(w, ch, true); err != nil {
		t.Fatal(err)
	}
	if _, ok := w[string(ChangedContentKey("n", "kid", 3))]; !ok || len(w) != before+2 {
		t.Fatalf("change wrote %d keys", len(w)-before)
	}
	if err := DeleteChange(w, ch, true); err != nil {
		t.Fatal(err)
	}
	if len(w) != before {
		t.Fatalf("processed change left %d keys", len(w)-before)
	}
	if err := PutChange(w, &pb.StateChange{Id: 4, ObjectId: "e1", Type: pb.ChangeType_CHANGE_TYPE_EXECUTOR_ADDED}, false); err != nil {
		t.Fatal(err)
	}
	if len(w) != before+1 {
		t.Fatalf("executor change wrote %d keys, want 1", len(w)-before)
	}
	if err := PutApplied(w, 42); err != nil {
		t.Fatal(err)
	}
	if v, err := DecodeUint(w[string(MetaKey(MetaApplied))]); err != nil || v != 42 {
		t.Fatalf("applied %d %v", v, err)
	}
}
