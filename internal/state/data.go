package state

// The store's data and the write helpers that keep every index consistent.
// All functions in this file run with Store.mu held for writing (or on a
// private *data during Restore), so they need no locking of their own.

import (
	"cmp"
	"slices"
	"sort"
	"unique"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// ckey identifies a content id (all its versions) inside a namespace.
type ckey struct{ ns, id string }

// offsetRef remembers at which change offset a content version appeared, so
// ContentSince can scan in offset order without sorting the whole namespace.
// Entries whose content was replaced or purged are skipped on read and
// dropped when the slice is compacted.
type offsetRef struct {
	offset uint64
	id     string
}

// polKey identifies a policy for analytics counters.
type polKey struct{ ns, graph, policy string }

// taskStats are the per-policy analytics counters.
type taskStats struct{ pending, success, failure uint64 }

// data is everything the FSM replicates plus derived indexes. Restore builds
// a fresh *data and swaps it in, so readers never see a half-restored store.
type data struct {
	applied   uint64 // last applied Raft index
	changeSeq uint64 // last StateChange id handed out
	offsetSeq uint64 // last Content.change_offset handed out

	namespaces map[string]*pb.Namespace
	graphs     map[string]map[string]*pb.ExtractionGraph // ns -> name -> graph
	links      map[string][]*pb.GraphLink                // ns -> links (few)
	executors  map[string]*pb.Executor
	nodes      map[string]*pb.NodeInfo
	gcTasks    map[string]*pb.GCTask

	// content holds the latest version per id; superseded versions that are
	// not yet purged live in old (rare, so they cost nothing per item).
	content  map[string]map[string]*pb.Content // ns -> id -> latest version
	old      map[ckey][]*pb.Content            // ascending versions, excluding latest
	children map[ckey][]string                 // parent -> child ids (latest parent_id)
	offsets  map[string][]offsetRef            // ns -> ascending offsets

	tasks          map[string]*pb.Task
	tasksByContent map[ckey][]string              // (ns, content id) -> task ids
	tasksByExec    map[string]map[string]struct{} // executor -> unfinished task ids
	pendingIdx     pendingIndex                   // unfinished and unassigned, per extractor in TaskOrder (pending.go)
	stats          map[polKey]*taskStats

	// Only unprocessed changes are kept: processed ones are never read again,
	// and keeping them would grow memory with every write. Ids are handed
	// out in ascending order, so the queue is a slice in id order (a map
	// beside an order slice cost four hash operations per change, with
	// 200,000 changes in a burst; see changeQueue).
	changes        changeQueue
	changedContent map[ckey]int

	requests     map[string]*pb.CommandResult
	requestOrder []string // FIFO of remembered request ids

	extractors map[string]*pb.ExtractorDescription // derived from executors

	// Task writes of the batch being applied, for the store's observers
	// (observe.go); recorded only when there are observers. Not state:
	// never in a snapshot, never read by a command.
	recordTasks bool
	taskChanges []TaskChange
}

func newData() *data {
	return &data{
		namespaces:     map[string]*pb.Namespace{},
		graphs:         map[string]map[string]*pb.ExtractionGraph{},
		links:          map[string][]*pb.GraphLink{},
		executors:      map[string]*pb.Executor{},
		nodes:          map[string]*pb.NodeInfo{},
		gcTasks:        map[string]*pb.GCTask{},
		content:        map[string]map[string]*pb.Content{},
		old:            map[ckey][]*pb.Content{},
		children:       map[ckey][]string{},
		offsets:        map[string][]offsetRef{},
		tasks:          map[string]*pb.Task{},
		tasksByContent: map[ckey][]string{},
		tasksByExec:    map[string]map[string]struct{}{},
		pendingIdx:     pendingIndex{},
		stats:          map[polKey]*taskStats{},
		changedContent: map[ckey]int{},
		requests:       map[string]*pb.CommandResult{},
		extractors:     map[string]*pb.ExtractorDescription{},
	}
}

// ---------------------------------------------------------------------------
// content

func (d *data) latest(ns, id string) *pb.Content {
	return d.content[ns][id]
}

// version finds one version of a content id, latest or superseded.
func (d *data) version(ns, id string, v uint64) *pb.Content {
	if c := d.content[ns][id]; c != nil && c.Version == v {
		return c
	}
	for _, c := range d.old[ckey{ns, id}] {
		if c.Version == v {
			return c
		}
	}
	return nil
}

// maxVersion is the highest version still stored for an id (0 = none).
func (d *data) maxVersion(ns, id string) uint64 {
	var m uint64
	if c := d.content[ns][id]; c != nil {
		m = c.Version
	}
	for _, c := range d.old[ckey{ns, id}] {
		if c.Version > m {
			m = c.Version
		}
	}
	return m
}

// allVersions returns every stored version of an id, ascending.
func (d *data) allVersions(ns, id string) []*pb.Content {
	olds := d.old[ckey{ns, id}]
	out := make([]*pb.Content, 0, len(olds)+1)
	out = append(out, olds...)
	if c := d.content[ns][id]; c != nil {
		out = append(out, c)
	}
	return out
}

// maxStored is the highest stored version of an id (nil = none). Its
// parent_id is the one the children index records for the id.
func (d *data) maxStored(ns, id string) *pb.Content {
	if c := d.content[ns][id]; c != nil {
		return c
	}
	if olds := d.old[ckey{ns, id}]; len(olds) > 0 {
		return olds[len(olds)-1]
	}
	return nil
}

// addLatest stores c (Latest=true, a version above every stored one) as the
// new latest version. demoted, if non-nil, is the previous latest re-issued
// with Latest=false and moves to the superseded versions.
func (d *data) addLatest(c, demoted *pb.Content) {
	ns, id := c.Namespace, c.Id
	k := ckey{ns, id}
	prev := d.maxStored(ns, id)
	if demoted != nil {
		d.old[k] = append(append([]*pb.Content(nil), d.old[k]...), demoted)
	}
	m := d.content[ns]
	if m == nil {
		m = map[string]*pb.Content{}
		d.content[ns] = m
	}
	m[id] = c
	d.relinkParent(ns, id, prev, c)
	d.offsets[ns] = append(d.offsets[ns], offsetRef{c.ChangeOffset, id})
}

// relinkParent keeps the children index pointing from the parent of the
// highest stored version to the id, after that version changed from before
// to after (either may be nil).
func (d *data) relinkParent(ns, id string, before, after *pb.Content) {
	bp, ap := "", ""
	if before != nil {
		bp = before.ParentId
	}
	if after != nil {
		ap = after.ParentId
	}
	if before != nil && after != nil && bp == ap {
		return
	}
	if bp != "" {
		d.removeChild(ckey{ns, bp}, id)
	}
	if ap != "" {
		pk := ckey{ns, ap}
		d.children[pk] = append(d.children[pk], id)
	}
}

// replaceContent swaps the stored message of c's version for c (labels,
// features, tombstone updates). It reports false if the version is gone.
func (d *data) replaceContent(c *pb.Content) bool {
	if cur := d.content[c.Namespace][c.Id]; cur != nil && cur.Version == c.Version {
		d.content[c.Namespace][c.Id] = c
		return true
	}
	k := ckey{c.Namespace, c.Id}
	olds := d.old[k]
	for i, o := range olds {
		if o.Version == c.Version {
			nw := append([]*pb.Content(nil), olds...)
			nw[i] = c
			d.old[k] = nw
			return true
		}
	}
	return false
}

// purgeVersion removes one stored version (and the terminal tasks that ran
// on it) so garbage-collected content stops costing memory.
func (d *data) purgeVersion(ns, id string, v uint64) bool {
	k := ckey{ns, id}
	before := d.maxStored(ns, id)
	removed := false
	if c := d.content[ns][id]; c != nil && c.Version == v {
		delete(d.content[ns], id)
		if len(d.content[ns]) == 0 {
			delete(d.content, ns)
		}
		removed = true
	} else {
		olds := d.old[k]
		for i, o := range olds {
			if o.Version == v {
				nw := append(append([]*pb.Content(nil), olds[:i]...), olds[i+1:]...)
				if len(nw) == 0 {
					delete(d.old, k)
				} else {
					d.old[k] = nw
				}
				removed = true
				break
			}
		}
	}
	if !removed {
		return false
	}
	d.relinkParent(ns, id, before, d.maxStored(ns, id))
	// Terminal tasks of that version go too; unfinished ones stay visible
	// so nobody loses track of running work.
	var keep []string
	for _, tid := range d.tasksByContent[k] {
		t := d.tasks[tid]
		if t == nil {
			continue
		}
		if t.ContentVersion == v && !unfinished(t) {
			d.deleteTask(t)
			continue
		}
		keep = append(keep, tid)
	}
	if len(keep) == 0 {
		delete(d.tasksByContent, k)
	} else {
		d.tasksByContent[k] = keep
	}
	d.maybeCompactOffsets(ns)
	return true
}

func (d *data) removeChild(pk ckey, id string) {
	kids := d.children[pk]
	for i, k := range kids {
		if k == id {
			nw := append(append([]string(nil), kids[:i]...), kids[i+1:]...)
			if len(nw) == 0 {
				delete(d.children, pk)
			} else {
				d.children[pk] = nw
			}
			return
		}
	}
}

// maybeCompactOffsets drops stale offset refs once they dominate, keeping the
// index proportional to live content.
func (d *data) maybeCompactOffsets(ns string) {
	refs := d.offsets[ns]
	if len(refs) < 1024 || len(refs) < 2*len(d.content[ns]) {
		return
	}
	d.rebuildOffsets(ns)
}

func (d *data) rebuildOffsets(ns string) {
	m := d.content[ns]
	refs := make([]offsetRef, 0, len(m))
	for id, c := range m {
		refs = append(refs, offsetRef{c.ChangeOffset, id})
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].offset < refs[j].offset })
	if len(refs) == 0 {
		delete(d.offsets, ns)
		return
	}
	d.offsets[ns] = refs
}

// ---------------------------------------------------------------------------
// tasks

func unfinished(t *pb.Task) bool { return t.Outcome == pb.TaskOutcome_TASK_OUTCOME_UNKNOWN }

func (d *data) statsFor(t *pb.Task) *taskStats {
	k := polKey{t.Namespace, t.GraphName, t.PolicyName}
	s := d.stats[k]
	if s == nil {
		s = &taskStats{}
		d.stats[k] = s
	}
	return s
}

func (d *data) countTask(t *pb.Task, delta int) {
	s := d.statsFor(t)
	var p *uint64
	switch t.Outcome {
	case pb.TaskOutcome_TASK_OUTCOME_SUCCESS:
		p = &s.success
	case pb.TaskOutcome_TASK_OUTCOME_FAILED:
		p = &s.failure
	default:
		p = &s.pending
	}
	if delta > 0 {
		*p++
	} else {
		*p--
	}
	if s.pending == 0 && s.success == 0 && s.failure == 0 {
		delete(d.stats, polKey{t.Namespace, t.GraphName, t.PolicyName})
	}
}

// unindexTask removes t's contribution to the status indexes.
func (d *data) unindexTask(t *pb.Task) {
	d.countTask(t, -1)
	if unfinished(t) {
		if t.ExecutorId == "" {
			d.pendingIdx.remove(t)
		} else if set := d.tasksByExec[t.ExecutorId]; set != nil {
			delete(set, t.Id)
			if len(set) == 0 {
				delete(d.tasksByExec, t.ExecutorId)
			}
		}
	}
}

func (d *data) indexTask(t *pb.Task) {
	d.countTask(t, +1)
	if unfinished(t) {
		if t.ExecutorId == "" {
			d.pendingIdx.add(t)
		} else {
			set := d.tasksByExec[t.ExecutorId]
			if set == nil {
				set = map[string]struct{}{}
				d.tasksByExec[t.ExecutorId] = set
			}
			set[t.Id] = struct{}{}
		}
	}
}

// putTask inserts or replaces a task (a new message; the old one stays
// untouched for readers that hold it).
func (d *data) putTask(t *pb.Task) {
	prev := d.tasks[t.Id]
	d.recordTask(prev, t)
	if prev != nil {
		d.unindexTask(prev)
	} else {
		k := ckey{t.Namespace, t.ContentId}
		d.tasksByContent[k] = append(d.tasksByContent[k], t.Id)
	}
	d.tasks[t.Id] = t
	d.indexTask(t)
}

// deleteTask removes a task from the task map and status indexes; the caller
// fixes tasksByContent.
func (d *data) deleteTask(t *pb.Task) {
	d.recordTask(t, nil)
	d.unindexTask(t)
	delete(d.tasks, t.Id)
}

// ---------------------------------------------------------------------------
// state changes

// IsContentChange reports whether a state change asks the scheduler to look
// at one content item (ObjectId) again: new content, changed labels, or an
// existing item added to another graph. It is the one rule behind both the
// scheduler's planning and Store.ContentDone ("is this content done?").
func IsContentChange(t pb.ChangeType) bool {
	return t == pb.ChangeType_CHANGE_TYPE_NEW_CONTENT || t == pb.ChangeType_CHANGE_TYPE_CONTENT_UPDATED ||
		t == pb.ChangeType_CHANGE_TYPE_ADD_GRAPH_TO_CONTENT
}

func (d *data) addChange(typ pb.ChangeType, ns, object, detail string, ts int64) {
	d.changeSeq++
	c := &pb.StateChange{Id: d.changeSeq, ObjectId: object, Type: typ, CreatedAt: ts, Namespace: ns, Detail: detail}
	d.insertChange(c)
}

func (d *data) insertChange(c *pb.StateChange) {
	d.changes.insert(c)
	if IsContentChange(c.Type) {
		d.changedContent[ckey{c.Namespace, c.ObjectId}]++
	}
}

func (d *data) markProcessed(id uint64) {
	c := d.changes.remove(id)
	if c == nil {
		return
	}
	if IsContentChange(c.Type) {
		k := ckey{c.Namespace, c.ObjectId}
		if d.changedContent[k] <= 1 {
			delete(d.changedContent, k)
		} else {
			d.changedContent[k]--
		}
	}
}

// changeQueue holds the unprocessed state changes in ascending id order.
// A processed change leaves a hole (c == nil) until the slice is compacted.
type changeQueue struct {
	list []queuedChange
	// head: list[:head] are all processed. The scheduler processes changes
	// oldest first, so processed ids pile up at the front: the head moves
	// past them (each once) and readers start there, instead of stepping
	// over every processed id on every pass until the next compaction
	// (with 200,000 changes queued, that was 40% of a scheduler pass).
	head int
	live int // entries with c != nil
}

type queuedChange struct {
	id uint64
	c  *pb.StateChange // nil once processed
}

func (q *changeQueue) len() int { return q.live }

// insert adds c. Ids arrive ascending (addChange, and a snapshot lists its
// changes in id order); an id out of order is placed by binary search, and
// one already queued is replaced.
func (q *changeQueue) insert(c *pb.StateChange) {
	if n := len(q.list); n == 0 || q.list[n-1].id < c.Id {
		q.list = append(q.list, queuedChange{c.Id, c})
		q.live++
		return
	}
	i, found := q.find(c.Id)
	if found {
		if q.list[i].c == nil {
			q.live++
		}
		q.list[i].c = c
	} else {
		q.list = slices.Insert(q.list, i, queuedChange{c.Id, c})
		q.live++
	}
	q.head = min(q.head, i)
}

// find returns the position of id in the list, or where it would go.
func (q *changeQueue) find(id uint64) (int, bool) {
	if q.head < len(q.list) && q.list[q.head].id == id {
		return q.head, true // the common case: the oldest unprocessed change
	}
	return slices.BinarySearchFunc(q.list, id, func(e queuedChange, id uint64) int { return cmp.Compare(e.id, id) })
}

// remove marks change id processed and returns it (nil if it was not
// queued).
func (q *changeQueue) remove(id uint64) *pb.StateChange {
	i, ok := q.find(id)
	if !ok || q.list[i].c == nil {
		return nil
	}
	c := q.list[i].c
	q.list[i].c = nil
	q.live--
	for q.head < len(q.list) && q.list[q.head].c == nil {
		q.head++
	}
	// Compact once the list is mostly holes.
	if len(q.list) > 64 && len(q.list) > 2*q.live {
		nw := make([]queuedChange, 0, q.live)
		for _, e := range q.list[q.head:] {
			if e.c != nil {
				nw = append(nw, e)
			}
		}
		q.list, q.head = nw, 0
	}
	return c
}

// each calls fn on the unprocessed changes in id order until it returns
// false.
func (q *changeQueue) each(fn func(*pb.StateChange) bool) {
	for _, e := range q.list[q.head:] {
		if e.c != nil && !fn(e.c) {
			return
		}
	}
}

// ---------------------------------------------------------------------------
// executors and request ids

// rebuildExtractors recomputes the extractor union. When executors disagree
// about one extractor's description, the one of the smallest executor id
// wins, so every replica picks the same.
func (d *data) rebuildExtractors() {
	ids := make([]string, 0, len(d.executors))
	for id := range d.executors {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	m := map[string]*pb.ExtractorDescription{}
	for _, id := range ids {
		for _, x := range d.executors[id].Extractors {
			if _, ok := m[x.Name]; !ok {
				m[x.Name] = x
			}
		}
	}
	d.extractors = m
}

// maxRequestIDs bounds the request-id memory (FIFO eviction).
const maxRequestIDs = 65536

func (d *data) rememberRequest(id string, r *pb.CommandResult) {
	if _, ok := d.requests[id]; ok {
		return
	}
	d.requests[id] = r
	d.requestOrder = append(d.requestOrder, id)
	for len(d.requestOrder) > maxRequestIDs {
		delete(d.requests, d.requestOrder[0])
		d.requestOrder = d.requestOrder[1:]
	}
}

// cloneTask copies a task for modification but keeps sharing its (immutable)
// content message: a deep copy on every status change would duplicate the
// content metadata per task. TestCloneTaskCopiesEveryField guards against
// fields added to the proto later.
func cloneTask(t *pb.Task) *pb.Task {
	return &pb.Task{
		Id: t.Id, Extractor: t.Extractor, PolicyName: t.PolicyName, GraphName: t.GraphName,
		Namespace: t.Namespace, ContentId: t.ContentId, ContentVersion: t.ContentVersion,
		Content: t.Content, InputParamsJson: t.InputParamsJson, Outcome: t.Outcome,
		CreatedAt: t.CreatedAt, Attempts: t.Attempts, NotBefore: t.NotBefore,
		ExecutorId: t.ExecutorId, LastError: t.LastError, CompletedAt: t.CompletedAt,
		AssignedIndex: t.AssignedIndex, ResultDigest: t.ResultDigest,
	}
}

// intern returns the canonical copy of a low-cardinality string (namespace,
// graph, policy, extractor, mime type, source...). Decoded commands carry
// fresh copies of these per item; with a million items the duplicates would
// cost tens of megabytes.
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

func internContent(c *pb.Content) {
	c.Namespace = intern(c.Namespace)
	c.MimeType = intern(c.MimeType)
	c.Source = intern(c.Source)
	for i, g := range c.GraphNames {
		c.GraphNames[i] = intern(g)
	}
}

// internTask interns a task's shared strings; content, when it is the stored
// version, also lends its id string.
func internTask(t *pb.Task) {
	t.Namespace = intern(t.Namespace)
	t.GraphName = intern(t.GraphName)
	t.PolicyName = intern(t.PolicyName)
	t.Extractor = intern(t.Extractor)
	t.InputParamsJson = intern(t.InputParamsJson)
	if t.Content != nil && t.Content.Id == t.ContentId {
		t.ContentId = t.Content.Id
	}
}
