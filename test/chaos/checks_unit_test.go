package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/indexify-go/indexify/internal/wire"
)

// The campaign's verdicts are only worth something if the checkers reject
// bad histories; these tests feed them known-bad input.

func TestCheckerRejectsStaleRead(t *testing.T) {
	ms := int64(time.Millisecond)
	ops := []op{
		{Client: 0, Kind: "write", Key: 1, Val: 7, Call: 0, Ret: 10 * ms, Res: resOK},
		// Starts after the write returned, yet sees the initial value.
		{Client: 1, Kind: "read", Key: 1, Call: 20 * ms, Ret: 30 * ms, Res: resOK, Out: 0},
	}
	res, err := checkLinearizable(ops, nil, filepath.Join(t.TempDir(), "h.html"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res != porcupine.Illegal {
		t.Fatalf("stale read judged %v, want Illegal", res)
	}
}

func TestCheckerAcceptsAmbiguousWrite(t *testing.T) {
	ms := int64(time.Millisecond)
	ops := []op{
		// Timed out: it may have happened, even after later operations.
		{Client: 0, Kind: "write", Key: 0, Val: 5, Call: 0, Ret: 10 * ms, Res: resIndeterminate},
		{Client: 1, Kind: "read", Key: 0, Call: 20 * ms, Ret: 30 * ms, Res: resOK, Out: 0},
		{Client: 1, Kind: "read", Key: 0, Call: 40 * ms, Ret: 50 * ms, Res: resOK, Out: 5},
		// A definitely failed write must not explain a read.
		{Client: 2, Kind: "write", Key: 2, Val: 9, Call: 0, Ret: 10 * ms, Res: resFailed},
		{Client: 2, Kind: "read", Key: 2, Call: 20 * ms, Ret: 30 * ms, Res: resOK, Out: 0},
	}
	res, err := checkLinearizable(ops, []fault{{Kind: kPause, Start: 0, Heal: 15 * ms}}, filepath.Join(t.TempDir(), "h.html"), time.Minute)
	if err != nil || res != porcupine.Ok {
		t.Fatalf("got %v, %v; want Ok", res, err)
	}
	ops = append(ops, op{Client: 2, Kind: "read", Key: 2, Call: 60 * ms, Ret: 70 * ms, Res: resOK, Out: 9})
	if res, _ := checkLinearizable(ops, nil, filepath.Join(t.TempDir(), "h.html"), time.Minute); res != porcupine.Illegal {
		t.Fatalf("read of a failed write judged %v, want Illegal", res)
	}
}

func writeLog(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDoubleHoldDetected(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, filepath.Join(dir, "executor-0.log"),
		`time=2026-01-01T10:00:00.000Z level=INFO msg="task received" task=t1 extractor=x content=c`,
		`time=2026-01-01T10:00:05.000Z level=INFO msg="task done" task=t1 extractor=x outcome=success children=0 took=5s`,
		`time=2026-01-01T10:00:06.000Z level=INFO msg="task received" task=t2 extractor=x content=c`,
		`time=2026-01-01T10:00:07.000Z level=INFO msg="task done" task=t2 extractor=x outcome=success children=0 took=1s`)
	writeLog(t, filepath.Join(dir, "executor-2.log"),
		// A queued task cancelled before it ran ends there.
		`time=2026-01-01T10:00:00.500Z level=INFO msg="task received" task=t3 extractor=x content=c`,
		`time=2026-01-01T10:00:00.600Z level=INFO msg="task cancelled by coordinator" task=t3 running=false`,
		`time=2026-01-01T10:00:00.700Z level=INFO msg="task received" task=t4 extractor=x content=c`,
		`time=2026-01-01T10:00:00.800Z level=INFO msg="task cancelled by coordinator" task=t4 running=true`)
	writeLog(t, filepath.Join(dir, "executor-1.log"),
		`time=2026-01-01T10:00:00.750Z level=INFO msg="task received" task=t4 extractor=x content=c`,
		`time=2026-01-01T10:00:01.000Z level=INFO msg="task received" task=t3 extractor=x content=c`,
		`time=2026-01-01T10:00:01.100Z level=INFO msg="task done" task=t3 extractor=x outcome=success children=0 took=1s`,
		`time=2026-01-01T10:00:03.000Z level=INFO msg="task received" task=t1 extractor=x content=c`,
		`time=2026-01-01T10:00:04.000Z level=INFO msg="result dropped: the task is no longer assigned to this executor" task=t1 extractor=x`,
		`time=2026-01-01T10:00:08.000Z level=INFO msg="task received" task=t2 extractor=x content=c`,
		`time=2026-01-01T10:00:09.000Z level=INFO msg="task done" task=t2 extractor=x outcome=success children=0 took=1s`)
	hs, err := executorHoldings(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	bad := doubleHolds(hs)
	// t1: overlapping holdings; t2: no overlap but accepted twice; t3: the
	// cancelled queued task was released; t4: cancelled while running and
	// never reported abandoned, so still held when executor-1 got it.
	if len(bad) != 3 || !strings.Contains(bad[0], "t1 held by") || !strings.Contains(bad[1], "t2 completed successfully by 2") ||
		!strings.Contains(bad[2], "t4 held by") {
		t.Fatalf("got %q", bad)
	}
}

func TestTwoSchedulersInOneTermDetected(t *testing.T) {
	dir := t.TempDir()
	var cs []*coord
	for i, term := range []string{"3", "3", "4"} {
		c := &coord{id: "coordinator-" + string(rune('0'+i)), logPath: filepath.Join(dir, "c"+string(rune('0'+i))+".log")}
		writeLog(t, c.logPath, `time=2026-01-01T10:00:00.000Z level=INFO msg="leadership gained: scheduler starting" term=`+term)
		cs = append(cs, c)
	}
	terms, err := schedulerTerms(cs)
	if err != nil {
		t.Fatal(err)
	}
	if len(terms[3]) != 2 || len(terms[4]) != 1 {
		t.Fatalf("terms = %v", terms)
	}
}

func TestFirstWriteAfterHeal(t *testing.T) {
	ops := []op{
		{Kind: "write", Res: resOK, Ret: 5},
		{Kind: "read", Res: resOK, Ret: 12},
		{Kind: "ingest", Res: resIndeterminate, Ret: 13},
		{Kind: "ingest", Res: resOK, Ret: 20},
		{Kind: "write", Res: resOK, Ret: 15},
	}
	if got := firstWriteOKAfter(ops, 10); got != 15 {
		t.Fatalf("got %d, want 15", got)
	}
	if got := firstWriteOKAfter(ops, 21); got != 0 {
		t.Fatalf("got %d, want 0", got)
	}
}

func TestSplitLogfmt(t *testing.T) {
	m := splitLogfmt(`time=2026-01-01T10:00:00.000Z level=INFO msg="a \"quoted\" msg" k=v empty=`)
	if m["msg"] != `a "quoted" msg` || m["k"] != "v" || m["level"] != "INFO" {
		t.Fatalf("%q", m)
	}
}

func TestDigestVerdict(t *testing.T) {
	v := func(id string, applied uint64, sum string) digestView {
		return digestView{Addr: id + ":8960", StateDigest: wire.StateDigest{NodeID: id, AppliedIndex: applied, SHA256: sum}}
	}
	if p, d := digestVerdict([]digestView{v("a", 7, "x"), v("b", 7, "x"), v("c", 7, "x")}); p != "" || d != 0 {
		t.Errorf("equal replicas: %q %d", p, d)
	}
	p, d := digestVerdict([]digestView{v("a", 7, "x"), v("b", 7, "y"), v("c", 7, "x")})
	if d != 1 || !strings.Contains(p, "divergent") || !strings.Contains(p, "[b]=y") || !strings.Contains(p, "[a c]=x") {
		t.Errorf("one divergent replica: %q %d", p, d)
	}
	if p, _ := digestVerdict([]digestView{v("a", 7, "x"), v("b", 8, "x")}); !strings.Contains(p, "same applied index") {
		t.Errorf("different indexes: %q", p)
	}
	dead := v("c", 0, "")
	dead.Err = "connection refused"
	if p, _ := digestVerdict([]digestView{v("a", 7, "x"), dead}); !strings.Contains(p, "did not answer") {
		t.Errorf("unanswered: %q", p)
	}
	if p, _ := digestVerdict(nil); p == "" {
		t.Error("no views passed")
	}
}

func TestIdentitySummaryRow(t *testing.T) {
	ok := identityResult{Minority: []string{"coordinator-2"}, OldID: "aaaa", NewID: "bbbb",
		Pinned:   map[string]digestView{"coordinator-2": {StateDigest: wire.StateDigest{AppliedIndex: 41}}},
		NewViews: []digestView{{StateDigest: wire.StateDigest{AppliedIndex: 9}}, {StateDigest: wire.StateDigest{AppliedIndex: 9}}}}
	if got, want := ok.summaryRow(), "refused: old cluster aaaa, new cluster bbbb; returning replica unchanged (coordinator-2@41); new cluster's 2 replicas equal at 9"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	bad := ok
	bad.fail("coordinator-2's replica changed")
	if got := bad.summaryRow(); !strings.HasPrefix(got, "FAILED: coordinator-2's replica changed") {
		t.Errorf("a failed check reads %q", got)
	}
}
