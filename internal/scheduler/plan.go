package scheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/indexify-go/indexify/internal/labels"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// GCTaskID is the deterministic id of the blob deletion for one content
// version, so the same version is never queued twice under different ids.
func GCTaskID(namespace, contentID string, version uint64) string {
	return hashID(fmt.Sprintf("gc/%s/%s/%d", namespace, contentID, version))
}

func hashID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:24]
}

// Plan processes up to cfg.BatchChanges unprocessed state changes (in id
// order) and allocates pending tasks whose backoff expired at now. It returns
// one command carrying every decision, or nil when there is nothing to do.
// Plan only reads the store; calling it twice on the same state yields equal
// commands.
//
// A namespace with cfg.MaxUnfinishedTasks unfinished tasks gets no new
// ones: its content changes stay unprocessed (so its content is not done
// yet) and are planned, in order, as its tasks finish; other namespaces'
// changes are planned past them. One content change may take a namespace
// over the bound by the tasks it makes (its policies and links).
func Plan(s *state.Store, now time.Time, cfg Config) *pb.SchedulerUpdateCmd {
	return plan(s, now, cfg, nil)
}

// plan is Plan, or PlanAhead when a is not nil.
func plan(s *state.Store, now time.Time, cfg Config, a *ahead) *pb.SchedulerUpdateCmd {
	cfg = cfg.withDefaults()
	p := &planner{
		s:           s,
		nowMs:       now.UnixMilli(),
		cmd:         &pb.SchedulerUpdateCmd{SchedulerNode: cfg.NodeID, Term: cfg.Term},
		newTasks:    map[string]*pb.Task{},
		byContent:   map[string][]*pb.Task{},
		gcIDs:       map[string]bool{},
		tombstoned:  map[string]bool{},
		filterCache: map[string]filterEntry{},
		unplanned:   map[string]int{},
		inBatch:     map[string]int{},
		budget:      map[string]int{},
		maxTasks:    cfg.MaxUnfinishedTasks,
		ahead:       a,
	}
	unfinished := s.UnfinishedTasksByNamespace()
	if a != nil {
		for ns, n := range a.perNS {
			unfinished[ns] += n
		}
		for ref := range a.tombstoned {
			p.tombstoned[ref] = true
		}
	}
	deferred := map[string]bool{}
	for ns, n := range unfinished {
		p.budget[ns] = cfg.MaxUnfinishedTasks - n
		if n >= cfg.MaxUnfinishedTasks {
			deferred[ns] = true
		}
	}
	var changes []*pb.StateChange
	if a == nil {
		changes = s.UnprocessedChangesExcept(cfg.BatchChanges, deferred)
	} else {
		// The in-flight passes' changes come first in id order; read past
		// them, and stop at the first change that cannot be planned ahead.
		for _, ch := range s.UnprocessedChangesExcept(cfg.BatchChanges+len(a.processed), deferred) {
			if a.processed[ch.GetId()] {
				continue
			}
			if len(changes) == cfg.BatchChanges || !p.safeAhead(ch) {
				break
			}
			changes = append(changes, ch)
		}
	}
	for _, ch := range changes {
		if state.IsContentChange(ch.GetType()) {
			p.unplanned[ch.GetNamespace()+"/"+ch.GetObjectId()]++
			p.inBatch[ch.GetNamespace()+"/"+ch.GetObjectId()]++
		}
	}
	for _, ch := range changes {
		if state.IsContentChange(ch.GetType()) {
			if p.budgetLeft(ch.GetNamespace()) <= 0 {
				continue // held back: stays unprocessed (and unplanned)
			}
			p.unplanned[ch.GetNamespace()+"/"+ch.GetObjectId()]--
		}
		p.process(ch)
		p.cmd.ProcessedChangeIds = append(p.cmd.ProcessedChangeIds, ch.GetId())
	}
	p.allocate()
	c := p.cmd
	if len(c.ProcessedChangeIds) == 0 && len(c.NewTasks) == 0 && len(c.Assignments) == 0 &&
		len(c.NewGcTasks) == 0 && len(c.TombstoneContentIds) == 0 {
		return nil
	}
	return c
}

// planner holds one pass's decisions; decisions made earlier in the pass are
// visible to later changes of the same pass through these overlays, because
// the store only sees them once the command is applied.
type planner struct {
	s     *state.Store
	nowMs int64
	cmd   *pb.SchedulerUpdateCmd
	// unplanned counts, per "ns/content_id", the content changes of this
	// batch not processed yet (or held back): such content may still get
	// tasks. inBatch counts all of this batch's content changes, so that
	// changes outside the batch are told apart (tasksDone).
	unplanned map[string]int
	inBatch   map[string]int
	// budget is, per namespace with unfinished or new tasks, how many more
	// tasks this pass may create (maxTasks minus unfinished minus new).
	budget   map[string]int
	maxTasks int

	newTasks    map[string]*pb.Task   // by task id
	byContent   map[string][]*pb.Task // new tasks by "ns/content_id"
	gcIDs       map[string]bool
	tombstoned  map[string]bool // state.VersionRef
	filterCache map[string]filterEntry
	// ahead is the in-flight passes' decisions (PlanAhead); nil for Plan.
	ahead *ahead
}

// budgetLeft is how many more tasks this pass may create in namespace ns.
func (p *planner) budgetLeft(ns string) int {
	if b, ok := p.budget[ns]; ok {
		return b
	}
	return p.maxTasks
}

type filterEntry struct {
	f   labels.Filter
	err error
}

func (p *planner) process(ch *pb.StateChange) {
	switch ch.GetType() {
	case pb.ChangeType_CHANGE_TYPE_NEW_CONTENT, pb.ChangeType_CHANGE_TYPE_CONTENT_UPDATED:
		p.planContent(ch.GetNamespace(), ch.GetObjectId(), "")
	case pb.ChangeType_CHANGE_TYPE_ADD_GRAPH_TO_CONTENT:
		p.planContent(ch.GetNamespace(), ch.GetObjectId(), ch.GetDetail())
	case pb.ChangeType_CHANGE_TYPE_TASK_COMPLETED:
		if t, ok := p.s.Task(ch.GetObjectId()); ok {
			root := t.GetContent().GetRootContentId()
			if root == "" {
				root = t.GetContentId()
			}
			p.maybeSupersede(t.GetNamespace(), root)
		}
	case pb.ChangeType_CHANGE_TYPE_TOMBSTONE_CONTENT_TREE:
		p.collectDeleted(ch.GetNamespace(), ch.GetObjectId())
	default:
		// EXECUTOR_ADDED/REMOVED and EXTRACTION_GRAPH_DELETED need no
		// per-change work: allocation below runs on every pass anyway.
	}
}

// planContent creates the tasks the latest live version of a content id
// needs. onlyGraph restricts planning to one graph ("" = all its graphs).
func (p *planner) planContent(ns, id, onlyGraph string) {
	c, ok := p.s.Content(ns, id)
	if !ok || c.GetTombstoned() {
		return
	}
	graphs := c.GetGraphNames()
	if onlyGraph != "" {
		graphs = []string{onlyGraph}
	}
	visited := map[string]bool{}
	for _, g := range graphs {
		if visited[g] {
			continue
		}
		visited[g] = true
		if graph, ok := p.s.Graph(ns, g); ok {
			for _, pol := range graph.GetPolicies() {
				if sourceMatches(pol.GetContentSource(), c.GetSource()) {
					p.consider(g, pol, c)
				}
			}
		}
		p.followLinks(ns, g, c.GetSource(), c, visited)
	}
	// Content that got no task (a new version no policy matches, or a leaf
	// of the tree) has no completion that would trigger supersession, so
	// check right away.
	root := c.GetRootContentId()
	if isRoot(c) {
		root = c.GetId()
	}
	p.maybeSupersede(ns, root)
}

// followLinks feeds c to the root policies of every graph linked from graph g
// for c's source. Content fed to a linked graph counts as that graph's
// ingested content, so links are followed transitively (cycles are rejected
// when links are created; visited guards anyway).
func (p *planner) followLinks(ns, g, source string, c *pb.Content, visited map[string]bool) {
	for _, l := range p.s.Links(ns, g) {
		if l.GetGraphName() != g || !sourceMatches(l.GetContentSource(), source) {
			continue
		}
		target := l.GetLinkedGraphName()
		if visited[target] {
			continue
		}
		visited[target] = true
		if graph, ok := p.s.Graph(ns, target); ok {
			for _, pol := range graph.GetPolicies() {
				if pol.GetContentSource() == "" {
					p.consider(target, pol, c)
				}
			}
		}
		p.followLinks(ns, target, state.SourceIngestion, c, visited)
	}
}

// sourceMatches reports whether a policy (or link) reading from want accepts
// content produced by source.
func sourceMatches(want, source string) bool {
	if want == "" {
		return source == state.SourceIngestion || source == ""
	}
	return want == source
}

func isRoot(c *pb.Content) bool {
	return c.GetRootContentId() == "" || c.GetRootContentId() == c.GetId()
}

// consider creates the task of policy pol (in graph) for content c when the
// label filter and the extractor's mime types accept c and the task does not
// exist yet.
func (p *planner) consider(graph string, pol *pb.ExtractionPolicy, c *pb.Content) {
	ns := c.GetNamespace()
	id := state.TaskID(ns, graph, pol.GetName(), c.GetId(), c.GetVersion())
	if _, ok := p.newTasks[id]; ok {
		return
	}
	if p.ahead != nil && p.ahead.tasks[id] {
		return
	}
	if _, ok := p.s.Task(id); ok {
		return
	}
	if !p.filterMatches(ns, graph, pol, c.GetLabels()) {
		return
	}
	// An extractor no executor currently offers has no known mime types;
	// the task is still created so it runs once such an executor registers.
	if ex, ok := p.s.Extractor(pol.GetExtractor()); ok && !MimeAccepted(ex.GetInputMimeTypes(), c.GetMimeType()) {
		return
	}
	// The task goes into the log without its content: the FSM links every
	// new task to the stored version it names (ContentVersion), which
	// exists when the entry applies: this pass reads it as the latest live
	// version, and only the acknowledgement of a GC task can purge it,
	// which a later pass has to propose first (a pass of this loop, which
	// waits for this entry, or of a later leader, whose entries come after
	// it in the log). Carrying a copy made every scheduler entry
	// about 2.5 times larger, for every replica to write, send, decode and
	// throw away.
	t := &pb.Task{
		Id:              id,
		Extractor:       pol.GetExtractor(),
		PolicyName:      pol.GetName(),
		GraphName:       graph,
		Namespace:       ns,
		ContentId:       c.GetId(),
		ContentVersion:  c.GetVersion(),
		InputParamsJson: pol.GetInputParamsJson(),
		CreatedAt:       p.nowMs,
	}
	p.newTasks[id] = t
	p.budget[ns] = p.budgetLeft(ns) - 1
	key := ns + "/" + c.GetId()
	p.byContent[key] = append(p.byContent[key], t)
	p.cmd.NewTasks = append(p.cmd.NewTasks, t)
}

// filterMatches evaluates the policy's label filter (parsed once per pass).
// A filter that does not parse (validation should have rejected it) matches
// nothing rather than everything, so a bad filter never floods executors.
// Stored filters passed the FSM's rules of their time, so only the syntax
// is required (a filter stored before out-of-range numbers were refused
// keeps working as it did).
func (p *planner) filterMatches(ns, graph string, pol *pb.ExtractionPolicy, lbls map[string]string) bool {
	key := ns + "/" + graph + "/" + pol.GetName()
	e, ok := p.filterCache[key]
	if !ok {
		e.f, e.err = labels.ParseSyntax(pol.GetFilter())
		p.filterCache[key] = e
	}
	return e.err == nil && e.f.Match(lbls)
}

// MimeAccepted reports whether an extractor accepting accepted takes content
// of type mime. An empty list or "*/*" accepts everything, "type/*" a whole
// top-level type; parameters such as "; charset=utf-8" are ignored.
func MimeAccepted(accepted []string, mime string) bool {
	if len(accepted) == 0 {
		return true
	}
	m := baseMime(mime)
	for _, a := range accepted {
		a = baseMime(a)
		switch {
		case a == "*/*" || a == "*":
			return true
		case strings.HasSuffix(a, "/*"):
			if strings.HasPrefix(m, a[:len(a)-1]) {
				return true
			}
		case a == m:
			return true
		}
	}
	return false
}

func baseMime(s string) string {
	if i := strings.IndexByte(s, ';'); i >= 0 {
		s = s[:i]
	}
	return strings.ToLower(strings.TrimSpace(s))
}

// allocate assigns pending tasks (stored ones whose backoff expired, then
// this pass's new ones) to executors.
func (p *planner) allocate() {
	executors := p.s.Executors()
	if len(executors) == 0 {
		return
	}
	load := p.s.UnfinishedTaskCounts()
	if p.ahead != nil {
		for e, n := range p.ahead.perExec {
			load[e] += n
		}
	}
	// room: per extractor, how many more tasks the executors offering it
	// can take (state.AllPending when one of them has no cap). Allocate
	// gives an extractor's tasks, oldest first, to its executors until they
	// are full, so the oldest room[x] pending tasks of x are all it could
	// assign: only those are read, and the rest of the backlog is not
	// copied at all.
	room := map[string]int{}
	for _, e := range executors {
		n, limit := load[e.GetId()], int(e.GetMaxPendingTasks())
		if limit != 0 && n >= limit {
			continue
		}
		seen := map[string]bool{}
		for _, d := range e.GetExtractors() {
			x := d.GetName()
			if seen[x] {
				continue // listed twice: still one executor
			}
			seen[x] = true
			if limit == 0 || room[x] > state.AllPending-(limit-n) {
				room[x] = state.AllPending
			} else {
				room[x] += limit - n
			}
		}
	}
	if len(room) == 0 {
		return // every executor is full: skip reading the pending set
	}
	tasks := p.s.PendingTasksFor(p.nowMs, room)
	if p.ahead != nil && len(p.ahead.assigned) > 0 {
		tasks = slices.DeleteFunc(tasks, func(t *pb.Task) bool { return p.ahead.assigned[t.GetId()] })
	}
	// PendingTasksFor is oldest first, so a backlog drains in arrival
	// order; this pass's tasks are the newest.
	for _, t := range p.cmd.NewTasks {
		if room[t.GetExtractor()] > 0 {
			tasks = append(tasks, t)
		}
	}
	p.cmd.Assignments = foldNewTasks(Allocate(tasks, executors, load), p.newTasks)
}

// foldNewTasks moves the assignments of tasks created in this pass into the
// new tasks themselves (Task.executor_id): the FSM then stores each new task
// once, already assigned (assigned_index = the entry's index), instead of
// storing it pending and assigning it in the same entry, which wrote,
// indexed and told the push streams about every new task twice. The state
// after the entry is the same either way. The assignments left are of tasks
// already stored, in their order; AllAssignments gives the whole decision.
func foldNewTasks(as []*pb.Assignment, created map[string]*pb.Task) []*pb.Assignment {
	kept := as[:0]
	for _, a := range as {
		if t := created[a.GetTaskId()]; t != nil {
			t.ExecutorId = a.GetExecutorId()
			continue
		}
		kept = append(kept, a)
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// AllAssignments is every assignment a pass decided, in allocation order:
// the stored tasks' assignments, then this pass's new tasks that were
// created assigned (Allocate puts new tasks after the pending ones).
func AllAssignments(cmd *pb.SchedulerUpdateCmd) []*pb.Assignment {
	out := slices.Clone(cmd.GetAssignments())
	for _, t := range cmd.GetNewTasks() {
		if t.GetExecutorId() != "" {
			out = append(out, &pb.Assignment{TaskId: t.GetId(), ExecutorId: t.GetExecutorId()})
		}
	}
	return out
}
