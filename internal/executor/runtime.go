package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/retry"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// recentLimit bounds the memory of finished assignments kept for dedupe.
const recentLimit = 4096

// taskKey identifies one assignment of a task. Retries and reassignments of
// the same task id carry a new assigned_index (and attempts), so they are
// new work; the same key again is a duplicate push (e.g. after a reconnect).
type taskKey struct {
	id       string
	assigned uint64
	attempts uint32
}

func keyOf(t *pb.Task) taskKey {
	return taskKey{id: t.GetId(), assigned: t.GetAssignedIndex(), attempts: t.GetAttempts()}
}

type taskEntry struct {
	task      *pb.Task
	ctx       context.Context
	cancel    context.CancelFunc
	running   bool
	cancelled bool     // the coordinator took the task away: do not upload
	next      *pb.Task // a newer assignment that arrived while running
	// A run whose result never got through (the API server or a store
	// down longer than the upload's tries) waits here to run again: the
	// task is still assigned to us, and the coordinator pushes it only
	// once. gaveUp counts such runs (the wait doubles with each).
	later  *time.Timer
	gaveUp int
}

// maxRerunDelay caps the wait before a task whose result upload gave up
// runs again (Config.RerunDelay doubles up to it).
const maxRerunDelay = time.Minute

// Run registers with the coordinators and processes tasks until ctx is done.
// It reconnects with capped exponential backoff whenever the heartbeat
// stream breaks (node death, leader change, network); queued and running
// tasks carry on meanwhile. It returns nil after ctx is cancelled, once every
// worker stopped, or an error if the coordinator rejects the registration
// as invalid.
func (e *Executor) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return errors.New("executor: Run called twice")
	}
	e.running = true
	e.mu.Unlock()

	// Workers and tasks stop when Run ends, whatever the reason.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	e.log.Info("executor starting", "coordinators", e.cfg.Coordinators, "api_server", e.api,
		"extractors", len(e.reg.GetExtractors()), "concurrency", e.cfg.Concurrency)
	var wg sync.WaitGroup
	for range e.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.worker(ctx)
		}()
	}

	var fatal error
	backoff := e.cfg.ReconnectBackoff
	for ctx.Err() == nil {
		start := time.Now()
		err := e.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if status.Code(err) == codes.InvalidArgument {
			// The coordinator refuses our registration (bad id or
			// extractor description): retrying cannot help, and
			// exiting makes the misconfiguration visible.
			fatal = fmt.Errorf("executor: coordinator rejected the registration: %w", err)
			e.log.Error("registration rejected", "err", err)
			break
		}
		// A stream that stayed up for a while was healthy: start the
		// next reconnect from the shortest delay again.
		if time.Since(start) >= e.cfg.MaxReconnectBackoff {
			backoff = e.cfg.ReconnectBackoff
		}
		e.log.Warn("heartbeat stream ended; reconnecting", "err", err, "in", backoff)
		// Jitter spreads the reconnects of many executors after a
		// coordinator dies.
		delay := backoff/2 + rand.N(backoff/2+1)
		retry.Sleep(ctx, delay) // a cancelled ctx ends the loop at its top
		backoff = min(backoff*2, e.cfg.MaxReconnectBackoff)
	}

	stop()
	e.mu.Lock()
	for _, t := range e.tasks {
		t.cancel()
		if t.later != nil {
			t.later.Stop()
		}
	}
	e.mu.Unlock()
	wg.Wait()
	e.log.Info("executor stopped")
	return fatal
}

// session runs one heartbeat stream until it breaks or ctx ends.
func (e *Executor) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := e.client.Heartbeat(sctx)
	if err != nil {
		return err
	}
	// The first message carries the whole registration, so every
	// (re)connect re-registers: the coordinator may have removed us while
	// we were away.
	first := e.heartbeat()
	first.Executor = e.reg
	if err := stream.Send(first); err != nil {
		return recvErr(stream, err)
	}
	e.mu.Lock()
	e.stats.Connects++
	e.mu.Unlock()
	e.log.Info("heartbeat stream open")

	sendErr := make(chan error, 1)
	go func() {
		t := time.NewTicker(e.cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			if err := stream.Send(e.heartbeat()); err != nil {
				sendErr <- err
				cancel() // unblocks Recv below
				return
			}
		}
	}()
	for {
		resp, err := stream.Recv()
		if err != nil {
			select {
			case serr := <-sendErr:
				if !errors.Is(serr, io.EOF) {
					return serr
				}
			default:
			}
			if errors.Is(err, io.EOF) {
				return errors.New("coordinator closed the stream")
			}
			return err
		}
		e.handle(resp)
	}
}

// recvErr extracts the real error after a failed Send: gRPC reports io.EOF
// from Send and the status from Recv.
func recvErr(stream pb.CoordinatorService_HeartbeatClient, sendErr error) error {
	if errors.Is(sendErr, io.EOF) {
		if _, err := stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	return sendErr
}

func (e *Executor) heartbeat() *pb.HeartbeatRequest {
	return &pb.HeartbeatRequest{
		ExecutorId:      e.cfg.ID,
		PendingTasks:    uint32(e.Pending()),
		MaxPendingTasks: uint32(e.cfg.MaxPendingTasks),
	}
}

// handle applies one coordinator message: cancellations first, then new
// tasks.
func (e *Executor) handle(resp *pb.HeartbeatResponse) {
	for _, id := range resp.GetCancelledTaskIds() {
		e.cancelTask(id)
	}
	for _, t := range resp.GetTasks() {
		e.enqueue(t)
	}
}

// enqueue queues a task unless the same assignment is queued, running or
// recently finished. There is at most one entry per task id: a new
// assignment of a task that is still running (a retry pushed before our
// worker finished with the previous attempt, or a task given back to us
// while a cancelled run winds down) waits in that entry's next field.
func (e *Executor) enqueue(t *pb.Task) {
	if t.GetId() == "" {
		e.log.Warn("ignoring task without id")
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running {
		return
	}
	k := keyOf(t)
	if cur, ok := e.tasks[t.GetId()]; ok {
		if cur.later != nil {
			// Waiting to run again after a failed upload: a push (the
			// same assignment after a reconnect, or a newer one) runs
			// it now.
			cur.task = t
			e.requeue(cur)
			return
		}
		switch {
		case keyOf(cur.task) == k && !cur.cancelled:
			e.log.Debug("task already queued or running", "task", t.GetId())
		case !cur.running:
			cur.task = t // queued: run the newest assignment
		default:
			cur.next = t
		}
		return
	}
	if _, ok := e.recent[k]; ok {
		e.log.Debug("task assignment already finished", "task", t.GetId())
		return
	}
	e.push(t)
}

// push adds a new entry to the queue; e.mu must be held.
func (e *Executor) push(t *pb.Task) {
	ctx, cancel := context.WithCancel(context.Background())
	ent := &taskEntry{task: t, ctx: ctx, cancel: cancel}
	e.tasks[t.GetId()] = ent
	e.queue = append(e.queue, ent)
	e.log.Info("task received", "task", t.GetId(), "extractor", t.GetExtractor(), "content", t.GetContentId())
	e.signal()
}

// signal wakes one idle worker (non-blocking: a pending signal suffices).
func (e *Executor) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// cancelTask stops a task the coordinator took away from this executor.
func (e *Executor) cancelTask(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ent, ok := e.tasks[id]
	if !ok {
		return
	}
	e.log.Info("task cancelled by coordinator", "task", id, "running", ent.running)
	ent.cancelled = true
	ent.next = nil // the cancellation is newer than any push before it
	ent.cancel()
	if ent.later != nil {
		ent.later.Stop()
		ent.later = nil
	}
	if !ent.running {
		delete(e.tasks, id)
		for i, q := range e.queue {
			if q == ent {
				e.queue = append(e.queue[:i], e.queue[i+1:]...)
				break
			}
		}
		e.stats.Dropped++
	}
}

// next pops the oldest queued task, or returns nil when ctx ends.
func (e *Executor) next(ctx context.Context) *taskEntry {
	for {
		if ctx.Err() != nil {
			return nil
		}
		e.mu.Lock()
		if len(e.queue) > 0 {
			ent := e.queue[0]
			e.queue[0] = nil
			e.queue = e.queue[1:]
			ent.running = true
			if len(e.queue) > 0 {
				e.signal() // chain the wake-up to another idle worker
			}
			e.mu.Unlock()
			return ent
		}
		e.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-e.wake:
		}
	}
}

func (e *Executor) worker(ctx context.Context) {
	for {
		ent := e.next(ctx)
		if ent == nil {
			return
		}
		// The task also stops when the executor shuts down.
		stop := context.AfterFunc(ctx, ent.cancel)
		outcome := e.process(ent)
		stop()
		ent.cancel()
		e.finish(ent, outcome)
	}
}

// finish forgets a task and remembers its assignment as done when the
// coordinator has its result (or refused it for good), so a duplicate push
// is not run again. A task whose upload gave up is not remembered: it runs
// again after a wait (rerunLater), or at once when pushed again.
func (e *Executor) finish(ent *taskEntry, o finalOutcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	id := ent.task.GetId()
	if o == uploadGaveUp && ent.next == nil && !ent.cancelled && e.running {
		e.stats.Dropped++
		e.rerunLater(ent)
		return
	}
	delete(e.tasks, id)
	switch o {
	case uploadedSuccess:
		e.stats.Succeeded++
	case uploadedFailed:
		e.stats.Failed++
	default:
		e.stats.Dropped++
	}
	if o != uploadGaveUp && o != abandoned {
		e.remember(keyOf(ent.task))
	}
	if ent.next != nil {
		if _, done := e.recent[keyOf(ent.next)]; !done {
			e.push(ent.next)
		}
	}
}

// remember records a finished assignment; e.mu must be held.
func (e *Executor) remember(k taskKey) {
	if _, ok := e.recent[k]; ok {
		return
	}
	e.recent[k] = struct{}{}
	e.order = append(e.order, k)
	if len(e.order) > recentLimit {
		delete(e.recent, e.order[0])
		e.order[0] = taskKey{}
		e.order = e.order[1:]
	}
}

// rerunLater keeps a task whose result upload gave up and runs it again
// after a wait that doubles with each such run; e.mu must be held. Without
// it the task would stay assigned to this executor with nobody working on
// it: the coordinator pushes a task once, and a healthy heartbeat stream is
// never re-opened to push it again.
func (e *Executor) rerunLater(ent *taskEntry) {
	ent.running = false
	ent.gaveUp++
	delay := e.cfg.RerunDelay
	for i := 1; i < ent.gaveUp && delay < maxRerunDelay; i++ {
		delay *= 2
	}
	delay = min(delay, max(maxRerunDelay, e.cfg.RerunDelay))
	e.log.Warn("the task's result could not be delivered; running it again later",
		"task", ent.task.GetId(), "in", delay, "runs_given_up", ent.gaveUp)
	var timer *time.Timer
	timer = time.AfterFunc(delay, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if ent.later == timer && e.tasks[ent.task.GetId()] == ent {
			e.requeue(ent)
		}
	})
	ent.later = timer
}

// requeue puts a waiting entry back in the queue with a fresh context;
// e.mu must be held.
func (e *Executor) requeue(ent *taskEntry) {
	ent.later.Stop()
	ent.later = nil
	ent.ctx, ent.cancel = context.WithCancel(context.Background())
	e.queue = append(e.queue, ent)
	e.signal()
}
