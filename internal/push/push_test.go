package push

// The push streams over a real gRPC transport (in memory) against a real
// store and FSM. Only the Raft layer is replaced: commands are applied to
// the FSM in the order they arrive, and the read barrier's answer is
// controlled by the test.

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// localLog applies commands straight to an FSM (a one-node log).
type localLog struct {
	mu  sync.Mutex
	fsm *state.FSM
	idx uint64

	failHeartbeats atomic.Bool // ExecutorHeartbeatCmd cannot commit
	barrierFails   atomic.Bool
	barriersFailed atomic.Int64
	barriersOK     atomic.Int64
}

func (l *localLog) Apply(_ context.Context, cmd *pb.Command) (*pb.CommandResult, error) {
	if cmd.GetExecutorHeartbeat() != nil && l.failHeartbeats.Load() {
		return nil, errors.New("no leader")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.idx++
	if cmd.Timestamp == 0 {
		cmd.Timestamp = time.Now().UnixMilli()
	}
	if cmd.Rules == 0 {
		cmd.Rules = state.CurrentRules
	}
	return l.fsm.ApplyCommand(l.idx, cmd), nil
}

func (l *localLog) ReadBarrier(context.Context, pb.ReadConsistency) error {
	if l.barrierFails.Load() {
		l.barriersFailed.Add(1)
		return errors.New("no leader")
	}
	l.barriersOK.Add(1)
	return nil
}

// server is the Heartbeat endpoint as the coordinator serves it: register,
// then push. Every response sent records how many barriers had succeeded.
type server struct {
	pb.UnimplementedCoordinatorServiceServer
	hub *Hub
	log *localLog

	mu     sync.Mutex
	okAtTx []int64
}

type recordingStream struct {
	pb.CoordinatorService_HeartbeatServer
	s *server
}

func (r recordingStream) Send(resp *pb.HeartbeatResponse) error {
	r.s.mu.Lock()
	r.s.okAtTx = append(r.s.okAtTx, r.s.log.barriersOK.Load())
	r.s.mu.Unlock()
	return r.CoordinatorService_HeartbeatServer.Send(resp)
}

func (s *server) Heartbeat(stream pb.CoordinatorService_HeartbeatServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	res, err := s.log.Apply(stream.Context(), &pb.Command{Op: &pb.Command_RegisterExecutor{
		RegisterExecutor: &pb.RegisterExecutorCmd{Executor: first.GetExecutor()}}})
	if err := errors.Join(err, state.ResultError(res)); err != nil {
		return err
	}
	return s.hub.Serve(recordingStream{stream, s}, first.GetExecutor().GetId())
}

type fixture struct {
	t     *testing.T
	log   *localLog
	store *state.Store
	hub   *Hub
	srv   *server
	cl    pb.CoordinatorServiceClient

	mu       sync.Mutex
	detached []string // "id grace" / "id nograce"
	graces   chan string
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	store := state.NewStore()
	log := &localLog{fsm: state.NewFSM(store, nil)}
	f := &fixture{t: t, log: log, store: store, graces: make(chan string, 16)}
	f.hub = New(store, log, cfg, nil)
	f.hub.detached = func(id string, grace bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if grace {
			f.detached = append(f.detached, id+" grace")
		} else {
			f.detached = append(f.detached, id+" nograce")
		}
	}
	f.hub.afterGrace = func(id string, removed bool) {
		if removed {
			f.graces <- id + " removed"
		} else {
			f.graces <- id + " kept"
		}
	}
	f.srv = &server{hub: f.hub, log: log}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	pb.RegisterCoordinatorServiceServer(gs, f.srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.cl = pb.NewCoordinatorServiceClient(conn)
	return f
}

// connect opens an executor stream and waits until the hub holds n streams
// of that executor.
func (f *fixture) connect(ctx context.Context, id string, n int) pb.CoordinatorService_HeartbeatClient {
	f.t.Helper()
	st, err := f.cl.Heartbeat(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	reg := &pb.Executor{Id: id, Extractors: []*pb.ExtractorDescription{{Name: "x/noop"}}}
	if err := st.Send(&pb.HeartbeatRequest{ExecutorId: id, Executor: reg}); err != nil {
		f.t.Fatal(err)
	}
	f.eventually("stream attached", func() error {
		f.hub.mu.Lock()
		defer f.hub.mu.Unlock()
		if len(f.hub.conns[id]) < n {
			return errors.New("not yet")
		}
		return nil
	})
	return st
}

func (f *fixture) eventually(what string, cond func() error) {
	f.t.Helper()
	if err := retry.PollFor(10*time.Second, 5*time.Millisecond, cond); err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
}

func (f *fixture) apply(cmd *pb.Command) {
	f.t.Helper()
	res, err := f.log.Apply(context.Background(), cmd)
	if err := errors.Join(err, state.ResultError(res)); err != nil {
		f.t.Fatal(err)
	}
}

// newTasks creates tasks (id, created_at) assigned to executor, in one command.
func (f *fixture) newTasks(executor string, tasks map[string]int64) {
	f.t.Helper()
	var ts []*pb.Task
	for id, at := range tasks {
		ts = append(ts, &pb.Task{Id: id, Namespace: "ns", ContentId: "c-" + id, Extractor: "x/noop",
			GraphName: "g", PolicyName: "p", CreatedAt: at, ExecutorId: executor})
	}
	f.apply(&pb.Command{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{NewTasks: ts}}})
}

func (f *fixture) assign(task, executor string) {
	f.t.Helper()
	f.apply(&pb.Command{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{
		Assignments: []*pb.Assignment{{TaskId: task, ExecutorId: executor}}}}})
}

func recv(t *testing.T, st pb.CoordinatorService_HeartbeatClient) *pb.HeartbeatResponse {
	t.Helper()
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return resp
}

func ids(ts []*pb.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.GetId())
	}
	return out
}

func TestPushesABatchOldestFirst(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := f.connect(ctx, "e1", 1)
	f.newTasks("e1", map[string]int64{"t-c": 3000, "t-a": 1000, "t-b": 2000, "t-a2": 1000})
	got := ids(recv(t, st).GetTasks())
	if want := []string{"t-a", "t-a2", "t-b", "t-c"}; !slices.Equal(got, want) {
		t.Fatalf("pushed %v, want %v (created_at, then id)", got, want)
	}
}

func TestNewStreamGetsTasksAssignedBefore(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.apply(&pb.Command{Op: &pb.Command_RegisterExecutor{RegisterExecutor: &pb.RegisterExecutorCmd{
		Executor: &pb.Executor{Id: "e1"}}}})
	f.newTasks("e1", map[string]int64{"t-2": 2000, "t-1": 1000})
	st := f.connect(ctx, "e1", 1)
	if got, want := ids(recv(t, st).GetTasks()), []string{"t-1", "t-2"}; !slices.Equal(got, want) {
		t.Fatalf("pushed %v, want %v", got, want)
	}
}

func TestReassignmentCancelsAndReturnPushesAgain(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := f.connect(ctx, "ea", 1)
	b := f.connect(ctx, "eb", 1)
	f.newTasks("ea", map[string]int64{"t1": 1000})
	if got := ids(recv(t, a).GetTasks()); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("ea got %v", got)
	}
	f.assign("t1", "eb")
	if got := recv(t, a).GetCancelledTaskIds(); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("ea cancellations %v, want [t1]", got)
	}
	if got := ids(recv(t, b).GetTasks()); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("eb got %v", got)
	}
	f.assign("t1", "ea") // back, under a new assignment index: pushed again
	if got := ids(recv(t, a).GetTasks()); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("ea got %v after the task came back", got)
	}
}

func TestFinishedTaskIsNotCancelled(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := f.connect(ctx, "e1", 1)
	f.newTasks("e1", map[string]int64{"t1": 1000})
	recv(t, st)
	f.apply(&pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTaskCmd{
		TaskId: "t1", ExecutorId: "e1", Outcome: pb.TaskOutcome_TASK_OUTCOME_SUCCESS}}})
	f.newTasks("e1", map[string]int64{"t2": 2000})
	resp := recv(t, st)
	if len(resp.GetCancelledTaskIds()) != 0 || !slices.Equal(ids(resp.GetTasks()), []string{"t2"}) {
		t.Fatalf("after t1 finished: %v cancelled %v, want just task t2", ids(resp.GetTasks()), resp.GetCancelledTaskIds())
	}
}

func TestNewAssignmentsWaitForTheBarrier(t *testing.T) {
	f := newFixture(t, Config{HeartbeatFlush: 40 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := f.connect(ctx, "e1", 1)
	f.log.barrierFails.Store(true)
	f.newTasks("e1", map[string]int64{"t1": 1000})
	// Held back across retries while no barrier succeeds...
	f.eventually("barrier retried", func() error {
		if f.log.barriersFailed.Load() < 3 {
			return errors.New("fewer than 3 failed barriers")
		}
		return nil
	})
	f.log.barrierFails.Store(false)
	// ...then pushed by a retry, with no new command applied.
	if got := ids(recv(t, st).GetTasks()); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("got %v", got)
	}
	f.srv.mu.Lock()
	defer f.srv.mu.Unlock()
	if len(f.srv.okAtTx) != 1 || f.srv.okAtTx[0] == 0 {
		t.Fatalf("barriers succeeded before each send: %v; want one send after a successful barrier", f.srv.okAtTx)
	}
}

func TestKickWhenHeartbeatsCannotCommit(t *testing.T) {
	f := newFixture(t, Config{HeartbeatFlush: 20 * time.Millisecond, DisconnectGrace: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go f.hub.Run(ctx)
	st := f.connect(ctx, "e1", 1)
	f.log.failHeartbeats.Store(true)
	// The executor keeps talking; the node just cannot commit.
	go func() {
		tick := time.NewTicker(5 * time.Millisecond) // the executor's send interval
		defer tick.Stop()
		for st.Send(&pb.HeartbeatRequest{ExecutorId: "e1"}) == nil {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	_, err := st.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("stream ended with %v, want Unavailable (reconnect elsewhere)", err)
	}
	f.eventually("stream detached", func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.detached) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.detached, []string{"e1 nograce"}) {
		t.Fatalf("detached %v: a kicked executor must not be removed (it is alive)", f.detached)
	}
	if _, ok := f.store.Executor("e1"); !ok {
		t.Fatal("kicked executor was removed")
	}
}

func TestGracePeriodRemovesAnExecutorThatStaysAway(t *testing.T) {
	f := newFixture(t, Config{DisconnectGrace: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	st := f.connect(ctx, "e1", 1)
	st.CloseSend()
	cancel()
	if got := <-f.graces; got != "e1 removed" {
		t.Fatalf("grace ended with %q", got)
	}
	if _, ok := f.store.Executor("e1"); ok {
		t.Fatal("executor still registered after its grace period")
	}
}

func TestGracePeriodKeepsAReconnectedExecutor(t *testing.T) {
	f := newFixture(t, Config{DisconnectGrace: 20 * time.Millisecond})
	ctx1, cancel1 := context.WithTimeout(context.Background(), 30*time.Second)
	old := f.connect(ctx1, "e1", 1)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	st := f.connect(ctx2, "e1", 2) // the executor is back before the old stream ends
	old.CloseSend()
	cancel1()
	if got := <-f.graces; got != "e1 kept" {
		t.Fatalf("grace ended with %q", got)
	}
	if _, ok := f.store.Executor("e1"); !ok {
		t.Fatal("reconnected executor was removed")
	}
	// The new stream still gets its tasks.
	f.newTasks("e1", map[string]int64{"t1": 1000})
	if got := ids(recv(t, st).GetTasks()); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("got %v", got)
	}
}

func TestRestoreRereadsTheExecutorsTasks(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := f.connect(ctx, "e1", 1)

	// Another replica's state, where t1 is assigned to e1, arrives as a
	// snapshot: no task write is observed, only the reset.
	src := &localLog{fsm: state.NewFSM(state.NewStore(), nil)}
	for _, cmd := range []*pb.Command{
		{Op: &pb.Command_RegisterExecutor{RegisterExecutor: &pb.RegisterExecutorCmd{Executor: &pb.Executor{Id: "e1"}}}},
		{Op: &pb.Command_SchedulerUpdate{SchedulerUpdate: &pb.SchedulerUpdateCmd{NewTasks: []*pb.Task{
			{Id: "t1", Namespace: "ns", ContentId: "c", Extractor: "x/noop", ExecutorId: "e1"}}}}},
	} {
		if _, err := src.Apply(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	snaps := raft.NewInmemSnapshotStore()
	snap, err := src.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, src.fsm.Store().AppliedIndex(), 1, raft.Configuration{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	metas, _ := snaps.List()
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.log.fsm.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if got := ids(recv(t, st).GetTasks()); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("after restore got %v", got)
	}
}

// An executor the cluster removed while its stream stayed open (its
// registration committed just before the leader's removal for silence) is
// told to register again: heartbeats of an unknown executor change
// nothing, so it would stay connected and never get a task (test/k8s,
// every pod deleted). Reconnecting registers it, and it gets its tasks.
func TestRemovedExecutorIsToldToRegisterAgain(t *testing.T) {
	f := newFixture(t, Config{HeartbeatFlush: 20 * time.Millisecond, DisconnectGrace: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go f.hub.Run(ctx)
	st := f.connect(ctx, "e1", 1)
	f.apply(&pb.Command{Op: &pb.Command_RemoveExecutor{RemoveExecutor: &pb.RemoveExecutorCmd{
		ExecutorId: "e1", Reason: "no heartbeat for more than 15s"}}})
	_, err := st.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "register again") {
		t.Fatalf("stream of a removed executor ended with %v, want Unavailable asking it to register again", err)
	}
	again := f.connect(ctx, "e1", 1)
	if _, ok := f.store.Executor("e1"); !ok {
		t.Fatal("the executor is not registered after reconnecting")
	}
	f.newTasks("e1", map[string]int64{"t1": 1000})
	if got := ids(recv(t, again).GetTasks()); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("got %v", got)
	}
}
