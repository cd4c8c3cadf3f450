package state

// Versioned validation rules. A rule the FSM adds changes what a replayed
// log entry does, so every rule added after the first release applies only
// to commands whose Command.rules is at least the version that introduced
// it. Proposers stamp CurrentRules (cluster.Node.Apply does, next to the
// timestamp); entries written before rule versions existed carry 0 and are
// judged by the original rules, so replaying an old log (or restoring a
// snapshot and replaying the tail) yields the state it always did.

import (
	"strings"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Rule versions.
const (
	// RulesOriginal is the validation of the first release (Command.rules 0).
	RulesOriginal uint32 = 0
	// RulesBounded (1) adds: reserved policy names refused, label values
	// must be finite numbers wherever they are numbers and label keys
	// follow labels.ValidKey, label filters with out-of-range numbers are
	// refused, and content lineage is bounded (MaxLineageDepth,
	// MaxChildrenPerContent).
	RulesBounded uint32 = 1
	// CurrentRules is what proposers stamp on new commands.
	CurrentRules = RulesBounded
)

// Bounds of derived content (RulesBounded). They stop a policy that feeds
// on its own output, or an extractor that explodes its input, from growing
// the state without end; real pipelines stay far below them.
const (
	// MaxLineageDepth is the longest chain of derived content: an uploaded
	// item has depth 0, its children depth 1, and so on.
	MaxLineageDepth = 16
	// MaxChildrenPerContent bounds the distinct child ids of one content
	// (and so the outputs of any one task, whose children share a parent).
	MaxChildrenPerContent = 10_000
)

// Command levels (mixed-version safety). A node's command level names the
// newest command forms and rules it applies; each node announces its level
// in its NodeInfo, and proposers (cluster.Node) use a form or rules version
// only when every member announced it, so that during a rolling upgrade a
// replica of the previous version never receives a log entry it would
// apply differently (an unknown operation, or rules it does not know).
//
// Level 1 (this version) is RulesBounded plus complete_task_v2; level 0 is
// a version before levels (rules 0, results as create_content followed by
// complete_task).
const CommandLevel uint32 = 1

// NeededLevel is the command level a replica needs to apply cmd as this
// version does: its rules version, and 1 for complete_task_v2.
func NeededLevel(cmd *pb.Command) uint32 {
	need := cmd.GetRules()
	if _, ok := cmd.GetOp().(*pb.Command_CompleteTaskV2); ok {
		need = max(need, 1)
	}
	return need
}

// StampRules sets cmd.Rules to CurrentRules when the proposer left it 0.
func StampRules(cmd *pb.Command) {
	if cmd != nil && cmd.Rules == RulesOriginal {
		cmd.Rules = CurrentRules
	}
}

// ReservedPolicyName reports whether name may not name an extraction
// policy: Content.source holds a policy's name for derived content and
// SourceIngestion for uploads, so a policy named "ingestion" would read its
// own output as if it were uploaded and run on it forever. Compared without
// case so look-alike names are refused too.
func ReservedPolicyName(name string) bool {
	return strings.EqualFold(name, SourceIngestion)
}

// warnReservedPolicies logs a WARN for each policy of g with a reserved
// name. Only graphs created under RulesOriginal (before the upgrade that
// refuses such names) can have one: the graph stays as it was (replay must
// not change state), and its policy still runs on its own output, each
// generation one deeper, until MaxLineageDepth stops the chain (the task
// at that depth fails). Said whenever such a graph is applied or restored
// from a snapshot, so an operator sees it at every start.
func (f *FSM) warnReservedPolicies(g *pb.ExtractionGraph) {
	for _, p := range g.GetPolicies() {
		if ReservedPolicyName(p.GetName()) {
			f.log.Warn("extraction graph created before the reserved-name rule has a policy named like uploads' source: "+
				"it runs on its own output until content is MaxLineageDepth generations deep (each chain then ends in a failed task); "+
				"delete the graph and create it again with another policy name",
				"namespace", g.GetNamespace(), "graph", g.GetName(), "policy", p.GetName(), "max_lineage_depth", MaxLineageDepth)
		}
	}
}

// warnReservedPoliciesInStore runs warnReservedPolicies over every graph.
func (f *FSM) warnReservedPoliciesInStore() {
	for _, ns := range f.store.Namespaces() {
		for _, g := range f.store.Graphs(ns.GetName()) {
			f.warnReservedPolicies(g)
		}
	}
}
