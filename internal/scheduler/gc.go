package scheduler

import (
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// This file decides garbage collection: superseded versions of re-uploaded
// content (tombstoned once the newest version's extraction finished) and the
// blobs of deleted content trees.

// maybeSupersede tombstones every older live version of root content rootID,
// together with the content extracted from those versions, once all tasks of
// the latest version's tree are terminal. Until then the old version stays
// readable, so readers never see a content without extraction results.
func (p *planner) maybeSupersede(ns, rootID string) {
	latest, olds := p.liveOlds(ns, rootID)
	if len(olds) == 0 {
		return
	}
	if p.ahead != nil {
		// Planning ahead, the in-flight passes' tasks are not in the
		// store for tasksDone to see. PlanAhead took only content with no
		// live older versions; one that appeared since has its own change,
		// planned after the in-flight passes apply.
		return
	}
	var newKids, oldKids []*pb.Content
	for _, c := range p.children(ns, rootID, true) {
		if p.fromOldVersion(c, latest) {
			oldKids = append(oldKids, c)
		} else {
			newKids = append(newKids, c)
		}
	}
	if !p.tasksDone(latest) {
		return
	}
	for _, c := range newKids {
		if !p.subtreeDone(c) {
			return
		}
	}
	// The state machine tombstones what a listed version's tasks produced
	// itself; the blobs of that content are collected here.
	for _, c := range olds {
		p.tombstone(c)
	}
	for _, c := range oldKids {
		p.walkTree(ns, c.GetId(), func(c *pb.Content) {
			if !c.GetTombstoned() {
				p.gc(c)
			}
		})
	}
}

// liveOlds returns the latest live version of root content rootID and its
// older versions not tombstoned (in the store or by this pass); none when
// the root is gone, tombstoned or at its first version.
func (p *planner) liveOlds(ns, rootID string) (*pb.Content, []*pb.Content) {
	latest, ok := p.s.Content(ns, rootID)
	if !ok || latest.GetTombstoned() || latest.GetVersion() <= 1 {
		return nil, nil
	}
	var olds []*pb.Content
	for _, c := range p.s.ContentVersions(ns, rootID) {
		if c.GetVersion() < latest.GetVersion() && !c.GetTombstoned() && !p.tombstoned[state.VersionRef(ns, rootID, c.GetVersion())] {
			olds = append(olds, c)
		}
	}
	return latest, olds
}

// fromOldVersion reports whether child content of the root was extracted
// from a version older than latest. Children of every version share the
// root as parent_id, so the producing task's content_version decides; a
// child whose task is gone is attributed by creation time.
func (p *planner) fromOldVersion(child, latest *pb.Content) bool {
	if t, ok := p.s.Task(child.GetSourceTaskId()); ok {
		return t.GetContentVersion() < latest.GetVersion()
	}
	return child.GetCreatedAt() < latest.GetCreatedAt()
}

// tasksDone reports whether every task of content version c is terminal,
// counting tasks created earlier in this pass (always unfinished). Content
// whose change is still ahead in this batch may get tasks yet, so it is not
// done.
func (p *planner) tasksDone(c *pb.Content) bool {
	ns := c.GetNamespace()
	// A content change of this batch not planned (or held back), or one
	// outside this batch (held back, or beyond BatchChanges), may still
	// make tasks.
	key := ns + "/" + c.GetId()
	if p.unplanned[key] > 0 || p.s.PendingContentChanges(ns, c.GetId()) > p.inBatch[key] {
		return false
	}
	for _, t := range p.byContent[ns+"/"+c.GetId()] {
		if t.GetContentVersion() == c.GetVersion() {
			return false
		}
	}
	tasks, _ := p.s.ListTasks(state.TaskQuery{Namespace: ns, ContentID: c.GetId()})
	for _, t := range tasks {
		if t.GetContentVersion() == c.GetVersion() && t.GetOutcome() == pb.TaskOutcome_TASK_OUTCOME_UNKNOWN {
			return false
		}
	}
	return true
}

// subtreeDone reports whether c and every live descendant have only
// terminal tasks.
func (p *planner) subtreeDone(c *pb.Content) bool {
	if c.GetTombstoned() {
		return true
	}
	if !p.tasksDone(c) {
		return false
	}
	for _, k := range p.children(c.GetNamespace(), c.GetId(), false) {
		if !p.subtreeDone(k) {
			return false
		}
	}
	return true
}

// collectDeleted queues blob deletions for every tombstoned version in the
// tree rooted at id (the object of a TOMBSTONE_CONTENT_TREE change).
func (p *planner) collectDeleted(ns, id string) {
	p.walkTree(ns, id, func(c *pb.Content) {
		if c.GetTombstoned() {
			p.gc(c)
		}
	})
}

// walkTree calls fn for every version (tombstoned included) of id and of all
// its descendants, parents first.
func (p *planner) walkTree(ns, id string, fn func(*pb.Content)) {
	seen := map[string]bool{id: true}
	queue := []string{id}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range p.s.ContentVersions(ns, cur) {
			fn(c)
		}
		for _, k := range p.children(ns, cur, true) {
			if !seen[k.GetId()] {
				seen[k.GetId()] = true
				queue = append(queue, k.GetId())
			}
		}
	}
}

func (p *planner) children(ns, id string, tombstoned bool) []*pb.Content {
	// The query is well formed by construction; on an error there is
	// nothing to walk.
	kids, _, err := p.s.ListContent(state.ContentQuery{Namespace: ns, ParentID: id, Tombstoned: tombstoned})
	if err != nil {
		return nil
	}
	return kids
}

// tombstone adds one superseded version to the command, with its blob
// deletion.
func (p *planner) tombstone(c *pb.Content) {
	key := state.VersionRef(c.GetNamespace(), c.GetId(), c.GetVersion())
	if p.tombstoned[key] {
		return
	}
	p.tombstoned[key] = true
	p.cmd.TombstoneContentIds = append(p.cmd.TombstoneContentIds, key)
	p.gc(c)
}

// gc queues the deletion of a version's blob once per pass; the id is
// deterministic, so a version queued again by a later pass keeps its id.
func (p *planner) gc(c *pb.Content) {
	if c.GetStorageUrl() == "" {
		return
	}
	id := GCTaskID(c.GetNamespace(), c.GetId(), c.GetVersion())
	if p.gcIDs[id] {
		return
	}
	p.gcIDs[id] = true
	p.cmd.NewGcTasks = append(p.cmd.NewGcTasks, &pb.GCTask{
		Id:             id,
		Namespace:      c.GetNamespace(),
		ContentId:      c.GetId(),
		ContentVersion: c.GetVersion(),
		StorageUrl:     c.GetStorageUrl(),
		CreatedAt:      p.nowMs,
	})
}
