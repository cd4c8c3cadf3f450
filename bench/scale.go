package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/indexify-go/indexify/bench/loadgen"
	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/state/statedb"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"github.com/indexify-go/indexify/test/harness"
)

// buildState applies n ingested items, each with its task, through the FSM
// (encoded and decoded as from the Raft log, in batches of 500 like the API
// server's), and returns the FSM and the heap growth per item.
func buildState(n int) (*state.FSM, float64, error) {
	f := state.NewFSM(state.NewStore(), nil)
	idx := uint64(0)
	apply := func(c *pb.Command) error {
		idx++
		c.Timestamp = int64(1_700_000_000_000 + idx)
		b, err := state.EncodeCommand(c)
		if err != nil {
			return err
		}
		res := f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: b}).(*pb.CommandResult)
		return state.ResultError(res)
	}
	setup := []*pb.Command{
		{Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: "default"}}},
		{Op: &pb.Command_RegisterExecutor{RegisterExecutor: &pb.RegisterExecutorCmd{Executor: &pb.Executor{
			Id: "ex1", Address: "bench", Extractors: []*pb.ExtractorDescription{{Name: benchExtractor}}}}}},
		{Op: &pb.Command_CreateGraph{CreateGraph: &pb.CreateExtractionGraphCmd{Graph: &pb.ExtractionGraph{
			Name: "g", Namespace: "default", Policies: []*pb.ExtractionPolicy{{Name: "p", Extractor: benchExtractor}}}}}},
		// No executor stays: the restored cluster has none, so its tasks
		// are simply pending (what a backlog looks like after a restart).
		{Op: &pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{ExecutorId: "ex1"}}},
	}
	for _, c := range setup {
		if err := apply(c); err != nil {
			return nil, 0, err
		}
	}
	if err := drainChanges(f, apply, nil); err != nil {
		return nil, 0, err
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const batch = 500
	for i := 0; i < n; i += batch {
		var cs []*pb.Content
		var tasks []*pb.Task
		for j := i; j < i+batch && j < n; j++ {
			id := fmt.Sprintf("%016x", uint64(j)*0x9E3779B97F4A7C15)
			cs = append(cs, &pb.Content{Namespace: "default", Id: id, Name: "file.pdf", MimeType: "application/pdf",
				StorageUrl: "file:///var/lib/indexify/blobs/default/" + id, SizeBytes: 12345,
				Hash: fmt.Sprintf("%064x", j), GraphNames: []string{"g"}})
			tasks = append(tasks, &pb.Task{Id: state.TaskID("default", "g", "p", id, 1), Extractor: benchExtractor,
				PolicyName: "p", GraphName: "g", Namespace: "default", ContentId: id, ContentVersion: 1, InputParamsJson: "{}"})
		}
		if err := apply(&pb.Command{Op: &pb.Command_CreateContent{CreateContent: &pb.CreateContentCmd{Contents: cs}}}); err != nil {
			return nil, 0, err
		}
		if err := drainChanges(f, apply, tasks); err != nil {
			return nil, 0, err
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return f, float64(after.HeapAlloc-before.HeapAlloc) / float64(n), nil
}

// drainChanges marks every unprocessed change processed, creating tasks,
// as the scheduler's SchedulerUpdateCmd does.
func drainChanges(f *state.FSM, apply func(*pb.Command) error, tasks []*pb.Task) error {
	var ids []uint64
	for _, c := range f.Store().UnprocessedChanges(0) {
		ids = append(ids, c.Id)
	}
	if len(ids) == 0 && len(tasks) == 0 {
		return nil
	}
	return apply(&pb.Command{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{ProcessedChangeIds: ids, NewTasks: tasks}}})
}

// fileSink is a raft.SnapshotSink over a plain file.
type fileSink struct {
	*os.File
}

func (s fileSink) ID() string    { return "bench" }
func (s fileSink) Cancel() error { return s.File.Close() }
func (s fileSink) Close() error  { return s.File.Close() }

func scaleSuite(r *runner, o options) (string, error) {
	n := o.items
	t0 := time.Now()
	f, perItem, err := buildState(n)
	if err != nil {
		return "", err
	}
	build := time.Since(t0)
	slog.Info("state built", "items", n, "bytes/item", perItem, "took", build)
	var heapTop, restoreTop string
	if o.profile {
		heapTop = heapProfileTop(r)
	}

	dir := r.TempDir()
	snapPath := filepath.Join(dir, "state.snap")
	t1 := time.Now()
	ss, err := f.Snapshot()
	if err != nil {
		return "", err
	}
	capture := time.Since(t1)
	file, err := os.Create(snapPath)
	if err != nil {
		return "", err
	}
	if err := ss.Persist(fileSink{file}); err != nil {
		return "", err
	}
	persist := time.Since(t1)
	fi, err := os.Stat(snapPath)
	if err != nil {
		return "", err
	}
	runtime.KeepAlive(f)
	f, ss = nil, nil
	runtime.GC()

	in, err := os.Open(snapPath)
	if err != nil {
		return "", err
	}
	var stopProf func() string
	if o.profile {
		stopProf = startCPUProfile(r)
	}
	t2 := time.Now()
	f2 := state.NewFSM(state.NewStore(), nil)
	if err := f2.Restore(in); err != nil {
		return "", err
	}
	restore := time.Since(t2)
	if stopProf != nil {
		restoreTop = stopProf()
	}
	conv, err := convertState(f2.Store(), filepath.Join(dir, "statedb"))
	if err != nil {
		return "", err
	}
	pend, err := pendingReads(f2.Store(), filepath.Join(dir, "statedb"), n)
	if err != nil {
		return "", err
	}
	f2 = nil
	runtime.GC()
	slog.Info("snapshot", "bytes", fi.Size(), "persist", persist, "restore", restore)
	slog.Info("converted to the on-disk layout", "took", conv.took, "disk bytes", conv.bytes, "open", conv.open)

	// A real coordinator takes the snapshot (`indexify cluster snapshot
	// restore`), is restarted, and a new node joins and installs it.
	ps := procScale{}
	if !o.inProc {
		ps = processScale(r, n, o.quick)
	}

	var b strings.Builder
	b.WriteString(fmt.Sprintf("## Scale: %d content items, each with its task\n\n", n))
	b.WriteString("In-process figures apply the items through the FSM in batches of 500 (encoded as Raft log entries, so every string is its own allocation as in production): " +
		"one CreateContent and one SchedulerUpdate (creating the items' tasks) per batch. Memory = live heap growth after GC divided by items " +
		"(content metadata + its task + every index). The process figures ingest the same number of items into a real 1-node coordinator through gRPC (the tasks stay pending: no executor), " +
		"snapshot it, SIGTERM and start it again (restart-to-ready = process start -> `/readyz` 200, then all tasks are served), then start a second " +
		"coordinator that joins (start -> its `/readyz` 200, then it serves all tasks from its own replica).\n\n")
	rows := [][]string{
		{"state-store memory per item", fmt.Sprintf("%.0f B", perItem), "<= 1024 B", goal(perItem <= 1024)},
		{"build state (apply all batches)", fmt.Sprintf("%.2f s", build.Seconds()), "", ""},
		{"snapshot capture (under the read lock)", fmt.Sprintf("%.0f ms", ms64(capture)), "", ""},
		{"snapshot capture + write to disk", fmt.Sprintf("%.2f s", persist.Seconds()), "", ""},
		{"snapshot size", fmt.Sprintf("%.1f MiB (%.0f B/item)", float64(fi.Size())/(1<<20), float64(fi.Size())/float64(n)), "", ""},
		{"restore from snapshot file (in-process)", fmt.Sprintf("%.2f s", restore.Seconds()), "", ""},
		{"the restored state written into the on-disk layout (pebble, issue 15: the first start's conversion)", fmt.Sprintf("%.2f s, %d writes", conv.took.Seconds(), conv.writes), "", ""},
		{"its disk: the pebble directory after the conversion, memtables flushed", fmt.Sprintf("%.1f MiB (%.0f B/item; snapshot %.0f B/item)", float64(conv.bytes)/(1<<20), float64(conv.bytes)/float64(n), float64(fi.Size())/float64(n)), "report", ""},
		{"open that directory again (nothing decoded)", fmt.Sprintf("%.0f ms", ms64(conv.open)), "", ""},
		{"real coordinator: ingest through gRPC CreateContent (batches of 1,000, 4 drivers) until all tasks exist", fmt.Sprintf("%.1f s (%.0f items/s)", ps.ingest.Seconds(), float64(n)/ps.ingest.Seconds()), "", ""},
		{"real coordinator: `indexify cluster snapshot save`", fmt.Sprintf("%.2f s, %.1f MiB", ps.save.Seconds(), float64(ps.snapBytes)/(1<<20)), "", ""},
		{"real coordinator: restart-to-ready (SIGTERM, start, `/readyz` 200)", fmtDur(ps.restart), "< 5 s", goal(ps.restart > 0 && ps.restart < 5*time.Second)},
		{"new follower: start -> `/readyz` 200 (state installed)", fmtDur(ps.follower), "", ""},
	}
	// After the on-disk rows: the scheduler's read from the layout.
	rows = slices.Insert(rows, 9, pend.rows()...)
	b.WriteString(table([]string{"measure", "value", "goal", "met"}, rows))
	if heapTop != "" {
		b.WriteString("\n### Where the memory goes: `go tool pprof -top -sample_index=inuse_space` after building the state\n\n```\n" + heapTop + "\n```\n")
	}
	if restoreTop != "" {
		b.WriteString("\n### Where restore time goes: `go tool pprof -top` of the in-process restore\n\n```\n" + restoreTop + "\n```\n")
	}
	if ps.filler > 0 {
		b.WriteString(fmt.Sprintf("\nBefore the snapshot, %d label writes follow the ingest, so the snapshot lets Raft compact the ingest entries away (it keeps 10,240 trailing entries): the new follower receives the snapshot (InstallSnapshot) plus those trailing entries, not the whole log.\n", ps.filler))
	} else {
		b.WriteString("\nQuick run: no filler writes, so the new follower may replay the log instead of installing the snapshot.\n")
	}
	return b.String(), nil
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtDur(d time.Duration) string {
	if d <= 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func goal(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// procScale holds the figures of the real-process part.
type procScale struct {
	ingest, save, restart, follower time.Duration
	snapBytes                       int64
	filler                          int
	note                            string
}

// processScale ingests n items (each making one task) into a real 1-node
// coordinator through CoordinatorService.CreateContent, snapshots it with
// `indexify cluster snapshot save` (which also makes the node's own Raft
// snapshot), restarts it, and lets a second node join.
func processScale(r *runner, n int, quick bool) procScale {
	var ps procScale
	c := harness.NewCluster(r, 2, nextSubnet())
	c.Expect = 1
	c.JoinIdx = []int{0}
	c.Start(0)
	c.WaitLeader(60 * time.Second)
	c.WaitReady(0, 60*time.Second)
	conn, err := grpc.NewClient(c.GRPCAddr(0), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.Fatal(err)
	}
	defer conn.Close()
	cl := pb.NewCoordinatorServiceClient(conn)
	// The graph needs an executor offering its extractor; it leaves again,
	// so the tasks stay pending (a backlog, as after an executor outage).
	sctx, scancel := context.WithCancel(context.Background())
	newTaskSink().connect(sctx, r, c.GRPCAddr(0), "scale-exec")
	setupGraph(r, cl, "default")
	scancel()

	t0 := time.Now()
	ingest(r, cl, n)
	waitTasks(r, c, 0, n)
	ps.ingest = time.Since(t0)
	slog.Info("ingested", "items", n, "took", ps.ingest)

	// Enough later writes that the snapshot lets Raft drop the ingest
	// entries (TrailingLogs is hashicorp/raft's 10240): a joining node then
	// has to install the snapshot rather than replay the log.
	if !quick {
		ps.filler = 10_240 + 1_000
		fill(r, cl, ps.filler)
	}
	snap := filepath.Join(r.TempDir(), "saved.snap")
	t1 := time.Now()
	out, err := exec.Command(harness.Binary(r), "cluster", "snapshot", "save", snap, "--coordinator", c.GRPCAddr(0)).CombinedOutput()
	if err != nil {
		r.Fatalf("snapshot save: %v: %s", err, out)
	}
	ps.save = time.Since(t1)
	if fi, err := os.Stat(snap); err == nil {
		ps.snapBytes = fi.Size()
	}

	c.Nodes[0].Signal(15)
	if !c.Nodes[0].Wait(60 * time.Second) {
		r.Fatal("coordinator did not stop on SIGTERM within 60 s")
	}
	t2 := time.Now()
	c.Start(0)
	c.WaitReady(0, 5*time.Minute)
	ps.restart = time.Since(t2)
	waitTasks(r, c, 0, n)
	slog.Info("restart to ready", "took", ps.restart)

	t3 := time.Now()
	c.Start(1)
	c.WaitReady(1, 5*time.Minute)
	ps.follower = time.Since(t3)
	waitTasks(r, c, 1, n)
	slog.Info("follower ready", "took", ps.follower)
	return ps
}

// ingest sends n items in CreateContent batches of 1,000 from 4 drivers.
func ingest(r *runner, cl pb.CoordinatorServiceClient, n int) {
	const batch = 1000
	res := loadgen.Run(context.Background(), loadgen.Config{Clients: 4, Duration: time.Hour, MaxOps: (n/batch + 4) / 4, Timeout: 2 * time.Minute},
		func(ctx context.Context, c, i int) error {
			k := i*4 + c
			if k*batch >= n {
				return nil
			}
			cs := make([]*pb.Content, 0, batch)
			for j := k * batch; j < (k+1)*batch && j < n; j++ {
				id := fmt.Sprintf("s%08d", j)
				cs = append(cs, &pb.Content{Namespace: "default", Id: id, Name: "file.pdf", MimeType: "application/pdf",
					StorageUrl: "file:///var/lib/indexify/blobs/default/" + id, SizeBytes: 12345,
					Hash: fmt.Sprintf("%064x", j), GraphNames: []string{"bg"}})
			}
			_, err := cl.CreateContent(ctx, &pb.CreateContentRequest{Contents: cs, RequestId: fmt.Sprintf("scale-%d", k)})
			return err
		})
	if res.Errors > 0 {
		r.Fatalf("ingest: %d errors, first: %s", res.Errors, res.FirstError)
	}
}

// fill makes m small label writes (64 clients).
func fill(r *runner, cl pb.CoordinatorServiceClient, m int) {
	per := (m + 63) / 64
	op := labelWriteNS(cl, "default", "s%08d", 64, "fill")
	res := loadgen.Run(context.Background(), loadgen.Config{Clients: 64, Duration: time.Hour, MaxOps: per}, op)
	if res.Errors > 0 {
		r.Fatalf("filler writes: %d errors, first: %s", res.Errors, res.FirstError)
	}
}

// waitTasks waits until node i serves n pending tasks in graph "g" from
// its own replica (a stale read, so it shows what that node holds).
func waitTasks(r *runner, c *harness.Cluster, i, n int) {
	conn, err := grpc.NewClient(c.GRPCAddr(i), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.Fatal(err)
	}
	defer conn.Close()
	cl := pb.NewCoordinatorServiceClient(conn)
	harness.Eventually(r, 5*time.Minute, fmt.Sprintf("node %d holds %d tasks", i, n), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := cl.GetAnalytics(ctx, &pb.GetAnalyticsRequest{Namespace: "default", GraphName: "bg",
			Consistency: pb.ReadConsistency_READ_CONSISTENCY_STALE})
		if err != nil {
			return err
		}
		var got uint64
		for _, p := range resp.GetPolicies() {
			got += p.GetPending() + p.GetSuccess() + p.GetFailure()
		}
		if got != uint64(n) {
			return fmt.Errorf("%d tasks", got)
		}
		return nil
	})
}

// converted is what convertState measured.
type converted struct {
	took, open time.Duration
	writes     int
	bytes      int64
}

// convertState writes the store into a new pebble state directory
// (state.Store.WriteStateDB inside statedb.Build, the conversion a first
// start on the on-disk state machine runs once), then measures the directory and how long it
// takes to open again.
func convertState(s *state.Store, dir string) (converted, error) {
	var c converted
	t0 := time.Now()
	db, err := statedb.Build(statedb.Options{Dir: dir}, func(db *statedb.DB) error {
		var err error
		c.writes, err = s.WriteStateDB(db)
		return err
	})
	if err != nil {
		return c, err
	}
	if err := db.Flush(); err != nil {
		db.Close()
		return c, err
	}
	if err := db.Close(); err != nil {
		return c, err
	}
	c.took = time.Since(t0)
	err = filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		fi, err := e.Info()
		if err == nil {
			c.bytes += fi.Size()
		}
		return err
	})
	if err != nil {
		return c, err
	}
	t1 := time.Now()
	db, err = statedb.Open(statedb.Options{Dir: dir})
	if err != nil {
		return c, err
	}
	c.open = time.Since(t1)
	if db.Applied() != s.AppliedIndex() {
		db.Close()
		return c, fmt.Errorf("converted state at index %d, store at %d", db.Applied(), s.AppliedIndex())
	}
	return c, db.Close()
}
