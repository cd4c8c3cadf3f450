package state

// Namespace, extraction graph and graph link operations.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// opCtx carries what one command may use: the data it mutates, its
// proposer-assigned timestamp and its log index. Nothing else, so the result
// is a function of (state, command, index) on every replica.
type opCtx struct {
	f     *FSM
	d     *data
	ts    int64
	index uint64
	rules uint32 // Command.rules: which validation rules apply (rules.go)
	// owned: the command was decoded by the FSM from its log entry and is
	// dropped after this apply, so an op may keep its messages as stored
	// messages instead of deep-copying them. False for ApplyCommand, whose
	// caller keeps its command.
	owned bool
}

func hashHex(n int, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "/")))
	return hex.EncodeToString(sum[:])[:n]
}

// GraphID is the deterministic id of an extraction graph.
func GraphID(ns, graph string) string { return hashHex(16, ns, graph) }

// PolicyID is the deterministic id of an extraction policy.
func PolicyID(ns, graph, policy string) string { return hashHex(16, ns, graph, policy) }

// TaskID is the deterministic task id for one (policy, content version):
// first 24 hex characters of sha256(ns/graph/policy/content_id/version).
func TaskID(ns, graph, policy, contentID string, version uint64) string {
	return hashHex(24, ns, graph, policy, contentID, strconv.FormatUint(version, 10))
}

// ChildContentID is the deterministic id of the index-th content a task
// produced: first 16 hex characters of sha256(task_id + "/" + index).
func ChildContentID(taskID string, index int) string {
	return hashHex(16, taskID, strconv.Itoa(index))
}

// VersionRef formats a content version for SchedulerUpdateCmd.tombstone_content_ids.
func VersionRef(ns, id string, version uint64) string {
	return ns + "/" + id + "@" + strconv.FormatUint(version, 10)
}

// ParseVersionRef parses a VersionRef ("ns/id@version").
func ParseVersionRef(s string) (ns, id string, version uint64, err error) {
	slash := strings.IndexByte(s, '/')
	at := strings.LastIndexByte(s, '@')
	if slash <= 0 || at <= slash+1 || at == len(s)-1 {
		return "", "", 0, fmt.Errorf("version ref %q: want ns/id@version", s)
	}
	v, err := strconv.ParseUint(s[at+1:], 10, 64)
	if err != nil || v == 0 {
		return "", "", 0, fmt.Errorf("version ref %q: bad version", s)
	}
	return s[:slash], s[slash+1 : at], v, nil
}

func (o *opCtx) createNamespace(c *pb.CreateNamespaceCmd) *Error {
	name := c.GetName()
	if err := ValidName(name); err != nil {
		return Errorf(codeInvalid, "namespace: %v", err)
	}
	if _, ok := o.d.namespaces[name]; ok {
		return nil
	}
	o.d.namespaces[name] = &pb.Namespace{Name: name, CreatedAt: o.ts}
	return nil
}

func (o *opCtx) requireNamespace(ns string) *Error {
	if _, ok := o.d.namespaces[ns]; !ok {
		return Errorf(codeNotFound, "namespace %q not found", ns)
	}
	return nil
}

// normalizeGraph validates the graph's structure (names, sources, cycles)
// and returns the canonical message the store keeps. It does not look at
// extractors, so an identical re-create is recognised even when an
// extractor went away meanwhile. rules selects the validation (rules.go).
func normalizeGraph(g *pb.ExtractionGraph, ts int64, rules uint32) (*pb.ExtractionGraph, *Error) {
	if err := ValidName(g.GetName()); err != nil {
		return nil, Errorf(codeInvalid, "extraction graph: %v", err)
	}
	if len(g.Policies) == 0 {
		return nil, Errorf(codeInvalid, "extraction graph %q has no extraction policies", g.Name)
	}
	ns := g.Namespace
	out := &pb.ExtractionGraph{
		Id: GraphID(ns, g.Name), Name: g.Name, Namespace: ns,
		Description: g.Description, CreatedAt: ts,
	}
	sources := map[string]string{}
	for _, p := range g.Policies {
		if p == nil {
			return nil, Errorf(codeInvalid, "extraction graph %q: empty policy", g.Name)
		}
		if err := ValidName(p.Name); err != nil {
			return nil, Errorf(codeInvalid, "extraction policy: %v", err)
		}
		if rules >= RulesBounded && ReservedPolicyName(p.Name) {
			return nil, Errorf(codeInvalid, "extraction policy name %q is reserved (content.source %q marks uploaded content; a policy of that name would run on its own output)", p.Name, SourceIngestion)
		}
		if _, dup := sources[p.Name]; dup {
			return nil, Errorf(codeInvalid, "extraction policy %q appears twice", p.Name)
		}
		if p.Extractor == "" {
			return nil, Errorf(codeInvalid, "extraction policy %q has no extractor", p.Name)
		}
		if err := parseFilter(p.Filter, rules); err != nil {
			return nil, Errorf(codeInvalid, "extraction policy %q filter: %v", p.Name, err)
		}
		sources[p.Name] = p.ContentSource
		params := p.InputParamsJson
		if strings.TrimSpace(params) == "" {
			params = "{}"
		}
		out.Policies = append(out.Policies, &pb.ExtractionPolicy{
			Id: PolicyID(ns, g.Name, p.Name), Name: p.Name, GraphName: g.Name, Namespace: ns,
			Extractor: p.Extractor, InputParamsJson: params,
			Filter: append([]string(nil), p.Filter...), ContentSource: p.ContentSource,
		})
	}
	for _, p := range out.Policies {
		if p.ContentSource == "" {
			continue
		}
		if _, ok := sources[p.ContentSource]; !ok || p.ContentSource == p.Name {
			return nil, Errorf(codeInvalid, "extraction policy %q: content_source %q is not another policy of graph %q",
				p.Name, p.ContentSource, g.Name)
		}
		// Walk the chain; more steps than policies means a cycle.
		cur := p.Name
		for steps := 0; sources[cur] != ""; steps++ {
			if steps > len(sources) {
				return nil, Errorf(codeInvalid, "extraction graph %q: content_source of policy %q forms a cycle", g.Name, p.Name)
			}
			cur = sources[cur]
		}
	}
	return out, nil
}

func (o *opCtx) createGraph(c *pb.CreateExtractionGraphCmd) *Error {
	g := c.GetGraph()
	if g == nil {
		return Errorf(codeInvalid, "missing extraction graph")
	}
	if err := o.requireNamespace(g.Namespace); err != nil {
		return err
	}
	norm, err := normalizeGraph(g, o.ts, o.rules)
	if err != nil {
		return err
	}
	if prev := o.d.graphs[g.Namespace][g.Name]; prev != nil {
		norm.CreatedAt = prev.CreatedAt
		if proto.Equal(prev, norm) {
			return nil
		}
		return Errorf(codeExists, "extraction graph %q already exists with a different definition", g.Name)
	}
	for _, p := range norm.Policies {
		x, ok := o.d.extractors[p.Extractor]
		if !ok {
			return Errorf(codeNotFound, "extraction policy %q: extractor %q not found (no executor offers it)", p.Name, p.Extractor)
		}
		if err := o.f.schemas.validateParams(x.InputParamsSchemaJson, p.InputParamsJson, o.rules); err != nil {
			return Errorf(codeInvalid, "extraction policy %q: %v", p.Name, err)
		}
	}
	m := o.d.graphs[g.Namespace]
	if m == nil {
		m = map[string]*pb.ExtractionGraph{}
		o.d.graphs[g.Namespace] = m
	}
	m[g.Name] = norm
	if o.rules < RulesBounded {
		o.f.warnReservedPolicies(norm)
	}
	return nil
}

func (o *opCtx) deleteGraph(c *pb.DeleteExtractionGraphCmd) *Error {
	ns, name := c.GetNamespace(), c.GetName()
	if o.d.graphs[ns][name] == nil {
		return Errorf(codeNotFound, "extraction graph %q not found in namespace %q", name, ns)
	}
	d := o.d
	delete(d.graphs[ns], name)
	if len(d.graphs[ns]) == 0 {
		delete(d.graphs, ns)
	}
	var keep []*pb.GraphLink
	for _, l := range d.links[ns] {
		if l.GraphName != name && l.LinkedGraphName != name {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		delete(d.links, ns)
	} else {
		d.links[ns] = keep
	}
	// Detach the graph from content; content left without any graph has no
	// reason to exist and is deleted like TombstoneContent would.
	var orphans []string
	for id, cur := range d.content[ns] {
		if !contains(cur.GraphNames, name) {
			continue
		}
		nc := proto.Clone(cur).(*pb.Content)
		nc.GraphNames = nil
		for _, gname := range cur.GraphNames {
			if gname != name {
				nc.GraphNames = append(nc.GraphNames, gname)
			}
		}
		d.replaceContent(nc)
		if len(nc.GraphNames) == 0 && !nc.Tombstoned {
			orphans = append(orphans, id)
		}
	}
	sort.Strings(orphans)
	var roots []string
	for _, id := range orphans {
		// A descendant of an orphan is handled with its tree already.
		if c := d.latest(ns, id); c != nil && !c.Tombstoned {
			o.tombstoneTree(ns, id)
			roots = append(roots, id)
		}
	}
	// Work of the deleted graph can never complete meaningfully.
	var ids []string
	for id, t := range d.tasks {
		if t.Namespace == ns && t.GraphName == name && unfinished(t) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		o.failTask(d.tasks[id], "extraction graph deleted")
	}
	d.addChange(pb.ChangeType_CHANGE_TYPE_EXTRACTION_GRAPH_DELETED, ns, name, "", o.ts)
	for _, id := range roots {
		d.addChange(pb.ChangeType_CHANGE_TYPE_TOMBSTONE_CONTENT_TREE, ns, id, "", o.ts)
	}
	return nil
}

func (o *opCtx) createLink(c *pb.CreateGraphLinkCmd) *Error {
	l := c.GetLink()
	if l == nil {
		return Errorf(codeInvalid, "missing graph link")
	}
	ns := l.Namespace
	if err := o.requireNamespace(ns); err != nil {
		return err
	}
	src := o.d.graphs[ns][l.GraphName]
	if src == nil {
		return Errorf(codeNotFound, "extraction graph %q not found", l.GraphName)
	}
	if o.d.graphs[ns][l.LinkedGraphName] == nil {
		return Errorf(codeNotFound, "linked extraction graph %q not found", l.LinkedGraphName)
	}
	if l.ContentSource != "" {
		found := false
		for _, p := range src.Policies {
			found = found || p.Name == l.ContentSource
		}
		if !found {
			return Errorf(codeInvalid, "content_source %q is not a policy of graph %q", l.ContentSource, l.GraphName)
		}
	}
	for _, e := range o.d.links[ns] {
		if e.GraphName == l.GraphName && e.ContentSource == l.ContentSource && e.LinkedGraphName == l.LinkedGraphName {
			return nil
		}
	}
	// A cycle appears iff the source graph is reachable from the linked one.
	if l.GraphName == l.LinkedGraphName || o.graphReachable(ns, l.LinkedGraphName, l.GraphName) {
		return Errorf(codeInvalid, "linking %q to %q would create a cycle", l.GraphName, l.LinkedGraphName)
	}
	nl := &pb.GraphLink{Namespace: ns, GraphName: l.GraphName, ContentSource: l.ContentSource, LinkedGraphName: l.LinkedGraphName}
	o.d.links[ns] = append(append([]*pb.GraphLink(nil), o.d.links[ns]...), nl)
	return nil
}

func (o *opCtx) graphReachable(ns, from, to string) bool {
	seen := map[string]bool{from: true}
	stack := []string{from}
	for len(stack) > 0 {
		g := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if g == to {
			return true
		}
		for _, l := range o.d.links[ns] {
			if l.GraphName == g && !seen[l.LinkedGraphName] {
				seen[l.LinkedGraphName] = true
				stack = append(stack, l.LinkedGraphName)
			}
		}
	}
	return false
}
