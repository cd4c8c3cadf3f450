package executor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/executor/extractors"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func task(id, extractor, contentID string, assigned uint64, params string) *pb.Task {
	return &pb.Task{
		Id: id, Extractor: extractor, Namespace: "ns", ContentId: contentID, ContentVersion: 1,
		PolicyName: "pol", GraphName: "g", InputParamsJson: params, AssignedIndex: assigned,
		Content: &pb.Content{Id: contentID, Version: 1, MimeType: "text/plain"},
	}
}

func external(t *testing.T, name, script string) Extractor {
	t.Helper()
	x, err := extractors.NewExternal(extractors.ExternalConfig{Name: name, Command: []string{script}})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestExecutorRunsTasksAndUploadsResults(t *testing.T) {
	dir := t.TempDir()
	echo := writeScript(t, dir, "echo.sh", `data=$(cat)
printf '{"content":[{"text":"%s","mime_type":"text/x-echo","labels":{"from":"echo","params":%s}}]}' "$data" "$INDEXIFY_INPUT_PARAMS"
`)
	fail := writeScript(t, dir, "fail.sh", "cat >/dev/null\necho 'bad thing happened' >&2\nexit 2\n")
	coord := startCoordinator(t, "a")
	api := startAPI(t)
	api.put("ns", "c1", 1, "abcdefghij")
	api.put("ns", "c2", 1, "hi")
	ex := startExecutor(t, Config{
		ID: "exec-1", APIServer: api.URL + "/", MaxPendingTasks: 7, Concurrency: 2,
		HeartbeatInterval: 20 * time.Millisecond, Advertise: "127.0.0.1:9501",
		Extractors: append(Builtins(), external(t, "test/echo", echo), external(t, "test/fail", fail)),
	}, dialCoordinators(t, coord))

	s := coord.nextStream(t)
	reg := s.first.GetExecutor()
	if s.first.GetExecutorId() != "exec-1" || reg.GetId() != "exec-1" || reg.GetMaxPendingTasks() != 7 || reg.GetAddress() != "127.0.0.1:9501" {
		t.Fatalf("first message %v", s.first)
	}
	var names []string
	for _, d := range reg.GetExtractors() {
		names = append(names, d.GetName())
	}
	slices.Sort(names)
	if want := []string{extractors.ChunkerName, extractors.AttributesName, extractors.PDFName, embed.LexicalExtractor, embed.OpenAIExtractor, "test/echo", "test/fail"}; !slices.Equal(names, slices.Sorted(slices.Values(want))) {
		t.Fatalf("registered extractors %v", names)
	}

	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{
		task("t-chunk", extractors.ChunkerName, "c1", 1, `{"chunk_size":4}`),
		task("t-attr", extractors.AttributesName, "c1", 1, ""),
		task("t-echo", "test/echo", "c2", 1, `{"x": 1}`),
	}})
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{
		task("t-fail", "test/fail", "c2", 1, ""),
		task("t-unknown", "nope/none", "c2", 1, ""),
		task("t-missing", extractors.AttributesName, "no-such-content", 1, ""),
	}})

	u := api.waitUpload(t, "t-chunk", 1)
	if u.executor != "exec-1" || u.result.Outcome != wire.OutcomeSuccess || len(u.result.Content) != 3 {
		t.Fatalf("chunk upload %+v", u.result)
	}
	for i, want := range []string{"abcd", "efgh", "ij"} {
		c := u.result.Content[i]
		if c.Index != i || c.MimeType != "text/plain" || string(c.Labels["chunk_index"]) != strconv.Itoa(i) {
			t.Errorf("chunk %d metadata %+v", i, c)
		}
		if string(u.files[i]) != want || u.mimes[i] != "text/plain" {
			t.Errorf("chunk %d bytes %q (%s), want %q", i, u.files[i], u.mimes[i], want)
		}
	}

	u = api.waitUpload(t, "t-attr", 1)
	if u.result.Outcome != wire.OutcomeSuccess || len(u.result.Features) != 1 || u.result.Features[0].Name != "metadata" {
		t.Fatalf("attributes upload %+v", u.result)
	}
	var attrs extractors.ContentAttributes
	if err := json.Unmarshal(u.result.Features[0].Value, &attrs); err != nil || attrs.Bytes != 10 || attrs.Words != 1 || attrs.Lines != 1 {
		t.Fatalf("attributes %s (%v)", u.result.Features[0].Value, err)
	}

	u = api.waitUpload(t, "t-echo", 1)
	if u.result.Outcome != wire.OutcomeSuccess || len(u.result.Content) != 1 || string(u.files[0]) != "hi" || string(u.result.Content[0].Labels["params"]) != `{"x":1}` ||
		u.result.Content[0].MimeType != "text/x-echo" || u.mimes[0] != "text/x-echo" || string(u.result.Content[0].Labels["from"]) != `"echo"` {
		t.Fatalf("echo upload %+v files %v", u.result, u.files)
	}

	for task, want := range map[string][]string{
		"t-fail":    {"exit status 2", "bad thing happened"},
		"t-unknown": {`"nope/none" is not offered`},
		"t-missing": {"download content", "404", "content not found"},
	} {
		u := api.waitUpload(t, task, 1)
		if u.result.Outcome != wire.OutcomeFailed || len(u.files) != 0 {
			t.Errorf("%s: %+v", task, u.result)
		}
		for _, w := range want {
			if !strings.Contains(u.result.Error, w) {
				t.Errorf("%s: error %q lacks %q", task, u.result.Error, w)
			}
		}
	}
	// Extractor failures are reported once, never retried locally.
	if n := api.attemptsFor("t-fail"); n != 1 {
		t.Errorf("t-fail uploaded %d times", n)
	}
	eventually(t, "idle executor", func() bool { return ex.Pending() == 0 })
	// Heartbeats keep flowing and report the (now empty) queue.
	eventually(t, "heartbeat reporting 0 pending", func() bool {
		hb := s.heartbeats()
		return len(hb) > 0 && hb[len(hb)-1] == 0
	})
	if st := ex.Stats(); st.Succeeded != 3 || st.Failed != 3 || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
}

// slowExtractor appends the task id to runs, and while the block file
// exists records the pid of a long sleep it waits for.
func slowExtractor(t *testing.T, dir string) (x Extractor, runs, block string) {
	runs, block = filepath.Join(dir, "runs"), filepath.Join(dir, "block")
	script := writeScript(t, dir, "slow.sh", `cat >/dev/null
echo "$INDEXIFY_TASK_ID" >> `+runs+`
if [ -f `+block+` ]; then
  sleep 300 &
  echo $! > `+dir+`/"$INDEXIFY_TASK_ID".pid
  wait
fi
echo '{"features":[{"name":"ran","value":"'"$INDEXIFY_TASK_ID"'"}]}'
`)
	return external(t, "test/slow", script), runs, block
}

func waitPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// waitGone polls until pid is gone or a zombie (the container's init may not
// reap orphans).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	eventually(t, "process "+strconv.Itoa(pid)+" to die", func() bool {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
	})
}

func mustCreate(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestExecutorDedupesAndCancels(t *testing.T) {
	dir := t.TempDir()
	slow, runs, block := slowExtractor(t, dir)
	coord := startCoordinator(t, "a")
	api := startAPI(t)
	for _, id := range []string{"c1", "c2", "c3"} {
		api.put("ns", id, 1, "data")
	}
	ex := startExecutor(t, Config{ID: "exec-1", APIServer: api.URL, Concurrency: 1, HeartbeatInterval: time.Hour,
		Extractors: []Extractor{slow}}, dialCoordinators(t, coord))
	s := coord.nextStream(t)

	mustCreate(t, block)
	t1 := task("T1", "test/slow", "c1", 1, "")
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{t1}})
	pid := waitPid(t, filepath.Join(dir, "T1.pid"))
	// A duplicate push of a running task, and a task queued behind it.
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{t1, task("V", "test/slow", "c2", 1, "")}})
	eventually(t, "V queued", func() bool { return ex.Pending() == 2 })
	// A newer assignment of the running T1 waits for it, and is dropped
	// with it when T1 is cancelled below.
	t1b := task("T1", "test/slow", "c1", 5, "")
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{t1b}})
	s.push(t, &pb.HeartbeatResponse{CancelledTaskIds: []string{"V"}})
	s.push(t, &pb.HeartbeatResponse{CancelledTaskIds: []string{"T1", "never-seen"}})
	waitGone(t, pid)
	eventually(t, "queue drained", func() bool { return ex.Pending() == 0 })

	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{task("W", "test/slow", "c3", 1, "")}})
	api.waitUpload(t, "W", 1)
	if n := countLines(t, runs, "T1"); n != 1 {
		t.Errorf("T1 ran %d times", n)
	}
	if n := countLines(t, runs, "V"); n != 0 {
		t.Errorf("cancelled queued task V ran %d times", n)
	}
	if api.attemptsFor("T1") != 0 || api.attemptsFor("V") != 0 {
		t.Errorf("cancelled tasks uploaded a result")
	}

	// The task comes back under a new assignment (a retry): it runs again.
	t1again := task("T1", "test/slow", "c1", 2, "")
	t1again.Attempts = 1
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{t1again}})
	if u := api.waitUpload(t, "T1", 1); u.result.Outcome != wire.OutcomeSuccess || string(u.result.Features[0].Value) != `"T1"` {
		t.Fatalf("T1 upload %+v", u.result)
	}
	// The same assignment pushed again after it finished (as after a
	// reconnect) is not run; X, queued behind it on the single worker,
	// proves the push was handled.
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{t1again, task("X", "test/slow", "c3", 1, "")}})
	api.waitUpload(t, "X", 1)
	if n := countLines(t, runs, "T1"); n != 2 {
		t.Errorf("T1 ran %d times, want 2", n)
	}
	if n := len(api.uploadsFor("T1")); n != 1 {
		t.Errorf("T1 uploaded %d times, want 1", n)
	}
	// A retry pushed while the previous attempt still runs (the
	// coordinator can be that fast) runs right after it.
	mustCreate(t, block)
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{task("R", "test/slow", "c3", 1, "")}})
	rpid := waitPid(t, filepath.Join(dir, "R.pid"))
	r2 := task("R", "test/slow", "c3", 9, "")
	r2.Attempts = 1
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{r2}})
	eventually(t, "R's retry noted", func() bool {
		ex.mu.Lock()
		defer ex.mu.Unlock()
		return ex.tasks["R"] != nil && ex.tasks["R"].next != nil
	})
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(rpid, syscall.SIGTERM); err != nil { // lets R's first run finish
		t.Fatal(err)
	}
	api.waitUpload(t, "R", 2)
	if n := countLines(t, runs, "R"); n != 2 {
		t.Errorf("R ran %d times, want 2", n)
	}

	// X's and R's uploads are answered before the worker records them: poll.
	eventually(t, "stats of 5 successes and 2 dropped", func() bool {
		st := ex.Stats()
		return st.Succeeded == 5 && st.Dropped == 2 && st.Failed == 0
	})
}

func TestExecutorReconnectsToAnotherCoordinator(t *testing.T) {
	a, b := startCoordinator(t, "a"), startCoordinator(t, "b")
	api := startAPI(t)
	api.put("ns", "c1", 1, "one two")
	ex := startExecutor(t, Config{ID: "exec-1", APIServer: api.URL, HeartbeatInterval: 20 * time.Millisecond,
		ReconnectBackoff: 10 * time.Millisecond, MaxReconnectBackoff: 50 * time.Millisecond,
		Extractors: Builtins()}, dialCoordinators(t, a, b))

	var first *testStream
	var other *testCoordinator
	select {
	case first = <-a.streams:
		other = b
		a.srv.Stop() // the node dies
	case first = <-b.streams:
		other = a
		b.srv.Stop()
	case <-time.After(20 * time.Second):
		t.Fatal("executor never connected")
	}
	if first.first.GetExecutor() == nil {
		t.Fatal("first message lacks the registration")
	}
	s := other.nextStream(t)
	if reg := s.first.GetExecutor(); reg.GetId() != "exec-1" || len(reg.GetExtractors()) != len(Builtins()) {
		t.Fatalf("re-registration on %s: %v", s.coord, s.first)
	}
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{task("t1", extractors.AttributesName, "c1", 1, "")}})
	if u := api.waitUpload(t, "t1", 1); u.result.Outcome != wire.OutcomeSuccess {
		t.Fatalf("upload %+v", u.result)
	}

	// A stream the coordinator ends with an error (e.g. it lost
	// leadership) is reopened on a live node, registering again.
	s.end <- status.Error(codes.Unavailable, "stepping down")
	s2 := other.nextStream(t)
	if s2.first.GetExecutor().GetId() != "exec-1" {
		t.Fatalf("no registration after stream reset: %v", s2.first)
	}
	if c := ex.Stats().Connects; c < 3 {
		t.Errorf("connects = %d, want >= 3", c)
	}
}

func TestExecutorUploadRetriesAndRejections(t *testing.T) {
	coord := startCoordinator(t, "a")
	api := startAPI(t)
	api.put("ns", "c1", 1, "some text")
	ex := startExecutor(t, Config{ID: "exec-1", APIServer: api.URL, Concurrency: 1, HeartbeatInterval: time.Hour,
		HTTPAttempts: 3, HTTPBackoff: time.Millisecond, RerunDelay: time.Hour, Extractors: Builtins()}, dialCoordinators(t, coord))
	s := coord.nextStream(t)

	api.put("ns", "c9", 1, "flaky")
	api.scriptDownload("ns/c9@1", 503, 500)
	api.scriptUpload("t-retry", 503, 502)
	api.scriptUpload("t-409", 409)
	api.scriptUpload("t-400", 400)
	api.scriptUpload("t-down", 503, 503, 503)
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{
		task("t-retry", extractors.AttributesName, "c1", 1, ""),
		task("t-409", extractors.AttributesName, "c1", 1, ""),
		task("t-400", extractors.ChunkerName, "c1", 1, ""),
		task("t-down", extractors.AttributesName, "c1", 1, ""),
		task("t-dl", extractors.AttributesName, "c9", 1, ""),
	}})
	// Downloads are retried on 5xx as well.
	if u := api.waitUpload(t, "t-dl", 1); u.result.Outcome != wire.OutcomeSuccess || !strings.Contains(string(u.result.Features[0].Value), `"bytes":5`) {
		t.Fatalf("t-dl %+v", u.result)
	}
	if n := api.downloadsOf("ns/c9@1"); n != 3 {
		t.Errorf("c9 downloaded %d times, want 3", n)
	}
	// 5xx answers are retried until accepted.
	if u := api.waitUpload(t, "t-retry", 1); u.result.Outcome != wire.OutcomeSuccess {
		t.Fatalf("t-retry %+v", u.result)
	}
	if n := api.attemptsFor("t-retry"); n != 3 {
		t.Errorf("t-retry took %d attempts, want 3", n)
	}
	// A rejected success is replaced by a failure report so the task ends.
	u := api.waitUpload(t, "t-400", 1)
	if u.result.Outcome != wire.OutcomeFailed || !strings.Contains(u.result.Error, "rejected the result") || !strings.Contains(u.result.Error, "scripted 400") {
		t.Fatalf("t-400 %+v", u.result)
	}
	// Every task finished but t-down, which waits to run again (an hour
	// here).
	eventually(t, "all tasks but t-down finished", func() bool { return ex.Pending() == 1 })
	// 409: reassigned, dropped after one try. Exhausted retries: given up
	// after HTTPAttempts tries.
	if n := api.attemptsFor("t-409"); n != 1 || len(api.uploadsFor("t-409")) != 0 {
		t.Errorf("t-409: %d attempts", n)
	}
	if n := api.attemptsFor("t-down"); n != 3 || len(api.uploadsFor("t-down")) != 0 {
		t.Errorf("t-down: %d attempts", n)
	}
	if st := ex.Stats(); st.Succeeded != 2 || st.Failed != 1 || st.Dropped != 2 {
		t.Errorf("stats %+v", st)
	}
	// A result that never got through is not remembered as done: the same
	// assignment pushed again (after a reconnect) runs again at once. The
	// 409 one is remembered and not run again; t-mark, queued last, shows
	// the pushes were handled.
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{
		task("t-409", extractors.AttributesName, "c1", 1, ""),
		task("t-down", extractors.AttributesName, "c1", 1, ""),
		task("t-mark", extractors.AttributesName, "c1", 1, ""),
	}})
	api.waitUpload(t, "t-mark", 1)
	if u := api.waitUpload(t, "t-down", 1); u.result.Outcome != wire.OutcomeSuccess {
		t.Fatalf("t-down retry %+v", u.result)
	}
	if n := api.attemptsFor("t-409"); n != 1 {
		t.Errorf("t-409 ran again (%d attempts)", n)
	}
}

func TestExecutorShutdownKillsRunningTasks(t *testing.T) {
	dir := t.TempDir()
	slow, _, block := slowExtractor(t, dir)
	mustCreate(t, block)
	coord := startCoordinator(t, "a")
	api := startAPI(t)
	api.put("ns", "c1", 1, "x")
	ex, err := New(Config{ID: "exec-1", APIServer: api.URL, Extractors: []Extractor{slow},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, dialCoordinators(t, coord))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	coord.nextStream(t).push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{task("T1", "test/slow", "c1", 1, "")}})
	pid := waitPid(t, filepath.Join(dir, "T1.pid"))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	waitGone(t, pid)
	if api.attemptsFor("T1") != 0 {
		t.Fatal("a task interrupted by shutdown uploaded a result")
	}
	if err := ex.Run(context.Background()); err == nil {
		t.Fatal("second Run accepted")
	}
}

func TestNewValidatesConfig(t *testing.T) {
	coord := startCoordinator(t, "a")
	conn := dialCoordinators(t, coord)
	good := Config{APIServer: "http://127.0.0.1:8900", Extractors: Builtins()}
	bad := map[string]func(c *Config){
		"no extractors":  func(c *Config) { c.Extractors = nil },
		"nil extractor":  func(c *Config) { c.Extractors = []Extractor{nil} },
		"duplicate":      func(c *Config) { c.Extractors = append(Builtins(), extractors.NewChunker()) },
		"no api":         func(c *Config) { c.APIServer = "" },
		"api not http":   func(c *Config) { c.APIServer = "ftp://x" },
		"api no host":    func(c *Config) { c.APIServer = "http://" },
		"neg pending":    func(c *Config) { c.MaxPendingTasks = -1 },
		"neg concurrent": func(c *Config) { c.Concurrency = -1 },
		"neg interval":   func(c *Config) { c.HeartbeatInterval = -time.Second },
	}
	for name, mut := range bad {
		c := good
		mut(&c)
		if _, err := New(c, conn); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(good, nil); err == nil {
		t.Error("nil conn accepted")
	}
	ex, err := New(good, conn)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if !strings.HasPrefix(ex.ID(), host+"-") || len(ex.ID()) != len(host)+9 {
		t.Errorf("default id %q", ex.ID())
	}
	if ex.cfg.MaxPendingTasks != 20 || ex.cfg.Concurrency < 1 || ex.cfg.HeartbeatInterval != 5*time.Second {
		t.Errorf("defaults %+v", ex.cfg)
	}
	if ex.Registration().GetMaxPendingTasks() != 20 || len(ex.Registration().GetExtractors()) != len(Builtins()) {
		t.Errorf("registration %v", ex.Registration())
	}
	if other, _ := New(good, conn); other.ID() == ex.ID() {
		t.Error("two default ids are equal")
	}
}

func TestExecutorStopsWhenRegistrationIsRejected(t *testing.T) {
	coord := startRejectingCoordinator(t, "a", status.Error(codes.InvalidArgument, "extractor name not allowed"))
	ex, err := New(Config{ID: "exec-1", APIServer: "http://127.0.0.1:1", Extractors: Builtins(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, dialCoordinators(t, coord))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = ex.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "extractor name not allowed") || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v)", err, ctx.Err())
	}
}

// A task whose result upload gave up (the API server answered 503 for
// every try: a store down for longer) runs again by itself after
// RerunDelay, without being pushed again: the coordinator pushes a task
// once, so without the rerun it stayed assigned here with nobody working
// on it (the e2e Weaviate-outage test saw it). A cancellation while it
// waits ends it.
func TestExecutorRerunsATaskWhoseUploadGaveUp(t *testing.T) {
	coord := startCoordinator(t, "a")
	api := startAPI(t)
	api.put("ns", "c1", 1, "some text")
	ex := startExecutor(t, Config{ID: "exec-1", APIServer: api.URL, Concurrency: 1, HeartbeatInterval: time.Hour,
		HTTPAttempts: 2, HTTPBackoff: time.Millisecond, RerunDelay: 20 * time.Millisecond, Extractors: Builtins()},
		dialCoordinators(t, coord))
	s := coord.nextStream(t)

	// Two runs give up (2 tries each), the third gets through.
	api.scriptUpload("t-outage", 503, 503, 503, 503)
	// Every run of t-gone is answered 503 until the coordinator cancels it.
	api.scriptUpload("t-gone", 503, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503)
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{
		task("t-outage", extractors.AttributesName, "c1", 1, ""),
		task("t-gone", extractors.AttributesName, "c1", 1, ""),
	}})
	if u := api.waitUpload(t, "t-outage", 1); u.result.Outcome != wire.OutcomeSuccess {
		t.Fatalf("t-outage %+v", u.result)
	}
	if n := api.attemptsFor("t-outage"); n != 5 {
		t.Errorf("t-outage: %d upload tries, want 5 (two runs of 2 given up, then accepted)", n)
	}
	eventually(t, "t-gone given up at least once", func() bool { return api.attemptsFor("t-gone") >= 2 })
	s.push(t, &pb.HeartbeatResponse{CancelledTaskIds: []string{"t-gone"}})
	eventually(t, "nothing pending after the cancellation", func() bool { return ex.Pending() == 0 })
	n := api.attemptsFor("t-gone")
	// A rerun that was due is not run after the cancellation: one more
	// task pushed after it is handled, and t-gone's tries did not grow.
	api.put("ns", "c2", 1, "more")
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{task("t-mark", extractors.AttributesName, "c2", 1, "")}})
	api.waitUpload(t, "t-mark", 1)
	if got := api.attemptsFor("t-gone"); got > n+2 {
		t.Errorf("t-gone ran again after its cancellation: %d tries, %d at the cancellation", got, n)
	}
}
