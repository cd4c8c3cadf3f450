// Package chaos is a Jepsen-style fault campaign: coordinators, API server,
// executors and clients each run in their own network namespace; a seeded
// nemesis kills, pauses, partitions, re-addresses, wipes and slows nodes
// while clients ingest content and read/write label registers; afterwards
// the history is checked for linearizability (porcupine), the final state
// for lost writes and stuck tasks, and every replica's state digest for
// divergence. See docs/reliability.md.
package chaos

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/indexify-go/indexify/internal/retry"
)

var (
	flagSeed     = flag.Int64("chaos.seed", 0, "nemesis/workload seed (0 = from the clock; printed)")
	flagFaults   = flag.Int("chaos.faults", 0, "long mode: number of faults per cluster size")
	flagDuration = flag.Duration("chaos.duration", 0, "long mode: time budget for faults per cluster size")
)

// TestMain lets this binary act as the campaign's helper processes, started
// inside namespaces with CHAOS_MODE set.
func TestMain(m *testing.M) {
	switch os.Getenv("CHAOS_MODE") {
	case "client":
		os.Exit(clientMain())
	case "status":
		os.Exit(statusMain())
	case "verify":
		os.Exit(verifyMain())
	case "proxy":
		os.Exit(proxyMain())
	case "digest":
		os.Exit(digestMain())
	case "http":
		os.Exit(httpMain())
	}
	os.Exit(m.Run())
}

// recoveryBound is the stated bound: after every heal a write succeeds
// within this time.
const recoveryBound = 30 * time.Second

type campaign struct {
	nodes  int
	seed   int64
	kinds  []string // fault sequence (cycled)
	count  int
	budget time.Duration
	// Regression scenarios: API server timeout, fixed partition hold, and
	// whether every operation overlapping a fault that leaves a connected
	// majority must succeed.
	apiTimeout     time.Duration
	partitionHold  time.Duration
	strictMajority bool
	// wipeMajority ends the campaign with the identity fault, after the
	// history's checks (wipemajority_test.go).
	wipeMajority bool
}

func seedFor(t *testing.T) int64 {
	if *flagSeed != 0 {
		return *flagSeed
	}
	return time.Now().UnixNano()
}

// plan is the default (CI) campaign unless a long mode flag is given: on 3
// nodes every fault kind once in a seeded order, on 5 nodes a seeded
// handful.
func plan(t *testing.T, nodes int, defaultCount int) campaign {
	c := campaign{nodes: nodes, seed: seedFor(t), wipeMajority: true}
	rng := rand.New(rand.NewSource(c.seed))
	for _, i := range rng.Perm(len(allFaults)) {
		c.kinds = append(c.kinds, allFaults[i])
	}
	c.count, c.budget = defaultCount, 3*time.Minute
	if *flagFaults > 0 || *flagDuration > 0 {
		c.count, c.budget = 1<<30, 24*time.Hour
		if *flagFaults > 0 {
			c.count = *flagFaults
		}
		if *flagDuration > 0 {
			c.budget = *flagDuration
		}
		// Long runs draw every fault at random rather than cycling.
		var seq []string
		for i := 0; i < 10000; i++ {
			seq = append(seq, allFaults[rng.Intn(len(allFaults))])
		}
		c.kinds = seq
	}
	return c
}

func TestChaos3(t *testing.T) { runCampaign(t, plan(t, 3, len(allFaults))) }

func TestChaos5(t *testing.T) { runCampaign(t, plan(t, 5, 4)) }

func artifactsDir(t *testing.T, seed int64) string {
	base := os.Getenv("INDEXIFY_ARTIFACTS")
	if base == "" {
		base = t.TempDir()
	}
	dir := filepath.Join(base, fmt.Sprintf("%s-seed%d", t.Name(), seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runCampaign(t *testing.T, c campaign) {
	t.Logf("chaos: %d nodes, seed %d (replay with -chaos.seed %d)", c.nodes, c.seed, c.seed)
	dir := artifactsDir(t, c.seed)
	t.Logf("chaos: artifacts in %s", dir)
	e := newEnv(t, c.nodes, dir)
	if c.apiTimeout > 0 {
		e.apiTimeout = c.apiTimeout
	}
	for _, co := range e.coords {
		co.dataDir = filepath.Join(t.TempDir(), co.id) // raft data is not an artifact
		e.startCoord(co)
	}
	e.startServices(2)

	histPath := filepath.Join(dir, "history.jsonl")
	ccfg := clientConfig{API: e.apiURL(), Namespace: "chaos", Graph: "g", Registers: 5, RegClients: 4, IngestClients: 2,
		History: histPath, Seed: c.seed, MaxOps: 200000, MaxDuration: c.budget + 5*time.Minute, OpTimeout: e.apiTimeout + 4*time.Second}
	client := e.helper("client", e.clientNS, filepath.Join(dir, "logs", "client.log"), ccfg)
	hist := &historyTail{path: histPath}
	waitFor(t, 3*time.Minute, "cluster formed and workload running", func() error {
		if client.exited() {
			return fmt.Errorf("client exited; see %s", filepath.Join(dir, "logs", "client.log"))
		}
		if n := countOK(hist.poll()); n < 30 {
			return fmt.Errorf("%d successful writes so far", n)
		}
		return nil
	})

	n := &nemesis{e: e, rng: rand.New(rand.NewSource(c.seed)), hist: hist, bound: recoveryBound,
		home: map[string]string{}, logf: t.Logf, timeout: time.Second, partitionHold: c.partitionHold}
	for _, co := range e.coords {
		n.home[co.id] = co.ip
	}
	if err := n.run(c.kinds, c.count, c.budget); err != nil {
		t.Errorf("nemesis: %v", err)
	}

	// Everything healed: let the workload run a little, then stop it.
	mark := time.Now().UnixNano()
	waitFor(t, recoveryBound, "writes after the campaign", func() error {
		if firstWriteOKAfter(hist.poll(), mark) == 0 {
			return fmt.Errorf("no successful write since the last heal")
		}
		return nil
	})
	if err := client.signal(syscall.SIGTERM); err != nil {
		t.Errorf("stop client: %v", err)
	}
	if !client.wait(time.Minute) {
		t.Fatal("client did not stop within a minute")
	}
	ops := hist.poll() // the client has exited: this is the whole history

	sum := summarize(t, e, n, ops, dir)
	if c.strictMajority {
		// Before the fix, clients stalled on the cut-off node and every
		// operation overlapping the partition failed (8 in the replayed
		// seed). With it, under the full CI suite's load (every package
		// testing at once on 2 cores) a single call has been seen to
		// exceed the API server's deadline; allow that, not a stall.
		const tolerated = 2
		if bad := failedDuringMajorityFaults(ops, n.faults); len(bad) > tolerated {
			t.Errorf("%d operations failed or ended ambiguously while a majority was connected, e.g. %v", len(bad), first(bad, 10))
		} else if len(bad) > 0 {
			t.Logf("%d operation(s) failed while a majority was connected (tolerated up to %d): %v", len(bad), tolerated, bad)
		}
	}
	faults := n.faults
	if c.wipeMajority {
		// Last: this fault discards the acknowledged writes checked above.
		f, res := n.wipeMajority()
		n.logf("fault %d %-16s %-28s %s", len(faults)+1, f.Kind, f.Target, res.summaryRow())
		faults = append(faults, f)
		sum.identity = &res
		for _, p := range res.Problems {
			t.Errorf("%s: %s", kWipeMajority, p)
		}
	}
	writeSummary(t, dir, c, sum, faults, ops)
}

type summary struct {
	ok, failed, indet           int
	byKind                      map[string][3]int
	ackedIngests                []string
	lost                        []string
	lin                         porcupine.CheckResult
	worst                       time.Duration
	unrecovered                 []string
	verify                      verifyResult
	double                      []string
	multiTerm                   []string
	terms                       int
	holdings                    int
	registerOps, indetRegWrites int
	digestProblem               string
	digestIndex                 uint64
	divergent                   int
	identity                    *identityResult // the campaign's last fault, if run
}

func summarize(t *testing.T, e *env, n *nemesis, ops []op, dir string) summary {
	s := summary{byKind: map[string][3]int{}}
	for _, o := range ops {
		if o.Kind == "setup" {
			continue
		}
		k := s.byKind[o.Kind]
		switch o.Res {
		case resOK:
			s.ok++
			k[0]++
		case resFailed:
			s.failed++
			k[1]++
		default:
			s.indet++
			k[2]++
		}
		s.byKind[o.Kind] = k
		if o.Kind == "ingest" && o.Res == resOK {
			s.ackedIngests = append(s.ackedIngests, o.ID)
		}
		if o.Kind == "write" || o.Kind == "read" {
			s.registerOps++
			if o.Kind == "write" && o.Res == resIndeterminate {
				s.indetRegWrites++
			}
		}
	}
	for _, f := range n.faults {
		if f.recovery() < 0 {
			s.unrecovered = append(s.unrecovered, f.Kind+" "+f.Target)
		} else if f.recovery() > s.worst {
			s.worst = f.recovery()
		}
	}

	// Final state, read at the linearizable level from inside a namespace.
	var addrs []string
	for _, c := range e.coords {
		addrs = append(addrs, e.grpcAddr(c))
	}
	vcfg := verifyConfig{Addrs: addrs, Namespace: "chaos", Graph: "g", Policy: "attrs", Acked: s.ackedIngests, Timeout: 90 * time.Second}
	if err := e.runHelper("verify", vcfg, &s.verify, 3*time.Minute); err != nil {
		t.Errorf("verify: %v", err)
	}
	s.lost = s.verify.Missing
	if s.verify.Err != "" {
		t.Errorf("verify could not read the final state: %s", s.verify.Err)
	}

	htmlPath := filepath.Join(dir, "linearizability.html")
	res, err := checkLinearizable(ops, n.faults, htmlPath, 2*time.Minute)
	if err != nil {
		t.Errorf("porcupine visualisation: %v", err)
	}
	s.lin = res
	t.Logf("chaos: porcupine visualisation: %s", htmlPath)

	hs, err := executorHoldings(filepath.Join(dir, "logs"), len(e.execs))
	if err != nil {
		t.Errorf("executor logs: %v", err)
	}
	s.holdings = len(hs)
	s.double = doubleHolds(hs)

	terms, err := schedulerTerms(e.coords)
	if err != nil {
		t.Errorf("coordinator logs: %v", err)
	}
	s.terms = len(terms)
	for term, nodes := range terms {
		if len(nodes) > 1 {
			s.multiTerm = append(s.multiTerm, fmt.Sprintf("term %d: %v", term, nodes))
		}
	}
	sort.Strings(s.multiTerm)

	// Replicas: every coordinator's state digest at one applied index.
	var haddrs []string
	for _, c := range e.coords {
		haddrs = append(haddrs, c.ip+":"+healthPort)
	}
	var dres digestResult
	if err := e.runHelper("digest", digestConfig{Addrs: haddrs, Timeout: time.Minute}, &dres, 2*time.Minute); err != nil {
		s.digestProblem = err.Error()
	} else {
		s.digestProblem, s.divergent = digestVerdict(dres.Views)
		if len(dres.Views) > 0 {
			s.digestIndex = dres.Views[0].AppliedIndex
		}
		t.Logf("chaos: state digests after %d round(s): %+v", dres.Rounds, dres.Views)
	}

	// The verdicts.
	if s.digestProblem != "" {
		t.Errorf("replica check: %s", s.digestProblem)
	}
	if len(s.lost) > 0 {
		t.Errorf("%d acknowledged ingests lost: %v", len(s.lost), first(s.lost, 20))
	}
	switch s.lin {
	case porcupine.Illegal:
		t.Errorf("register history is NOT linearizable; see %s", htmlPath)
	case porcupine.Unknown:
		t.Errorf("linearizability check timed out (inconclusive); see %s", htmlPath)
	}
	if len(s.verify.Orphans) > 0 {
		t.Errorf("%d unfinished tasks neither terminal nor held by a live executor: %v", len(s.verify.Orphans), first(s.verify.Orphans, 20))
	}
	if len(s.double) > 0 {
		t.Errorf("tasks held by two executors at once: %v", first(s.double, 20))
	}
	if len(s.multiTerm) > 0 {
		t.Errorf("more than one scheduler in a term: %v", s.multiTerm)
	}
	if len(s.unrecovered) > 0 {
		t.Errorf("no successful write within %s after healing: %v", recoveryBound, s.unrecovered)
	}
	if len(s.ackedIngests) == 0 || s.verify.Tasks == 0 {
		t.Errorf("the workload did nothing useful: %d acked ingests, %d tasks", len(s.ackedIngests), s.verify.Tasks)
	}
	return s
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func writeSummary(t *testing.T, dir string, c campaign, s summary, faults []fault, ops []op) {
	var b strings.Builder
	fmt.Fprintf(&b, "# chaos run: %d nodes, seed %d\n\n", c.nodes, c.seed)
	fmt.Fprintf(&b, "| metric | value |\n|---|---|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	kinds := map[string]int{}
	for _, f := range faults {
		kinds[f.Kind]++
	}
	var kk []string
	for k, v := range kinds {
		kk = append(kk, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(kk)
	row("faults injected", fmt.Sprintf("%d (%s)", len(faults), strings.Join(kk, ", ")))
	row("ops ok / failed / indeterminate", fmt.Sprintf("%d / %d / %d", s.ok, s.failed, s.indet))
	for _, k := range []string{"write", "read", "ingest"} {
		v := s.byKind[k]
		row("  "+k, fmt.Sprintf("%d / %d / %d", v[0], v[1], v[2]))
	}
	row("acknowledged ingests", len(s.ackedIngests))
	row("acknowledged writes lost", len(s.lost))
	row("register history linearizable", linText(s.lin))
	digests := fmt.Sprintf("%d (all %d equal at applied index %d)", s.divergent, c.nodes, s.digestIndex)
	if s.digestProblem != "" {
		digests = fmt.Sprintf("%d (%s)", s.divergent, s.digestProblem)
	}
	row("divergent replicas (state digests)", digests)
	row("register ops (indeterminate writes)", fmt.Sprintf("%d (%d)", s.registerOps, s.indetRegWrites))
	row("worst recovery after heal", s.worst.Round(time.Millisecond))
	row("faults without recovery within bound", len(s.unrecovered))
	row("tasks (terminal / held by live executor / orphaned)", fmt.Sprintf("%d (%d / %d / %d)",
		s.verify.Tasks, s.verify.Terminal, s.verify.Assigned, len(s.verify.Orphans)))
	row("executor task holdings checked (double holds)", fmt.Sprintf("%d (%d)", s.holdings, len(s.double)))
	row("scheduler terms (terms with >1 scheduler)", fmt.Sprintf("%d (%d)", s.terms, len(s.multiTerm)))
	if s.identity != nil {
		row("last: majority wiped while the minority was down", s.identity.summaryRow())
	}
	// "writes ok while held" shows availability during the fault (not a
	// check: a minority may rightly refuse writes).
	fmt.Fprintf(&b, "\n| # | fault | target | held | writes ok while held | recovery |\n|---|---|---|---|---|---|\n")
	for i, f := range faults {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %d | %s |\n", i+1, f.Kind, strings.ReplaceAll(f.Target, "|", "\\|"),
			time.Duration(f.Heal-f.Start).Round(time.Millisecond), writesOKBetween(ops, f.Start, f.Heal), fmtRecovery(f))
	}
	t.Log("\n" + b.String())
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}

func linText(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "yes"
	case porcupine.Illegal:
		return "NO"
	}
	return "unknown (timeout)"
}

// waitFor polls cond until it returns nil or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := retry.PollFor(timeout, 200*time.Millisecond, cond); err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}
