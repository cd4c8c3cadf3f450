package state

// Task completion, version 2 (Command.complete_task_v2): the outcome, the
// features of the input content and the child content an executor produced
// are applied as one command under the executor fence, all or nothing. The
// API server used to check the fence with a read, create the children with
// a separate (unfenced) CreateContent and then complete the task: a stale
// executor could publish children between the check and the completion,
// and a finished task's result could be posted again, replacing real output
// with a new version. Here the FSM decides, in log order:
//
//   - the task must be unfinished and assigned to the reporting executor;
//   - or finished with the same result digest: a no-op success, so a retry
//     whose answer was lost is harmless;
//   - a finished task with a different result is ERROR_CODE_ALREADY_COMPLETED
//     and nothing is written.
//
// The old complete_task command keeps its exact behaviour (completeTask in
// ops_tasks.go), so logs written before this command existed replay as
// they did.

import (
	"crypto/sha256"
	"encoding/binary"
	"sort"
	"strconv"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// codeAlreadyCompleted: a finished task received a different result.
const codeAlreadyCompleted = pb.ErrorCode_ERROR_CODE_ALREADY_COMPLETED

// ResultDigest is the SHA-256 over everything an executor decides in a task
// result: outcome, error text, features of the input content and, per child
// (in order), its id, hash, size, mime type, labels and features. Storage
// URLs are excluded: a retried upload stores the same bytes under a new key.
// The encoding is length-prefixed and hand-written (not protobuf) so the
// digest of a stored task never changes with a library upgrade.
func ResultDigest(taskID string, c *pb.CompleteTaskCmd) []byte {
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	put := func(s string) {
		n := binary.PutUvarint(buf[:], uint64(len(s)))
		h.Write(buf[:n])
		h.Write([]byte(s))
	}
	features := func(fs []*pb.Feature, defaultPolicy string) {
		put(strconv.Itoa(len(fs)))
		for _, f := range fs {
			pol := f.GetPolicy()
			if pol == "" {
				pol = defaultPolicy
			}
			put(f.GetName())
			put(pol)
			put(strconv.FormatBool(f.GetEmbedding()))
			put(f.GetValueJson())
		}
	}
	put("indexify.result.v1")
	put(c.GetOutcome().String())
	put(c.GetError())
	features(c.GetFeatures(), "")
	put(strconv.Itoa(len(c.GetChildren())))
	for i, ch := range c.GetChildren() {
		id := ch.GetId()
		if id == "" {
			id = ChildContentID(taskID, i)
		}
		put(id)
		put(ch.GetHash())
		put(strconv.FormatUint(ch.GetSizeBytes(), 10))
		put(ch.GetMimeType())
		keys := make([]string, 0, len(ch.GetLabels()))
		for k := range ch.GetLabels() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		put(strconv.Itoa(len(keys)))
		for _, k := range keys {
			put(k)
			put(ch.GetLabels()[k])
		}
		features(ch.GetFeatures(), "")
	}
	return h.Sum(nil)
}

// completeTaskV2 reports noop when the command repeated the accepted result.
func (o *opCtx) completeTaskV2(c *pb.CompleteTaskCmd) (refs []*pb.ContentRef, noop bool, err *Error) {
	d := o.d
	t := d.tasks[c.GetTaskId()]
	if t == nil {
		return nil, false, Errorf(codeNotFound, "task %q not found", c.GetTaskId())
	}
	if c.Outcome != pb.TaskOutcome_TASK_OUTCOME_SUCCESS && c.Outcome != pb.TaskOutcome_TASK_OUTCOME_FAILED {
		return nil, false, Errorf(codeInvalid, "task outcome must be SUCCESS or FAILED")
	}
	digest := ResultDigest(t.Id, c)
	if !unfinished(t) {
		if len(t.ResultDigest) > 0 && string(t.ResultDigest) == string(digest) && t.ExecutorId == c.ExecutorId {
			// The same result again (a retry whose answer was lost).
			refs = make([]*pb.ContentRef, 0, len(c.Children))
			for i := range c.Children {
				id := ChildContentID(t.Id, i)
				ref := &pb.ContentRef{Id: id}
				if cur := d.latest(t.Namespace, id); cur != nil {
					ref.Version = cur.Version
				}
				refs = append(refs, ref)
			}
			return refs, true, nil
		}
		return nil, false, Errorf(codeAlreadyCompleted, "task %q already completed (%s) with a different result", t.Id, t.Outcome)
	}
	if t.ExecutorId == "" || t.ExecutorId != c.ExecutorId {
		return nil, false, Errorf(codeConflict, "task %q is assigned to executor %q, not %q", t.Id, t.ExecutorId, c.ExecutorId)
	}
	if err := validFeatures(c.Features); err != nil {
		return nil, false, err
	}
	children, err, ruled := o.taskChildren(t, c)
	if err != nil && ruled {
		// A result the rules refuse (bad labels, too many children, too
		// deep) fails this attempt with the reason instead of leaving the
		// task assigned forever: the executor's answer is final for it.
		failed := &pb.CompleteTaskCmd{TaskId: c.TaskId, ExecutorId: c.ExecutorId, Outcome: pb.TaskOutcome_TASK_OUTCOME_FAILED,
			Error: "result refused: " + err.Msg, MaxAttempts: c.MaxAttempts, BackoffMs: c.BackoffMs}
		o.recordOutcome(t, failed, digest)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	// Everything is validated: from here on nothing can fail.
	refs = make([]*pb.ContentRef, 0, len(children))
	for _, ch := range children {
		refs = append(refs, o.putNewContent(ch))
	}
	// A failure with retries left goes back to pending without a digest:
	// the next attempt reports afresh.
	o.recordOutcome(t, c, digest)
	return refs, false, nil
}

// taskChildren validates the children of a result and builds the content
// entries to store. The FSM owns every field that says where the content
// comes from (namespace, parent, root, name, source, graph, source task,
// creation time): only bytes metadata, labels and features come from the
// executor, so a result cannot place content anywhere but under its task.
//
// ruled reports a refusal by the bounded rules (labels, lineage depth,
// children per content): the executor's output broke a rule, which fails
// the attempt; any other error is a malformed command, refused.
func (o *opCtx) taskChildren(t *pb.Task, c *pb.CompleteTaskCmd) (_ []*pb.Content, _ *Error, ruled bool) {
	if len(c.Children) == 0 {
		return nil, nil, false
	}
	if c.Outcome != pb.TaskOutcome_TASK_OUTCOME_SUCCESS {
		return nil, Errorf(codeInvalid, "a failed task has no child content"), false
	}
	d := o.d
	ns := t.Namespace
	if err := o.requireNamespace(ns); err != nil {
		return nil, err, false
	}
	if d.graphs[ns][t.GraphName] == nil {
		return nil, Errorf(codeNotFound, "extraction graph %q not found in namespace %q", t.GraphName, ns), false
	}
	if p := d.latest(ns, t.ContentId); p == nil || p.Tombstoned {
		return nil, Errorf(codeNotFound, "parent content %q not found", t.ContentId), false
	}
	out := make([]*pb.Content, 0, len(c.Children))
	for i, in := range c.Children {
		if in == nil {
			return nil, Errorf(codeInvalid, "child %d: empty content entry", i), false
		}
		id := ChildContentID(t.Id, i)
		if in.Id != "" && in.Id != id {
			return nil, Errorf(codeInvalid, "child %d of task %q must have id %q, not %q", i, t.Id, id, in.Id), false
		}
		if in.Hash == "" || in.StorageUrl == "" {
			return nil, Errorf(codeInvalid, "child %d: hash and storage_url are required", i), false
		}
		if err := validLabels(in.Labels, o.rules); err != nil {
			return nil, Errorf(codeInvalid, "content %q: %v", id, err), o.rules >= RulesBounded
		}
		if err := validFeatures(in.Features); err != nil {
			return nil, err, false
		}
		fs := make([]*pb.Feature, 0, len(in.Features))
		for _, f := range in.Features {
			nf := &pb.Feature{Name: f.Name, Policy: f.Policy, Embedding: f.Embedding, ValueJson: f.ValueJson}
			if nf.Policy == "" {
				nf.Policy = t.PolicyName
			}
			fs = append(fs, nf)
		}
		if len(fs) == 0 {
			fs = nil
		}
		out = append(out, &pb.Content{
			Id:           id,
			Namespace:    ns,
			ParentId:     t.ContentId,
			Name:         id,
			MimeType:     in.MimeType,
			Labels:       in.Labels,
			StorageUrl:   in.StorageUrl,
			Source:       t.PolicyName,
			SizeBytes:    in.SizeBytes,
			Hash:         in.Hash,
			GraphNames:   []string{t.GraphName},
			SourceTaskId: t.Id,
			Features:     fs,
		})
	}
	if o.rules >= RulesBounded {
		if err := o.checkLineage(out); err != nil {
			return nil, err, true
		}
	}
	return out, nil, false
}
