package state

// Store readers. Writes happen only through the FSM (fsm.go, ops*.go), under
// the write lock; readers take the read lock and get shared, immutable
// messages (see api.go).

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/indexify-go/indexify/internal/labels"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Store is the in-memory, indexed coordinator state. Only the FSM writes it.
type Store struct {
	mu      sync.RWMutex
	d       *data
	watch   chan struct{}
	taskObs []TaskObserver // see observe.go
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{d: newData(), watch: make(chan struct{})} }

// AppliedIndex is the Raft index of the last command applied.
func (s *Store) AppliedIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.applied
}

// Watch returns a channel closed after the next command is applied (broadcast).
func (s *Store) Watch() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.watch
}

// notifyLocked tells the task observers what changed, then wakes every
// watcher; called with the write lock held.
func (s *Store) notifyLocked() {
	s.tellObserversLocked(false)
	close(s.watch)
	s.watch = make(chan struct{})
}

func (s *Store) Namespaces() []*pb.Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*pb.Namespace, 0, len(s.d.namespaces))
	for _, n := range s.d.namespaces {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Store) Namespace(name string) (*pb.Namespace, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.d.namespaces[name]
	return n, ok
}

func (s *Store) Graphs(ns string) []*pb.ExtractionGraph {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := s.d.graphs[ns]
	out := make([]*pb.ExtractionGraph, 0, len(m))
	for _, g := range m {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Store) Graph(ns, name string) (*pb.ExtractionGraph, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.d.graphs[ns][name]
	return g, ok
}

// Links returns the links whose source graph is graph ("" = all of ns).
func (s *Store) Links(ns, graph string) []*pb.GraphLink {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*pb.GraphLink
	for _, l := range s.d.links[ns] {
		if graph == "" || l.GraphName == graph {
			out = append(out, l)
		}
	}
	return out
}

// Extractors is the union of the extractors of registered executors, by name.
func (s *Store) Extractors() []*pb.ExtractorDescription {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*pb.ExtractorDescription, 0, len(s.d.extractors))
	for _, x := range s.d.extractors {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Store) Extractor(name string) (*pb.ExtractorDescription, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	x, ok := s.d.extractors[name]
	return x, ok
}

// ContentVersion returns one version of a content id, latest or
// superseded. A superseded version already purged from the store is still
// found while a task made for it holds its copy.
func (s *Store) ContentVersion(ns, id string, version uint64) (*pb.Content, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c := s.d.version(ns, id, version); c != nil {
		return c, true
	}
	for _, tid := range s.d.tasksByContent[ckey{ns, id}] {
		if t := s.d.tasks[tid]; t != nil && t.ContentVersion == version && t.Content != nil {
			return t.Content, true
		}
	}
	return nil, false
}

// Content returns the latest version of a content id (tombstoned included).
func (s *Store) Content(ns, id string) (*pb.Content, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := s.d.latest(ns, id)
	return c, c != nil
}

// ContentVersions returns every stored version of an id, ascending (latest
// last, superseded versions not yet garbage-collected before it).
func (s *Store) ContentVersions(ns, id string) []*pb.Content {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.allVersions(ns, id)
}

// ListContent returns the page and the total number matching (before paging).
//
// Only the cheap field filters run under the read lock; label matching
// (JSON decoding) and ordering run after it is released (messages are
// immutable), so a large listing does not stall the FSM's writes.
func (s *Store) ListContent(q ContentQuery) ([]*pb.Content, uint64, error) {
	f, err := labels.Parse(q.Labels)
	if err != nil {
		return nil, 0, Errorf(pb.ErrorCode_ERROR_CODE_INVALID, "labels filter: %v", err)
	}
	match := func(c *pb.Content) bool {
		return c != nil && (!c.Tombstoned || q.Tombstoned) &&
			(q.Graph == "" || contains(c.GraphNames, q.Graph)) &&
			(q.Source == "" || c.Source == q.Source) &&
			(q.ParentID == "" || c.ParentId == q.ParentID) &&
			(q.RootID == "" || c.RootContentId == q.RootID)
	}
	var all []*pb.Content
	s.mu.RLock()
	d := s.d
	if q.ParentID != "" && q.Namespace != "" {
		// The children index avoids a namespace scan for the common
		// "extracted from X" query.
		for _, id := range d.children[ckey{q.Namespace, q.ParentID}] {
			if c := d.latest(q.Namespace, id); match(c) {
				all = append(all, c)
			}
		}
	} else {
		for ns, m := range d.content {
			if q.Namespace != "" && ns != q.Namespace {
				continue
			}
			for _, c := range m {
				if match(c) {
					all = append(all, c)
				}
			}
		}
	}
	s.mu.RUnlock()
	if !f.Empty() {
		n := 0
		for _, c := range all {
			if f.Match(c.Labels) {
				all[n] = c
				n++
			}
		}
		all = all[:n]
	}
	page := pageOf(all, q.StartID, q.Limit, func(c *pb.Content) string { return c.Id },
		func(a, b *pb.Content) bool {
			if a.Id != b.Id {
				return a.Id < b.Id
			}
			return a.Namespace < b.Namespace
		})
	return page, uint64(len(all)), nil
}

// pageOf returns, in order, the first limit items (0 = all) whose key is
// after start. It selects with a bounded heap instead of sorting everything
// when the page is small compared with the matches.
func pageOf[T any](items []T, start string, limit int, key func(T) string, less func(a, b T) bool) []T {
	var cand []T
	if start == "" {
		cand = append([]T(nil), items...)
	} else {
		for _, it := range items {
			if key(it) > start {
				cand = append(cand, it)
			}
		}
	}
	if limit <= 0 || limit*8 >= len(cand) {
		sort.Slice(cand, func(i, j int) bool { return less(cand[i], cand[j]) })
		if limit > 0 && len(cand) > limit {
			cand = cand[:limit]
		}
		return cand
	}
	// Max-heap of the limit smallest items seen so far.
	h := make([]T, 0, limit)
	down := func(i int) {
		for {
			l, r, m := 2*i+1, 2*i+2, i
			if l < len(h) && less(h[m], h[l]) {
				m = l
			}
			if r < len(h) && less(h[m], h[r]) {
				m = r
			}
			if m == i {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for _, it := range cand {
		if len(h) < limit {
			h = append(h, it)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !less(h[p], h[i]) {
					break
				}
				h[i], h[p] = h[p], h[i]
				i = p
			}
			continue
		}
		if less(it, h[0]) {
			h[0] = it
			down(0)
		}
	}
	sort.Slice(h, func(i, j int) bool { return less(h[i], h[j]) })
	return h
}

// ContentTree returns the content and all its live descendants, parents first.
func (s *Store) ContentTree(ns, id string) []*pb.Content {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.liveTree(ns, id)
}

// liveTree walks the children index breadth first, children in id order.
func (d *data) liveTree(ns, id string) []*pb.Content {
	root := d.latest(ns, id)
	if root == nil || root.Tombstoned {
		return nil
	}
	out := []*pb.Content{root}
	seen := map[string]bool{id: true}
	for i := 0; i < len(out); i++ {
		kids := append([]string(nil), d.children[ckey{ns, out[i].Id}]...)
		sort.Strings(kids)
		for _, k := range kids {
			c := d.latest(ns, k)
			if c == nil || c.Tombstoned || seen[k] || c.ParentId != out[i].Id {
				continue
			}
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}

// ContentSince returns live content of ns created at change offsets > after,
// in offset order, that belongs to graph ("" = any) and came from policy ("" = any).
func (s *Store) ContentSince(ns, graph, policy string, after uint64, limit int) []*pb.Content {
	s.mu.RLock()
	defer s.mu.RUnlock()
	refs := s.d.offsets[ns]
	i := sort.Search(len(refs), func(i int) bool { return refs[i].offset > after })
	var out []*pb.Content
	for ; i < len(refs); i++ {
		c := s.d.latest(ns, refs[i].id)
		if c == nil || c.ChangeOffset != refs[i].offset || c.Tombstoned {
			continue // replaced by a newer version (seen at its own offset) or gone
		}
		if graph != "" && !contains(c.GraphNames, graph) {
			continue
		}
		if policy != "" && c.Source != policy {
			continue
		}
		out = append(out, c)
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out
}

// ContentDone reports whether every task of the content and of its
// descendants is terminal and no unprocessed change for them remains.
func (s *Store) ContentDone(ns, id string) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.d
	c := d.latest(ns, id)
	if c == nil {
		return false, Errorf(pb.ErrorCode_ERROR_CODE_NOT_FOUND, "content %s/%s not found", ns, id)
	}
	if c.Tombstoned {
		return true, nil // deleted content has no more work
	}
	for _, n := range d.liveTree(ns, id) {
		k := ckey{ns, n.Id}
		if d.changedContent[k] > 0 {
			return false, nil
		}
		for _, tid := range d.tasksByContent[k] {
			if t := d.tasks[tid]; t != nil && t.ContentVersion == n.Version && unfinished(t) {
				return false, nil
			}
		}
	}
	return true, nil
}

func (s *Store) Task(id string) (*pb.Task, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.d.tasks[id]
	return t, ok
}

func (s *Store) ListTasks(q TaskQuery) ([]*pb.Task, uint64) {
	match := func(t *pb.Task) bool {
		return t != nil &&
			(q.Namespace == "" || t.Namespace == q.Namespace) &&
			(q.Graph == "" || t.GraphName == q.Graph) &&
			(q.Policy == "" || t.PolicyName == q.Policy) &&
			(q.ContentID == "" || t.ContentId == q.ContentID)
	}
	var all []*pb.Task
	s.mu.RLock()
	d := s.d
	if q.ContentID != "" && q.Namespace != "" {
		for _, tid := range d.tasksByContent[ckey{q.Namespace, q.ContentID}] {
			if t := d.tasks[tid]; match(t) {
				all = append(all, t)
			}
		}
	} else {
		for _, t := range d.tasks {
			if match(t) {
				all = append(all, t)
			}
		}
	}
	s.mu.RUnlock()
	page := pageOf(all, q.StartID, q.Limit, func(t *pb.Task) string { return t.Id },
		func(a, b *pb.Task) bool { return a.Id < b.Id })
	return page, uint64(len(all))
}

// Analytics counts tasks per policy of the graph: pending = unfinished
// (assigned or not), success and failure = terminal outcomes.
func (s *Store) Analytics(ns, graph string) []*pb.PolicyAnalytics {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g := s.d.graphs[ns][graph]
	if g == nil {
		return nil
	}
	out := make([]*pb.PolicyAnalytics, 0, len(g.Policies))
	for _, p := range g.Policies {
		a := &pb.PolicyAnalytics{Policy: p.Name}
		if st := s.d.stats[polKey{ns, graph, p.Name}]; st != nil {
			a.Pending, a.Success, a.Failure = st.pending, st.success, st.failure
		}
		out = append(out, a)
	}
	return out
}

// DefaultMaxUnfinishedTasks is the default bound on a namespace's
// unfinished tasks (scheduler.Config.MaxUnfinishedTasks, and the
// coordinator's admission of uploads). Not an FSM rule: the leader's
// scheduler holds new tasks back and the coordinator refuses uploads while
// a namespace is at the bound, so a burst of uploads whose extraction fans
// out (a chunker making thousands of chunks, each with a task) cannot queue
// an unbounded number of tasks. Equal to MaxChildrenPerContent, so one
// content's whole fan-out fits.
const DefaultMaxUnfinishedTasks = MaxChildrenPerContent

// UnfinishedTasksByNamespace counts unfinished tasks (assigned or not) per
// namespace, from the per-policy counters the FSM keeps for Analytics.
func (s *Store) UnfinishedTasksByNamespace() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]int{}
	for k, st := range s.d.stats {
		if st.pending > 0 {
			out[k.ns] += int(st.pending)
		}
	}
	return out
}

// UnfinishedTasks counts the unfinished tasks of one namespace.
func (s *Store) UnfinishedTasks(ns string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for k, st := range s.d.stats {
		if k.ns == ns {
			n += int(st.pending)
		}
	}
	return n
}

// PendingContentChanges counts the unprocessed content changes of one
// content id (what keeps ContentDone false until the scheduler planned it).
func (s *Store) PendingContentChanges(ns, id string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.changedContent[ckey{ns, id}]
}

func sortTasks(ts []*pb.Task) { slices.SortFunc(ts, TaskOrder) }

// TaskOrder orders tasks oldest first (created_at, then id): the order of
// allocation and of pushes to an executor.
func TaskOrder(a, b *pb.Task) int {
	if c := cmp.Compare(a.CreatedAt, b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.Id, b.Id)
}

// TasksAssignedTo returns unfinished tasks assigned to an executor, oldest first.
func (s *Store) TasksAssignedTo(executorID string) []*pb.Task {
	s.mu.RLock()
	set := s.d.tasksByExec[executorID]
	out := make([]*pb.Task, 0, len(set))
	for id := range set {
		out = append(out, s.d.tasks[id])
	}
	s.mu.RUnlock()
	sortTasks(out)
	return out
}

// UnfinishedTaskCounts returns, per executor id, how many unfinished tasks
// are assigned to it (the scheduler's load measure), without copying tasks.
func (s *Store) UnfinishedTaskCounts() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]int, len(s.d.tasksByExec))
	for id, set := range s.d.tasksByExec {
		out[id] = len(set)
	}
	return out
}

func (s *Store) Executors() []*pb.Executor {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*pb.Executor, 0, len(s.d.executors))
	for _, e := range s.d.executors {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

func (s *Store) Executor(id string) (*pb.Executor, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.d.executors[id]
	return e, ok
}

// UnprocessedChanges returns the oldest unprocessed state changes, in id order.
func (s *Store) UnprocessedChanges(limit int) []*pb.StateChange {
	return s.UnprocessedChangesExcept(limit, nil)
}

// UnprocessedChangesExcept is UnprocessedChanges leaving out the content
// changes (IsContentChange) of the namespaces in deferred: the scheduler
// holds those back while a namespace is at its bound on unfinished tasks,
// and must still reach other namespaces' changes behind them.
func (s *Store) UnprocessedChangesExcept(limit int, deferred map[string]bool) []*pb.StateChange {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*pb.StateChange
	s.d.changes.each(func(c *pb.StateChange) bool {
		if len(deferred) > 0 && deferred[c.Namespace] && IsContentChange(c.Type) {
			return true
		}
		out = append(out, c)
		return limit <= 0 || len(out) < limit
	})
	return out
}

// GCTasks returns outstanding blob deletions, oldest first.
func (s *Store) GCTasks(limit int) []*pb.GCTask {
	s.mu.RLock()
	out := make([]*pb.GCTask, 0, len(s.d.gcTasks))
	for _, g := range s.d.gcTasks {
		out = append(out, g)
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt < out[j].CreatedAt
		}
		return out[i].Id < out[j].Id
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

func (s *Store) Nodes() []*pb.NodeInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*pb.NodeInfo, 0, len(s.d.nodes))
	for _, n := range s.d.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

func (s *Store) Node(id string) (*pb.NodeInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.d.nodes[id]
	return n, ok
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
