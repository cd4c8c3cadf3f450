package state

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/indexify-go/indexify/internal/labels"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

const invalid = pb.ErrorCode_ERROR_CODE_INVALID

func labelsCmd(id string, l map[string]string) *pb.Command {
	return &pb.Command{Op: &pb.Command_UpdateLabels{UpdateLabels: &pb.UpdateLabelsCmd{Namespace: "ns", ContentId: id, Labels: l}}}
}

// hostileCmds are commands the original rules accepted and RulesBounded
// refuses, each applied after h.setup() and an upload "doc".
func hostileCmds() map[string]*pb.Command {
	withLabels := content("ns", "num", "hn", "g")
	withLabels.Labels = map[string]string{"a": "1e400"}
	nested := content("ns", "nested", "hx", "g")
	nested.Labels = map[string]string{"a": `{"b":[1,-1e999]}`}
	badKey := content("ns", "key", "hk", "g")
	badKey.Labels = map[string]string{"a=b": "1"}
	many := content("ns", "many", "hm", "g")
	many.Labels = map[string]string{}
	for i := 0; i <= labels.MaxLabels; i++ {
		many.Labels[fmt.Sprintf("k%d", i)] = "1"
	}
	long := content("ns", "long", "hl", "g")
	long.Labels = map[string]string{"a": `"` + strings.Repeat("v", labels.MaxValueBytes) + `"`}
	return map[string]*pb.Command{
		"too many labels":        contentCmd(many),
		"label value too long":   contentCmd(long),
		"policy named ingestion": graphCmd("ns", "loop", &pb.ExtractionPolicy{Name: "ingestion", Extractor: "chunk"}),
		"policy named Ingestion": graphCmd("ns", "loop2", &pb.ExtractionPolicy{Name: "Ingestion", Extractor: "chunk"}),
		"filter out of range":    graphCmd("ns", "f", &pb.ExtractionPolicy{Name: "p", Extractor: "chunk", Filter: []string{"n>1e999"}}),
		"label 1e400 on upload":  contentCmd(withLabels),
		"nested label -1e999":    contentCmd(nested),
		"label key with =":       contentCmd(badKey),
		"label update 1e400":     labelsCmd("doc", map[string]string{"a": "1e400"}),
	}
}

func TestRulesBoundedRefusesWhatOriginalAccepted(t *testing.T) {
	for name, cmd := range hostileCmds() {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.setup()
			h.ok(contentCmd(content("ns", "doc", "h1", "g")))
			r := h.fail(invalid, cmd)
			t.Logf("refused: %s", r.Error)
		})
	}
}

// An existing log (commands without a rules version) must replay to the
// state it produced before the rules existed: the same commands are
// accepted, on every replica the same way.
func TestOriginalRulesReplayUnchanged(t *testing.T) {
	var dumps []string
	for run := 0; run < 2; run++ {
		h := newHarness(t)
		h.rules = RulesOriginal
		h.setup()
		h.ok(contentCmd(content("ns", "doc", "h1", "g")))
		cmds := hostileCmds()
		for _, name := range []string{"policy named ingestion", "policy named Ingestion", "filter out of range",
			"label 1e400 on upload", "nested label -1e999", "label key with =", "label update 1e400", "too many labels", "label value too long"} {
			if r := h.apply(cmds[name]); r.ErrorCode != pb.ErrorCode_ERROR_CODE_OK {
				t.Fatalf("%s: replay under the original rules refused: %s", name, r.Error)
			}
		}
		// A chain deeper than MaxLineageDepth was accepted too.
		parent := "doc"
		for i := 0; i <= MaxLineageDepth; i++ {
			kid := content("ns", fmt.Sprintf("d%d", i), fmt.Sprintf("hd%d", i), "g")
			kid.ParentId = parent
			h.ok(contentCmd(kid))
			parent = kid.Id
		}
		dumps = append(dumps, h.store().Dump())
	}
	if dumps[0] != dumps[1] {
		t.Fatal("two replays of the same log differ")
	}
}

func TestLineageDepthBounded(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(contentCmd(content("ns", "doc", "h1", "g")))
	parent := "doc"
	for i := 1; i <= MaxLineageDepth; i++ {
		kid := content("ns", fmt.Sprintf("d%d", i), fmt.Sprintf("hd%d", i), "g")
		kid.ParentId = parent
		h.ok(contentCmd(kid))
		parent = kid.Id
	}
	kid := content("ns", "too-deep", "hdeep", "g")
	kid.ParentId = parent
	r := h.fail(invalid, contentCmd(kid))
	t.Logf("refused: %s", r.Error)

	// Also when the chain is built inside one batch.
	h2 := newHarness(t)
	h2.setup()
	batch := []*pb.Content{content("ns", "root", "hr", "g")}
	for i := 1; i <= MaxLineageDepth+1; i++ {
		k := content("ns", fmt.Sprintf("b%d", i), fmt.Sprintf("hb%d", i), "g")
		k.ParentId = batch[len(batch)-1].Id
		batch = append(batch, k)
	}
	h2.fail(invalid, contentCmd(batch...))
	h2.ok(contentCmd(batch[:len(batch)-1]...))
}

func TestChildrenPerContentBounded(t *testing.T) {
	h := newHarness(t)
	h.setup()
	h.ok(contentCmd(content("ns", "doc", "h1", "g")))
	kids := func(from, to int) []*pb.Content {
		var out []*pb.Content
		for i := from; i < to; i++ {
			k := content("ns", fmt.Sprintf("k%05d", i), fmt.Sprintf("hk%d", i), "g")
			k.ParentId = "doc"
			out = append(out, k)
		}
		return out
	}
	h.fail(invalid, contentCmd(kids(0, MaxChildrenPerContent+1)...))
	h.ok(contentCmd(kids(0, MaxChildrenPerContent-1)...))
	// Writing the same children again (a retried task) adds nothing.
	h.ok(contentCmd(kids(0, MaxChildrenPerContent-1)...))
	h.ok(contentCmd(kids(MaxChildrenPerContent-1, MaxChildrenPerContent)...))
	r := h.fail(invalid, contentCmd(kids(MaxChildrenPerContent, MaxChildrenPerContent+1)...))
	t.Logf("refused: %s", r.Error)
}

func TestStampRules(t *testing.T) {
	c := &pb.Command{}
	StampRules(c)
	if c.Rules != CurrentRules {
		t.Fatalf("rules %d, want %d", c.Rules, CurrentRules)
	}
	c = &pb.Command{Rules: 7}
	StampRules(c)
	if c.Rules != 7 {
		t.Fatal("StampRules overwrote an explicit rules version")
	}
}

// What a replica needs to apply a command as this version does: its rules
// version, and level 1 for complete_task_v2 whatever its stamp (a replica
// of level 0 does not know the operation).
func TestNeededLevel(t *testing.T) {
	v2 := &pb.Command{Op: &pb.Command_CompleteTaskV2{CompleteTaskV2: &pb.CompleteTaskCmd{TaskId: "t"}}}
	ns := &pb.Command{Op: &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: "n"}}}
	for _, c := range []struct {
		cmd   *pb.Command
		rules uint32
		want  uint32
	}{{v2, RulesOriginal, 1}, {v2, RulesBounded, 1}, {ns, RulesOriginal, 0}, {ns, RulesBounded, 1}} {
		c.cmd.Rules = c.rules
		if got := NeededLevel(c.cmd); got != c.want {
			t.Errorf("NeededLevel(%T, rules %d) = %d, want %d", c.cmd.GetOp(), c.rules, got, c.want)
		}
	}
	if CommandLevel < CurrentRules {
		t.Errorf("CommandLevel %d below CurrentRules %d: a node would not announce the rules it stamps", CommandLevel, CurrentRules)
	}
}

// A graph with a reserved policy name that an existing log (RulesOriginal)
// created is kept, and it still feeds on its own output until the depth
// bound: the FSM says so at WARN, naming it, when the entry is applied
// (every start replays it) and when a snapshot holding it is restored.
func TestReservedPolicyFromBeforeTheRuleIsWarnedAbout(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h := newHarness(t)
	h.fsm = NewFSM(NewStore(), logger)
	h.rules = RulesOriginal
	h.setup()
	if logs.Len() != 0 {
		t.Fatalf("an ordinary graph was warned about:\n%s", logs.String())
	}
	h.ok(graphCmd("ns", "loop", &pb.ExtractionPolicy{Name: "Ingestion", Extractor: "chunk"}))
	warned := func(what, l string) {
		t.Helper()
		if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "graph=loop") || !strings.Contains(l, "policy=Ingestion") ||
			!strings.Contains(l, "namespace=ns") || strings.Count(l, "\n") != 1 {
			t.Fatalf("%s: want one WARN naming ns/loop/Ingestion, got:\n%s", what, l)
		}
	}
	warned("apply", logs.String())

	var snap bytes.Buffer
	if err := h.store().WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	restored := NewFSM(NewStore(), logger)
	if err := restored.Restore(io.NopCloser(&snap)); err != nil {
		t.Fatal(err)
	}
	warned("restore", logs.String())
}
