package state

// Content operations: create/version, labels, tombstones and GC acks.

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// SourceIngestion is Content.source for content uploaded by users.
const SourceIngestion = "ingestion"

func validFeatures(fs []*pb.Feature) *Error {
	for _, f := range fs {
		if f == nil || f.Name == "" {
			return Errorf(codeInvalid, "feature without a name")
		}
		if !json.Valid([]byte(f.ValueJson)) {
			return Errorf(codeInvalid, "feature %q: value is not valid JSON", f.Name)
		}
	}
	return nil
}

func (o *opCtx) createContent(c *pb.CreateContentCmd) ([]*pb.ContentRef, *Error) {
	d := o.d
	if len(c.GetContents()) == 0 {
		return nil, Errorf(codeInvalid, "no content given")
	}
	// Validate everything first: a batch is applied completely or not at all.
	// A parent may be created earlier in the same batch.
	inBatch := map[ckey]bool{}
	for _, in := range c.Contents {
		if in == nil {
			return nil, Errorf(codeInvalid, "empty content entry")
		}
		ns := in.Namespace
		if err := o.requireNamespace(ns); err != nil {
			return nil, err
		}
		if err := ValidContentID(in.Id); err != nil {
			return nil, Errorf(codeInvalid, "%v", err)
		}
		for _, g := range in.GraphNames {
			if d.graphs[ns][g] == nil {
				return nil, Errorf(codeNotFound, "extraction graph %q not found in namespace %q", g, ns)
			}
		}
		if in.ParentId != "" {
			if in.ParentId == in.Id {
				return nil, Errorf(codeInvalid, "content %q cannot be its own parent", in.Id)
			}
			p := d.latest(ns, in.ParentId)
			if (p == nil || p.Tombstoned) && !inBatch[ckey{ns, in.ParentId}] {
				return nil, Errorf(codeNotFound, "parent content %q not found", in.ParentId)
			}
		}
		if err := validLabels(in.Labels, o.rules); err != nil {
			return nil, Errorf(codeInvalid, "content %q: %v", in.Id, err)
		}
		if err := validFeatures(in.Features); err != nil {
			return nil, err
		}
		inBatch[ckey{ns, in.Id}] = true
	}
	if o.rules >= RulesBounded {
		if err := o.checkLineage(c.Contents); err != nil {
			return nil, err
		}
	}
	refs := make([]*pb.ContentRef, 0, len(c.Contents))
	for _, in := range c.Contents {
		refs = append(refs, o.putNewContent(in))
	}
	return refs, nil
}

// checkLineage enforces the bounds on derived content (RulesBounded): no
// chain of parents longer than MaxLineageDepth and no more than
// MaxChildrenPerContent distinct children per parent, counting the batch.
// A retried task writes the same child ids again, which adds nothing.
func (o *opCtx) checkLineage(batch []*pb.Content) *Error {
	d := o.d
	inBatch := make(map[ckey]*pb.Content, len(batch))
	perParent := map[ckey][]string{}
	var parents []ckey
	for _, in := range batch {
		inBatch[ckey{in.Namespace, in.Id}] = in
		if in.ParentId != "" {
			pk := ckey{in.Namespace, in.ParentId}
			if _, seen := perParent[pk]; !seen {
				parents = append(parents, pk)
			}
			perParent[pk] = append(perParent[pk], in.Id)
		}
	}
	parentOf := func(k ckey) string {
		if c := inBatch[k]; c != nil {
			return c.ParentId
		}
		if c := d.latest(k.ns, k.id); c != nil {
			return c.ParentId
		}
		return ""
	}
	for _, in := range batch {
		depth := 0
		for cur := in.ParentId; cur != ""; cur = parentOf(ckey{in.Namespace, cur}) {
			if depth++; depth > MaxLineageDepth {
				return Errorf(codeInvalid, "content %q: derived content is limited to %d generations below an upload (a policy may be feeding on its own output)", in.Id, MaxLineageDepth)
			}
		}
	}
	for _, pk := range parents {
		kids, existing := perParent[pk], d.children[pk]
		if len(existing)+len(kids) <= MaxChildrenPerContent {
			continue
		}
		all := make(map[string]bool, len(existing)+len(kids))
		for _, id := range existing {
			all[id] = true
		}
		for _, id := range kids {
			all[id] = true
		}
		if len(all) > MaxChildrenPerContent {
			return Errorf(codeInvalid, "content %q would have %d children; at most %d are allowed per content", pk.id, len(all), MaxChildrenPerContent)
		}
	}
	return nil
}

// putNewContent applies one validated content entry.
func (o *opCtx) putNewContent(in *pb.Content) *pb.ContentRef {
	d := o.d
	ns, id := in.Namespace, in.Id
	prev := d.latest(ns, id)
	if prev != nil && !prev.Tombstoned && prev.Hash == in.Hash {
		// Same bytes: nothing new to extract. A graph the content did not
		// belong to yet is added, so uploading the same file into a second
		// graph still runs that graph (ADD_GRAPH_TO_CONTENT).
		var added []string
		for _, g := range in.GraphNames {
			if !contains(prev.GraphNames, g) && !contains(added, g) {
				added = append(added, g)
			}
		}
		if len(added) > 0 {
			nc := proto.Clone(prev).(*pb.Content)
			nc.GraphNames = append(nc.GraphNames, added...)
			d.replaceContent(nc)
			for _, g := range added {
				d.addChange(pb.ChangeType_CHANGE_TYPE_ADD_GRAPH_TO_CONTENT, ns, id, g, o.ts)
			}
		}
		return &pb.ContentRef{Id: id, Version: prev.Version}
	}
	// The command's own message becomes the stored one when nobody else
	// holds it (a deep copy per item was a fifth of applying an upload).
	c := in
	if !o.owned {
		c = proto.Clone(in).(*pb.Content)
	}
	if c.Source == "" {
		c.Source = SourceIngestion
	}
	internContent(c)
	c.RootContentId = id
	if c.ParentId != "" {
		if p := d.latest(ns, c.ParentId); p != nil {
			c.RootContentId = p.RootContentId
			if c.RootContentId == "" {
				c.RootContentId = p.Id
			}
		}
	}
	c.Version = d.maxVersion(ns, id) + 1
	c.Latest = true
	c.Tombstoned = false
	c.CreatedAt = o.ts
	c.PolicyCompletionTimes = nil
	d.offsetSeq++
	c.ChangeOffset = d.offsetSeq
	var demoted *pb.Content
	if prev != nil {
		demoted = proto.Clone(prev).(*pb.Content)
		demoted.Latest = false
	}
	d.addLatest(c, demoted)
	d.addChange(pb.ChangeType_CHANGE_TYPE_NEW_CONTENT, ns, id, strconv.FormatUint(c.Version, 10), o.ts)
	return &pb.ContentRef{Id: id, Version: c.Version, Created: true}
}

func (o *opCtx) updateLabels(c *pb.UpdateLabelsCmd) *Error {
	ns, id := c.GetNamespace(), c.GetContentId()
	cur := o.d.latest(ns, id)
	if cur == nil || cur.Tombstoned {
		return Errorf(codeNotFound, "content %q not found in namespace %q", id, ns)
	}
	if err := validLabels(c.Labels, o.rules); err != nil {
		return Errorf(codeInvalid, "%v", err)
	}
	nc := proto.Clone(cur).(*pb.Content)
	nc.Labels = nil
	if len(c.Labels) > 0 {
		nc.Labels = make(map[string]string, len(c.Labels))
		for k, v := range c.Labels {
			nc.Labels[k] = v
		}
	}
	o.d.replaceContent(nc)
	o.d.addChange(pb.ChangeType_CHANGE_TYPE_CONTENT_UPDATED, ns, id, strconv.FormatUint(nc.Version, 10), o.ts)
	return nil
}

func (o *opCtx) tombstoneContent(c *pb.TombstoneContentCmd) *Error {
	ns := c.GetNamespace()
	if err := o.requireNamespace(ns); err != nil {
		return err
	}
	if len(c.ContentIds) == 0 {
		return Errorf(codeInvalid, "no content ids given")
	}
	var missing []string
	for _, id := range c.ContentIds {
		if o.d.latest(ns, id) == nil {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return Errorf(codeNotFound, "content not found in namespace %q: %s", ns, strings.Join(missing, ", "))
	}
	seen := map[string]bool{}
	for _, id := range c.ContentIds {
		if seen[id] {
			continue
		}
		seen[id] = true
		o.tombstoneTree(ns, id)
		o.d.addChange(pb.ChangeType_CHANGE_TYPE_TOMBSTONE_CONTENT_TREE, ns, id, "", o.ts)
	}
	return nil
}

// tombstoneTree marks every version of id and of all its descendants
// tombstoned and fails their unfinished tasks.
func (o *opCtx) tombstoneTree(ns, root string) {
	d := o.d
	queue := []string{root}
	seen := map[string]bool{root: true}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, v := range d.allVersions(ns, id) {
			o.tombstoneOne(v)
		}
		kids := append([]string(nil), d.children[ckey{ns, id}]...)
		sort.Strings(kids)
		for _, k := range kids {
			if !seen[k] {
				seen[k] = true
				queue = append(queue, k)
			}
		}
	}
}

// tombstoneOne tombstones one stored version and fails its unfinished tasks.
func (o *opCtx) tombstoneOne(v *pb.Content) {
	d := o.d
	if !v.Tombstoned {
		nc := proto.Clone(v).(*pb.Content)
		nc.Tombstoned = true
		d.replaceContent(nc)
	}
	tids := append([]string(nil), d.tasksByContent[ckey{v.Namespace, v.Id}]...)
	sort.Strings(tids)
	for _, tid := range tids {
		if t := d.tasks[tid]; t != nil && t.ContentVersion == v.Version && unfinished(t) {
			o.failTask(t, "content deleted")
		}
	}
}

// failTask makes an unfinished task terminally FAILED and unassigned.
func (o *opCtx) failTask(t *pb.Task, reason string) {
	nt := cloneTask(t)
	nt.Outcome = pb.TaskOutcome_TASK_OUTCOME_FAILED
	nt.LastError = reason
	nt.ExecutorId = ""
	nt.CompletedAt = o.ts
	o.d.putTask(nt)
}

// tombstoneVersion tombstones one superseded version and the content its
// tasks produced (recursively), leaving other versions' trees alone.
func (o *opCtx) tombstoneVersion(ns, id string, version uint64, seen map[string]bool) {
	d := o.d
	v := d.version(ns, id, version)
	key := VersionRef(ns, id, version)
	if v == nil || seen[key] {
		return
	}
	seen[key] = true
	o.tombstoneOne(v)
	kids := append([]string(nil), d.children[ckey{ns, id}]...)
	sort.Strings(kids)
	for _, k := range kids {
		for _, cv := range d.allVersions(ns, k) {
			t := d.tasks[cv.SourceTaskId]
			if cv.ParentId == id && t != nil && t.ContentId == id && t.ContentVersion == version {
				o.tombstoneVersion(ns, k, cv.Version, seen)
			}
		}
	}
}

func (o *opCtx) ackGC(c *pb.AckGCTasksCmd) *Error {
	d := o.d
	for _, id := range c.GetIds() {
		g := d.gcTasks[id]
		if g == nil {
			continue
		}
		delete(d.gcTasks, id)
		// The blob is gone: drop the metadata too, unless the version came
		// back to life meanwhile (still latest and live).
		if v := d.version(g.Namespace, g.ContentId, g.ContentVersion); v != nil && (v.Tombstoned || !v.Latest) {
			d.purgeVersion(g.Namespace, g.ContentId, g.ContentVersion)
		}
	}
	return nil
}
