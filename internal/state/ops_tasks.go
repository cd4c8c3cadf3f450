package state

// Executor, scheduler, task completion and node operations.

import (
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func (o *opCtx) registerExecutor(c *pb.RegisterExecutorCmd) *Error {
	e := c.GetExecutor()
	if e == nil || e.Id == "" {
		return Errorf(codeInvalid, "executor id is empty")
	}
	names := map[string]bool{}
	for _, x := range e.Extractors {
		if x == nil {
			return Errorf(codeInvalid, "executor %q: empty extractor", e.Id)
		}
		if err := ValidExtractorName(x.Name); err != nil {
			return Errorf(codeInvalid, "executor %q extractor: %v", e.Id, err)
		}
		if names[x.Name] {
			return Errorf(codeInvalid, "executor %q lists extractor %q twice", e.Id, x.Name)
		}
		names[x.Name] = true
		if x.InputParamsSchemaJson != "" {
			if _, err := o.f.schemas.get(x.InputParamsSchemaJson); err != nil {
				return Errorf(codeInvalid, "extractor %q: input params schema: %v", x.Name, err)
			}
		}
	}
	d := o.d
	ne := proto.Clone(e).(*pb.Executor)
	ne.LastSeen = o.ts
	prev := d.executors[e.Id]
	if prev != nil {
		ne.RegisteredAt = prev.RegisteredAt
	} else {
		ne.RegisteredAt = o.ts
	}
	d.executors[e.Id] = ne
	d.rebuildExtractors()
	if prev == nil {
		d.addChange(pb.ChangeType_CHANGE_TYPE_EXECUTOR_ADDED, "", e.Id, "", o.ts)
	}
	return nil
}

func (o *opCtx) heartbeat(c *pb.ExecutorHeartbeatCmd) *Error {
	for _, id := range c.GetExecutorIds() {
		if e := o.d.executors[id]; e != nil && e.LastSeen != o.ts {
			ne := proto.Clone(e).(*pb.Executor)
			ne.LastSeen = o.ts
			o.d.executors[id] = ne
		}
	}
	return nil
}

func (o *opCtx) removeExecutor(c *pb.RemoveExecutorCmd) *Error {
	d := o.d
	id := c.GetExecutorId()
	if d.executors[id] == nil {
		return nil
	}
	delete(d.executors, id)
	d.rebuildExtractors()
	var tids []string
	for tid := range d.tasksByExec[id] {
		tids = append(tids, tid)
	}
	sort.Strings(tids)
	for _, tid := range tids {
		o.assign(d.tasks[tid], "")
	}
	d.addChange(pb.ChangeType_CHANGE_TYPE_EXECUTOR_REMOVED, "", id, c.GetReason(), o.ts)
	return nil
}

// assign points an unfinished task at an executor ("" = back to pending) and
// records the log index as the assignment's fencing token.
func (o *opCtx) assign(t *pb.Task, executor string) {
	nt := cloneTask(t)
	nt.ExecutorId = executor
	nt.AssignedIndex = o.index
	o.d.putTask(nt)
}

func (o *opCtx) schedulerUpdate(c *pb.SchedulerUpdateCmd) *Error {
	d := o.d
	for _, id := range c.GetProcessedChangeIds() {
		d.markProcessed(id)
	}
	for _, in := range c.GetNewTasks() {
		if in == nil || in.Id == "" || d.tasks[in.Id] != nil {
			continue
		}
		// A shallow copy: the command's nested content is replaced by the
		// stored version just below, so deep-copying it first (proto.Clone)
		// was a second copy of every task's content per replica, thrown
		// away at once (7% of each node's CPU in the sched bench).
		t := cloneTask(in)
		// Fields this binary does not know are not kept (proto.Clone kept
		// them, but a snapshot restore dropped them again: a replica that
		// applied the entry and one restored past it differed).
		t.ResultDigest = slices.Clone(in.ResultDigest)
		if t.CreatedAt == 0 {
			t.CreatedAt = o.ts
		}
		if t.ExecutorId != "" && d.executors[t.ExecutorId] == nil {
			t.ExecutorId = ""
		}
		if t.ExecutorId != "" {
			t.AssignedIndex = o.index
		}
		// Share the stored content message instead of keeping a second copy
		// per task: it is the same (immutable) version the task runs on.
		if v := d.version(t.Namespace, t.ContentId, t.ContentVersion); v != nil {
			t.Content = v
		} else if in.Content != nil {
			t.Content = proto.Clone(in.Content).(*pb.Content) // never alias the command
		}
		internTask(t)
		d.putTask(t)
	}
	for _, a := range c.GetAssignments() {
		t := d.tasks[a.GetTaskId()]
		if t == nil || !unfinished(t) || t.ExecutorId == a.ExecutorId {
			continue
		}
		if a.ExecutorId != "" && d.executors[a.ExecutorId] == nil {
			continue // the executor left while the scheduler planned
		}
		o.assign(t, a.ExecutorId)
	}
	seen := map[string]bool{}
	for _, ref := range c.GetTombstoneContentIds() {
		ns, id, v, err := ParseVersionRef(ref)
		if err != nil {
			continue
		}
		o.tombstoneVersion(ns, id, v, seen)
	}
	for _, in := range c.GetNewGcTasks() {
		if in == nil || in.Id == "" || d.gcTasks[in.Id] != nil {
			continue
		}
		g := proto.Clone(in).(*pb.GCTask)
		if g.CreatedAt == 0 {
			g.CreatedAt = o.ts
		}
		d.gcTasks[g.Id] = g
	}
	return nil
}

// maxBackoffMs caps retry delays (one day) so the shift cannot overflow.
const maxBackoffMs = int64(24 * 60 * 60 * 1000)

func retryDelay(base int64, attempts uint32) int64 {
	if base <= 0 {
		return 0
	}
	delay := base
	for i := uint32(0); i < attempts && delay < maxBackoffMs; i++ {
		delay *= 2
	}
	if delay > maxBackoffMs {
		delay = maxBackoffMs
	}
	return delay
}

func (o *opCtx) completeTask(c *pb.CompleteTaskCmd) *Error {
	d := o.d
	t := d.tasks[c.GetTaskId()]
	if t == nil {
		return Errorf(codeNotFound, "task %q not found", c.GetTaskId())
	}
	if c.Outcome != pb.TaskOutcome_TASK_OUTCOME_SUCCESS && c.Outcome != pb.TaskOutcome_TASK_OUTCOME_FAILED {
		return Errorf(codeInvalid, "task outcome must be SUCCESS or FAILED")
	}
	if !unfinished(t) {
		if t.Outcome == c.Outcome {
			return nil // a retried report of the same result
		}
		return Errorf(codeConflict, "task %q already finished as %s", t.Id, t.Outcome)
	}
	if t.ExecutorId == "" || t.ExecutorId != c.ExecutorId {
		return Errorf(codeConflict, "task %q is assigned to executor %q, not %q", t.Id, t.ExecutorId, c.ExecutorId)
	}
	if len(c.Children) > 0 {
		// Never written by any proposer: children came with complete_task_v2.
		return Errorf(codeInvalid, "complete_task carries no children; use complete_task_v2")
	}
	if err := validFeatures(c.Features); err != nil {
		return err
	}
	o.recordOutcome(t, c, nil)
	return nil
}

// recordOutcome applies a validated completion to an unfinished task: a
// failure with budget left goes back to pending with backoff; a final
// outcome is recorded (with digest, if given) and, on success, the features
// and the policy completion time are added to the task's input content.
func (o *opCtx) recordOutcome(t *pb.Task, c *pb.CompleteTaskCmd, digest []byte) {
	d := o.d
	nt := cloneTask(t)
	nt.Attempts++
	if c.Outcome == pb.TaskOutcome_TASK_OUTCOME_FAILED {
		nt.LastError = c.Error
		if nt.Attempts < c.MaxAttempts {
			// Retry later: back to pending with exponential backoff.
			nt.ExecutorId = ""
			nt.NotBefore = o.ts + retryDelay(c.BackoffMs, t.Attempts)
			d.putTask(nt)
			return
		}
		nt.Outcome = pb.TaskOutcome_TASK_OUTCOME_FAILED
	} else {
		nt.Outcome = pb.TaskOutcome_TASK_OUTCOME_SUCCESS
		nt.LastError = ""
		if v := d.version(t.Namespace, t.ContentId, t.ContentVersion); v != nil {
			nc := proto.Clone(v).(*pb.Content)
			for _, f := range c.Features {
				nf := proto.Clone(f).(*pb.Feature)
				if nf.Policy == "" {
					nf.Policy = t.PolicyName
				}
				nc.Features = append(nc.Features, nf)
			}
			if nc.PolicyCompletionTimes == nil {
				nc.PolicyCompletionTimes = map[string]int64{}
			}
			nc.PolicyCompletionTimes[t.PolicyName] = o.ts
			d.replaceContent(nc)
			if nt.Content == v {
				// Keep sharing one message per version instead of pinning
				// the superseded copy in memory for every finished task.
				nt.Content = nc
			}
		}
	}
	nt.CompletedAt = o.ts
	nt.ResultDigest = digest
	d.putTask(nt)
	d.addChange(pb.ChangeType_CHANGE_TYPE_TASK_COMPLETED, t.Namespace, t.Id, nt.Outcome.String(), o.ts)
}

func (o *opCtx) upsertNode(c *pb.UpsertNodeCmd) *Error {
	n := c.GetNode()
	if n == nil || n.Id == "" {
		return Errorf(codeInvalid, "node id is empty")
	}
	o.d.nodes[n.Id] = proto.Clone(n).(*pb.NodeInfo)
	return nil
}

func (o *opCtx) removeNode(c *pb.RemoveNodeCmd) *Error {
	delete(o.d.nodes, c.GetId())
	return nil
}
