package cluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// writeBoltLayout writes raftDir/raft.db the way versions before raft-wal
// did: raft-boltdb holding the log entries and Raft's stable values.
func writeBoltLayout(t *testing.T, raftDir string, logs []*raft.Log, term, voteTerm uint64, voteCand string) {
	t.Helper()
	if err := os.MkdirAll(raftDir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, boltLogName)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(logs) > 0 {
		if err := b.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	if term > 0 {
		must(t, b.SetUint64([]byte("CurrentTerm"), term))
	}
	if voteTerm > 0 {
		must(t, b.SetUint64([]byte("LastVoteTerm"), voteTerm))
		must(t, b.Set([]byte("LastVoteCand"), []byte(voteCand)))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testLogs(first, last uint64) []*raft.Log {
	var out []*raft.Log
	for i := first; i <= last; i++ {
		out = append(out, &raft.Log{Index: i, Term: 1 + i/4, Type: raft.LogCommand,
			Data: []byte(fmt.Sprintf("entry-%d", i)), Extensions: []byte("ext")})
	}
	return out
}

// checkStore asserts st holds exactly want and the given stable values.
func checkStore(t *testing.T, st interface {
	raft.LogStore
	raft.StableStore
}, want []*raft.Log, term, voteTerm uint64, voteCand string) {
	t.Helper()
	first, _ := st.FirstIndex()
	last, _ := st.LastIndex()
	if len(want) == 0 {
		if last != 0 {
			t.Fatalf("log [%d, %d], want empty", first, last)
		}
	} else if first != want[0].Index || last != want[len(want)-1].Index {
		t.Fatalf("log [%d, %d], want [%d, %d]", first, last, want[0].Index, want[len(want)-1].Index)
	}
	for _, w := range want {
		var got raft.Log
		if err := st.GetLog(w.Index, &got); err != nil {
			t.Fatalf("entry %d: %v", w.Index, err)
		}
		if got.Term != w.Term || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) || !bytes.Equal(got.Extensions, w.Extensions) {
			t.Fatalf("entry %d: got %+v, want %+v", w.Index, got, *w)
		}
	}
	if v, err := st.GetUint64([]byte("CurrentTerm")); err != nil || v != term {
		t.Fatalf("CurrentTerm %d (%v), want %d", v, err, term)
	}
	if v, err := st.GetUint64([]byte("LastVoteTerm")); err != nil || v != voteTerm {
		t.Fatalf("LastVoteTerm %d (%v), want %d", v, err, voteTerm)
	}
	if v, err := st.Get([]byte("LastVoteCand")); err != nil || string(v) != voteCand {
		t.Fatalf("LastVoteCand %q (%v), want %q", v, err, voteCand)
	}
}

func TestBoltLogMigratesToWAL(t *testing.T) {
	raftDir := filepath.Join(t.TempDir(), "raft")
	// A compacted log (first index > 1), as after a snapshot.
	logs := testLogs(37, 400)
	writeBoltLayout(t, raftDir, logs, 9, 8, "n2")

	w, err := openLogStore(raftDir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	checkStore(t, w, logs, 9, 8, "n2")
	if _, err := os.Stat(filepath.Join(raftDir, boltLogName)); !os.IsNotExist(err) {
		t.Fatalf("raft.db still there after the migration: %v", err)
	}
	// The migrated WAL takes the next entry and keeps it across a reopen.
	more := testLogs(401, 401)
	must(t, w.StoreLogs(more))
	must(t, w.Close())
	w, err = openLogStore(raftDir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	checkStore(t, w, append(logs, more...), 9, 8, "n2")
}

// Raft deletes a log suffix when a new leader's log conflicts with it (a
// follower that had uncommitted entries of a dead leader). raft-wal v0.4.0
// then recorded the old tail segment as sealed without its index block, and
// the next start panicked in raft.NewRaft ("sealed segment has no index
// block", hashicorp/raft-wal#31; seen in the failover bench after kill -9).
// v0.4.1 seals it properly; this keeps that so.
func TestWALReopensAfterSuffixTruncation(t *testing.T) {
	raftDir := filepath.Join(t.TempDir(), "raft")
	w, err := openLogStore(raftDir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	logs := testLogs(1, 120)
	must(t, w.StoreLogs(logs))
	must(t, w.DeleteRange(101, 120)) // "clearing log suffix"
	more := testLogs(101, 105)
	must(t, w.StoreLogs(more))
	must(t, w.Close())
	w, err = openLogStore(raftDir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	checkStore(t, w, append(logs[:100], more...), 0, 0, "")
}

func TestBoltLogMigrationResumesAfterACrash(t *testing.T) {
	// Crash before the commit point: a half-built wal.migrating is thrown
	// away and the migration runs again from raft.db.
	raftDir := filepath.Join(t.TempDir(), "raft")
	logs := testLogs(1, 50)
	writeBoltLayout(t, raftDir, logs, 3, 3, "n1")
	tmp := filepath.Join(raftDir, walMigratingName)
	must(t, os.MkdirAll(tmp, 0o700))
	must(t, os.WriteFile(filepath.Join(tmp, "junk"), []byte("half a segment"), 0o600))
	w, err := openLogStore(raftDir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	checkStore(t, w, logs, 3, 3, "n1")
	must(t, w.Close())
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("wal.migrating left behind: %v", err)
	}

	// Crash after the commit point (the rename), before raft.db was removed:
	// the WAL wins and the stale raft.db goes, whatever it holds.
	writeBoltLayout(t, raftDir, testLogs(1, 3), 1, 0, "")
	w, err = openLogStore(raftDir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	checkStore(t, w, logs, 3, 3, "n1")
	if _, err := os.Stat(filepath.Join(raftDir, boltLogName)); !os.IsNotExist(err) {
		t.Fatalf("leftover raft.db not removed: %v", err)
	}
}

func TestEmptyBoltLogMigrates(t *testing.T) {
	// A node that crashed before it had any state: raft.db with empty
	// buckets. It stays a node without state (the vote hold decides on that).
	raftDir := filepath.Join(t.TempDir(), "raft")
	writeBoltLayout(t, raftDir, nil, 0, 0, "")
	w, err := openLogStore(raftDir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	checkStore(t, w, nil, 0, 0, "")
}

// TestNodeStartsOnBoltDataDir runs a node, turns its data dir back into the
// raft-boltdb layout of earlier versions (same entries, term and vote; the
// snapshots, node.json and the rest are untouched), and starts the new code
// on it: the node keeps its state, cluster id and term, and does not
// bootstrap or hold its vote.
func TestNodeStartsOnBoltDataDir(t *testing.T) {
	s := newSpecs(t, 1)[0]
	tn := startNode(t, s, nil, nil)
	waitLeader(t, tn)
	mustCreateNamespace(t, tn.node, "before-migration")
	cid := tn.node.ClusterID()
	tn.stop()

	raftDir := filepath.Join(s.dir, "raft")
	walDir := filepath.Join(raftDir, walDirName)
	w, err := openWAL(walDir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	term, _ := w.GetUint64([]byte("CurrentTerm"))
	voteTerm, _ := w.GetUint64([]byte("LastVoteTerm"))
	voteCand, _ := w.Get([]byte("LastVoteCand"))
	first, _ := w.FirstIndex()
	last, _ := w.LastIndex()
	var logs []*raft.Log
	for i := first; i <= last && last > 0; i++ {
		var l raft.Log
		must(t, w.GetLog(i, &l))
		logs = append(logs, &l)
	}
	must(t, w.Close())
	if term == 0 || len(logs) < 3 {
		t.Fatalf("unexpected source state: term %d, %d entries", term, len(logs))
	}
	must(t, os.RemoveAll(walDir))
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, boltLogName)})
	if err != nil {
		t.Fatal(err)
	}
	must(t, b.StoreLogs(logs))
	must(t, b.SetUint64([]byte("CurrentTerm"), term))
	if voteTerm > 0 {
		must(t, b.SetUint64([]byte("LastVoteTerm"), voteTerm))
		must(t, b.Set([]byte("LastVoteCand"), voteCand))
	}
	must(t, b.Close())

	tn2 := startNode(t, s, nil, nil)
	waitLeader(t, tn2)
	waitNamespace(t, tn2, "before-migration")
	if tn2.node.bootstraps.Load() != 0 || tn2.node.VoteHeld() {
		t.Fatalf("bootstraps %d, vote held %v after the migration", tn2.node.bootstraps.Load(), tn2.node.VoteHeld())
	}
	if got := tn2.node.ClusterID(); got != cid {
		t.Fatalf("cluster id %q, want %q", got, cid)
	}
	if got := tn2.node.raft.CurrentTerm(); got <= term {
		t.Fatalf("term %d after restart, want above the migrated %d", got, term)
	}
	if _, err := os.Stat(filepath.Join(raftDir, boltLogName)); !os.IsNotExist(err) {
		t.Fatalf("raft.db still there: %v", err)
	}
	mustCreateNamespace(t, tn2.node, "after-migration")
}
