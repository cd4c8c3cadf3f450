// Command statestore measures the two candidate embedded stores for the
// coordinator's on-disk state (issue 15), pebble v2 and bbolt, on the FSM's
// workload with the real record encodings of internal/state/layout.
//
//	cd bench/statestore
//	go run . -engine pebble -n 1000000 -dir /tmp/ss-pebble -phase load
//	go run . -engine pebble -dir /tmp/ss-pebble -phase reopen
//
// load: ingest n items in write batches of -batch (each: the items, their
// tasks, the state changes they raise, the previous batch's processed
// changes, the applied index); 90% of the items then go through the task
// lifecycle (an assign batch and a complete batch per 1,000, as the
// scheduler and executors would), the rest stay pending. Then point reads,
// the hot scans and the disk size after close.
// reopen (a fresh process): open time, RSS, the same reads, a consistent
// checkpoint (time, bytes).
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/indexify-go/indexify/internal/state/layout"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

const (
	ns        = "default"
	graph     = "rag"
	executors = 10
	perDoc    = 100 // a document and its 99 chunks
)

var extractors = []string{"tensorlake/chunker", "tensorlake/minilm-l6"}

func hashHex(n int, parts ...string) string {
	s := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(s[:])[:n]
}

func contentID(j int) string { return hashHex(16, "content", strconv.Itoa(j)) }

// item j: every 100th item is an uploaded document with a chunker task, the
// others are its chunks (children) with an embedding task, shaped like the
// records the FSM stores (ids are hashes as in state.TaskID/ChildContentID).
func item(j int) (*pb.Content, *pb.Task) {
	id := contentID(j)
	doc := j - j%perDoc
	ts := int64(1_780_000_000_000 + j)
	c := &pb.Content{
		Id: id, Version: 1, Latest: true, Namespace: ns, GraphNames: []string{graph},
		Hash: hashHex(64, "hash", id), CreatedAt: ts, ChangeOffset: uint64(j + 1),
		StorageUrl: "s3://indexify-blobs/" + ns + "/" + hashHex(64, "hash", id),
	}
	t := &pb.Task{Namespace: ns, GraphName: graph, ContentId: id, ContentVersion: 1, Content: c, CreatedAt: ts}
	if j == doc {
		c.Name, c.MimeType, c.Source, c.SizeBytes = "report-"+strconv.Itoa(j)+".pdf", "application/pdf", "ingestion", 2_400_000
		c.Labels = map[string]string{"source": `"crawler"`, "year": "2026"}
		t.Extractor, t.PolicyName, t.InputParamsJson = extractors[0], "chunks", `{"chunk_size":1000,"overlap":100}`
	} else {
		pid := contentID(doc)
		c.ParentId, c.RootContentId, c.Source, c.MimeType, c.SizeBytes = pid, pid, "chunks", "text/plain", 1000
		c.Name = "report-" + strconv.Itoa(doc) + ".pdf"
		c.SourceTaskId = hashHex(24, "task", pid)
		c.Labels = map[string]string{"page": strconv.Itoa(j % perDoc / 3)}
		t.Extractor, t.PolicyName, t.InputParamsJson = extractors[1], "embeddings", "{}"
	}
	t.Id = hashHex(24, "task", id)
	return c, t
}

func main() {
	kind := flag.String("engine", "pebble", "pebble or bbolt")
	dir := flag.String("dir", "", "data directory (load: must not exist)")
	n := flag.Int("n", 100_000, "items to load")
	batch := flag.Int("batch", 1000, "items per write batch")
	cacheMiB := flag.Int64("cache-mib", 64, "pebble block cache (bbolt relies on the OS page cache)")
	sync := flag.Bool("sync", false, "fsync every commit (see BENCHMARKS.md for the policy)")
	phase := flag.String("phase", "load", "load or reopen")
	lifecycle := flag.Float64("lifecycle", 0.9, "fraction of items whose task is assigned and completed")
	flag.Parse()
	if *dir == "" {
		fail("-dir is required")
	}
	start := time.Now()
	e, err := openEngine(*kind, *dir, *cacheMiB<<20, *sync)
	if err != nil {
		fail(err.Error())
	}
	fmt.Printf("engine %s sync=%v cache=%dMiB phase=%s\n", *kind, *sync, *cacheMiB, *phase)
	fmt.Printf("open: %v\n", time.Since(start).Round(time.Microsecond))
	switch *phase {
	case "load":
		load(e, *n, *batch, *lifecycle)
		reads(e, *n)
		rss("after load+reads")
		t := time.Now()
		check(e.close())
		fmt.Printf("close: %v\n", time.Since(t).Round(time.Millisecond))
		disk(*dir, *n)
	case "reopen":
		v, ok, err := e.get(layout.MetaKey(layout.MetaApplied))
		check(err)
		applied, _ := layout.DecodeUint(v)
		fmt.Printf("open -> applied index read: %v (applied=%d found=%v)\n", time.Since(start).Round(time.Microsecond), applied, ok)
		c, _ := item(*n / 2)
		if _, ok, err := e.get(layout.ContentKey(ns, c.Id)); err != nil || !ok {
			fail(fmt.Sprintf("content of item %d: found=%v err=%v", *n/2, ok, err))
		}
		fmt.Printf("open -> first content read: %v\n", time.Since(start).Round(time.Microsecond))
		rss("after open")
		fmt.Println("reads, first pass after open:")
		reads(e, *n)
		rss("after reads")
		fmt.Println("reads, second pass (same keys, warm cache):")
		reads(e, *n)
		rss("after second pass")
		snap(e, *dir+".ckpt")
		rss("after checkpoint")
		check(e.close())
	default:
		fail("unknown -phase " + *phase)
	}
}

func load(e engine, n, batch int, lifecycle float64) {
	nb := (n + batch - 1) / batch
	cut := int(float64(nb) * lifecycle)
	var encode, ingest, assign, complete []time.Duration
	var recBytes, recs int64
	idx := uint64(0)
	t0 := time.Now()
	items := func(b int) (lo, hi int) { return b * batch, min((b+1)*batch, n) }
	for b := 0; b < nb; b++ {
		lo, hi := items(b)
		idx++
		// Records are built before the clock starts: the FSM has them
		// decoded from the log entry; encoding them is part of the cost.
		var cs []*pb.Content
		var ts []*pb.Task
		var chs, done []*pb.StateChange
		for j := lo; j < hi; j++ {
			c, task := item(j)
			cs, ts, chs = append(cs, c), append(ts, task), append(chs, change(j))
			if b > 0 { // the scheduler processed the previous batch's changes
				done = append(done, change(j-batch))
			}
		}
		if b == 0 {
			for i := range cs {
				cv, _ := layout.EncodeRecord(cs[i])
				tv, _ := layout.EncodeTask(ts[i])
				recBytes += int64(len(cv) + len(tv))
				recs++
			}
		}
		// The same writes into a writer that keeps nothing: the CPU cost of
		// building the records and keys, the peer of the engines' figures.
		t := time.Now()
		check(writeIngest(nullWriter{}, cs, ts, chs, done, idx))
		encode = append(encode, time.Since(t))
		t = time.Now()
		check(e.apply(func(w layout.Writer) error { return writeIngest(w, cs, ts, chs, done, idx) }))
		ingest = append(ingest, time.Since(t))
		if step := max(nb/10, 1); (b+1)%step == 0 {
			el := time.Since(t0)
			fmt.Printf("progress: %d items after %v (%.0f items/s overall); last ingest batch %v\n",
				hi, el.Round(time.Second), float64(hi)/el.Seconds(), ingest[len(ingest)-1].Round(time.Millisecond))
		}
		if k := b - 1; k >= 0 && k < cut { // assign the previous batch
			idx++
			lo, hi := items(k)
			var olds, news []*pb.Task
			for j := lo; j < hi; j++ {
				_, old := item(j)
				olds, news = append(olds, old), append(news, assigned(j, old, idx))
			}
			assign = append(assign, applyTasks(e, olds, news, idx))
		}
		if k := b - 2; k >= 0 && k < cut-5 { // complete the one before; the last 5 stay assigned
			idx++
			lo, hi := items(k)
			var olds, news []*pb.Task
			for j := lo; j < hi; j++ {
				_, t0 := item(j)
				old := assigned(j, t0, 0)
				nt := assigned(j, t0, 0)
				nt.Outcome, nt.CompletedAt, nt.Attempts = pb.TaskOutcome_TASK_OUTCOME_SUCCESS, old.CreatedAt+5000, 1
				nt.ResultDigest = []byte(hashHex(32, "digest", old.Id))
				olds, news = append(olds, old), append(news, nt)
			}
			complete = append(complete, applyTasks(e, olds, news, idx))
		}
	}
	total := time.Since(t0)
	fmt.Printf("encoded content+task record bytes per item (first batch): %.0f\n", float64(recBytes)/float64(recs))
	fmt.Printf("load: %d items, %d write batches, %v total, %.0f items/s overall (ingest+lifecycle)\n",
		n, idx, total.Round(time.Millisecond), float64(n)/total.Seconds())
	report("ingest batch, encode only (no store)", encode, batch)
	report("ingest batch (items+tasks+changes+applied)", ingest, batch)
	report("assign batch", assign, batch)
	report("complete batch", complete, batch)
	rss("after load")
}

// applyTasks writes one batch of task transitions (old -> new) and the
// applied index, and returns how long the commit took.
func applyTasks(e engine, olds, news []*pb.Task, idx uint64) time.Duration {
	t := time.Now()
	check(e.apply(func(w layout.Writer) error {
		for i := range olds {
			if err := layout.PutTask(w, olds[i], news[i]); err != nil {
				return err
			}
		}
		return layout.PutApplied(w, idx)
	}))
	return time.Since(t)
}

type nullWriter struct{}

func (nullWriter) Set(k, v []byte) error { return nil }
func (nullWriter) Delete(k []byte) error { return nil }

// writeIngest is one ingest batch: the items, their tasks, the changes they
// raise, the previous batch's processed changes and the applied index.
func writeIngest(w layout.Writer, cs []*pb.Content, ts []*pb.Task, chs, done []*pb.StateChange, idx uint64) error {
	for i := range cs {
		if err := layout.PutContent(w, cs[i]); err != nil {
			return err
		}
		if err := layout.PutTask(w, nil, ts[i]); err != nil {
			return err
		}
		if err := layout.PutChange(w, chs[i], true); err != nil {
			return err
		}
	}
	for _, c := range done {
		if err := layout.DeleteChange(w, c, true); err != nil {
			return err
		}
	}
	return layout.PutApplied(w, idx)
}

func change(j int) *pb.StateChange {
	return &pb.StateChange{Id: uint64(j + 1), ObjectId: contentID(j), Type: pb.ChangeType_CHANGE_TYPE_NEW_CONTENT,
		CreatedAt: int64(1_780_000_000_000 + j), Namespace: ns}
}

func assigned(j int, t *pb.Task, idx uint64) *pb.Task {
	return &pb.Task{Id: t.Id, Extractor: t.Extractor, PolicyName: t.PolicyName, GraphName: t.GraphName,
		Namespace: t.Namespace, ContentId: t.ContentId, ContentVersion: 1, InputParamsJson: t.InputParamsJson,
		CreatedAt: t.CreatedAt, ExecutorId: "executor-" + strconv.Itoa(j%executors), AssignedIndex: idx}
}

func report(name string, ds []time.Duration, batch int) {
	if len(ds) == 0 {
		return
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	p := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	fmt.Printf("%s: %d batches, mean %v, p50 %v, p99 %v, max %v, %.0f items/s\n", name, len(ds),
		(sum / time.Duration(len(ds))).Round(time.Microsecond), p(0.5).Round(time.Microsecond),
		p(0.99).Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond),
		float64(len(ds)*batch)/sum.Seconds())
}

// reads measures point reads and the hot scans, decoding every record as
// the store's readers would.
func reads(e engine, n int) {
	r := rand.New(rand.NewPCG(1, 2))
	timeit := func(name string, reps int, fn func() int) {
		t := time.Now()
		rows := 0
		for i := 0; i < reps; i++ {
			rows += fn()
		}
		d := time.Since(t)
		fmt.Printf("%s: %d ops, %.1f us/op, %d rows/op\n", name, reps, float64(d.Microseconds())/float64(reps), rows/reps)
	}
	getContent := func(id string) {
		v, ok, err := e.get(layout.ContentKey(ns, id))
		check(err)
		if !ok {
			fail("missing content " + id)
		}
		var c pb.Content
		check(layout.DecodeRecord(v, &c))
	}
	getTask := func(id string) {
		v, ok, err := e.get(layout.TaskKey(id))
		check(err)
		if !ok {
			fail("missing task " + id)
		}
		var t pb.Task
		check(layout.DecodeRecord(v, &t))
	}
	timeit("point read content by id", 20000, func() int { getContent(contentID(r.IntN(n))); return 1 })
	timeit("point read task by id", 20000, func() int { _, t := item(r.IntN(n)); getTask(t.Id); return 1 })
	// idsUnder lists the ids that end the index keys under a prefix.
	idsUnder := func(p []byte, limit int, parse func(k, p []byte) (string, error)) []string {
		var ids []string
		check(e.scan(p, func(k, _ []byte) bool {
			id, err := parse(k, p)
			check(err)
			ids = append(ids, id)
			return limit == 0 || len(ids) < limit
		}))
		return ids
	}
	for _, x := range extractors {
		timeit("pending tasks of "+x+", first 100 + their tasks", 200, func() int {
			ids := idsUnder(layout.PendingPrefix(x), 100, layout.TaskIDOfIndexKey)
			for _, id := range ids {
				getTask(id)
			}
			return len(ids)
		})
	}
	timeit("unfinished tasks of an executor + their tasks", 50, func() int {
		ids := idsUnder(layout.AssignedPrefix("executor-"+strconv.Itoa(r.IntN(executors))), 0, layout.TaskIDOfIndexKey)
		for _, id := range ids {
			getTask(id)
		}
		return len(ids)
	})
	timeit("children of a document + their content", 200, func() int {
		doc := r.IntN(n/perDoc) * perDoc
		ids := idsUnder(layout.ChildPrefix(ns, contentID(doc)), 0, layout.ChildIDOfKey)
		for _, id := range ids {
			getContent(id)
		}
		return len(ids)
	})
	timeit("content by namespace, page of 100 from a random id", 200, func() int {
		p := layout.ContentPrefix(ns)
		rows := 0
		check(e.scanFrom(p, layout.ContentKey(ns, contentID(r.IntN(n))), func(_, v []byte) bool {
			var c pb.Content
			check(layout.DecodeRecord(v, &c))
			rows++
			return rows < 100
		}))
		return rows
	})
	timeit("tasks of a content (by-content index + task)", 2000, func() int {
		ids := idsUnder(layout.TaskByContentPrefix(ns, contentID(r.IntN(n))), 0, layout.TaskIDOfIndexKey)
		for _, id := range ids {
			getTask(id)
		}
		return len(ids)
	})
}

func snap(e engine, dir string) {
	_ = os.RemoveAll(dir)
	t := time.Now()
	n, err := e.checkpoint(dir)
	check(err)
	d := time.Since(t)
	alloc := allocated(dir)
	fmt.Printf("checkpoint: %v, %.1f MiB of files (%.1f MiB newly allocated on disk)\n", d.Round(time.Millisecond),
		float64(n)/(1<<20), float64(alloc)/(1<<20))
	check(os.RemoveAll(dir))
}

func disk(dir string, n int) {
	b, err := dirBytes(dir)
	check(err)
	a := allocated(dir)
	fmt.Printf("disk after close: %.1f MiB apparent, %.1f MiB allocated, %.0f B/item allocated\n",
		float64(b)/(1<<20), float64(a)/(1<<20), float64(a)/float64(n))
}

// allocated is the disk blocks of the files under dir. Hard links made by a
// pebble checkpoint are counted too (the bytes shared with the live store
// are in both); the apparent size printed next to it is what a stream of the
// checkpoint sends.
func allocated(dir string) int64 {
	var n int64
	entries, err := os.ReadDir(dir)
	check(err)
	for _, de := range entries {
		fi, err := de.Info()
		check(err)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && !de.IsDir() {
			n += st.Blocks * 512
		}
	}
	return n
}

func rss(when string) {
	f, err := os.Open("/proc/self/status")
	check(err)
	defer f.Close()
	vals := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			vals[k] = strings.TrimSpace(v)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("rss %s: VmRSS %s (anon %s, file %s), peak VmHWM %s, Go heap in use %d MiB\n", when,
		vals["VmRSS"], vals["RssAnon"], vals["RssFile"], vals["VmHWM"], ms.HeapInuse>>20)
}

func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "statestore:", msg)
	os.Exit(1)
}
