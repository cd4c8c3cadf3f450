package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// Grow a 3-node cluster to 5 and shrink it back, taking writes throughout.
// New nodes join as non-voters and are promoted by autopilot; scale-down
// removes members explicitly (a plain stop never removes anyone).
func TestClusterScale3To5To3(t *testing.T) {
	c := harness.NewCluster(t, 5, 16)
	c.Expect = 3
	c.JoinIdx = []int{0, 1, 2}
	for i := 0; i < 3; i++ {
		c.Start(i)
	}
	c.WaitLeader(30 * time.Second)
	_, api := c.StartServer()
	harness.Eventually(t, 30*time.Second, "write on 3 nodes", func() error { return createNamespace(api, "scale-3") })

	c.Start(3)
	c.Start(4)
	c.WaitVoters(0, c.IDs(0, 1, 2, 3, 4), 60*time.Second)
	harness.Eventually(t, 30*time.Second, "write on 5 nodes", func() error { return createNamespace(api, "scale-5") })

	for _, i := range []int{4, 3} {
		out, err := c.CLI("cluster", "remove-peer", c.Nodes[i].ID, "--coordinator", c.GRPCAddr(0))
		if err != nil {
			t.Fatalf("remove-peer %s: %v\n%s", c.Nodes[i].ID, err, out)
		}
		c.Nodes[i].Signal(15)
		if !c.Nodes[i].Wait(30 * time.Second) {
			t.Fatalf("%s did not stop", c.Nodes[i].ID)
		}
	}
	c.WaitVoters(0, c.IDs(0, 1, 2), 30*time.Second)
	// Quorum is 2 of 3 again: losing one more node still leaves a working cluster.
	c.Nodes[2].Kill()
	c.WaitLeader(30 * time.Second)
	harness.Eventually(t, 30*time.Second, "write on 2 of 3 after scale-down", func() error { return createNamespace(api, "scale-back") })
	got := namespaceSet(t, api)
	for _, ns := range []string{"scale-3", "scale-5", "scale-back"} {
		if !got[ns] {
			t.Fatalf("namespace %s missing after scaling: %v", ns, got)
		}
	}
}

// The quorum-loss runbook of docs/operations.md, step by step: two of three
// nodes are lost for good; the survivor is recovered offline and the cluster
// grows back to three.
func TestClusterQuorumLossRunbook(t *testing.T) {
	c := harness.NewCluster(t, 3, 17)
	for i := range c.Nodes {
		c.Start(i)
	}
	c.WaitLeader(30 * time.Second)
	_, api := c.StartServer()
	harness.Eventually(t, 30*time.Second, "write before the disaster", func() error { return createNamespace(api, "survives") })
	// Make sure the survivor has the write before the others vanish.
	harness.Eventually(t, 30*time.Second, "survivor caught up", func() error {
		st0, err := c.Status(0)
		if err != nil {
			return err
		}
		stL, err := c.Status(c.WaitLeader(5 * time.Second))
		if err != nil {
			return err
		}
		if st0.GetAppliedIndex() < stL.GetCommitIndex() {
			return fmt.Errorf("node 0 applied %d < commit %d", st0.GetAppliedIndex(), stL.GetCommitIndex())
		}
		return nil
	})

	// Disaster: nodes 1 and 2 and their disks are gone.
	for _, i := range []int{1, 2} {
		c.Nodes[i].Kill()
		c.Wipe(i)
	}
	harness.Eventually(t, 30*time.Second, "survivor alone has no leader", func() error {
		st, err := c.Status(0)
		if err != nil {
			return err
		}
		if st.GetState() == "Leader" {
			return fmt.Errorf("still leader")
		}
		return nil
	})

	// Liveness never depends on quorum (a failing liveness probe would only
	// make Kubernetes kill the survivor); readiness does.
	health := harness.NewHTTP("http://" + c.HTTPAddr(0))
	if code, body, err := health.Do(t.Context(), http.MethodGet, "/livez", "", nil); err != nil || code != http.StatusOK {
		t.Fatalf("/livez without quorum: %d %v %s", code, err, body)
	}
	harness.Eventually(t, 30*time.Second, "/readyz reports not ready without quorum", func() error {
		code, body, err := health.Do(t.Context(), http.MethodGet, "/readyz", "", nil)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d %s", code, body)
		}
		return nil
	})

	// Runbook step 1: stop the survivor. Step 2: rewrite its peer set.
	c.Nodes[0].Signal(15)
	if !c.Nodes[0].Wait(30 * time.Second) {
		c.Nodes[0].Kill()
	}
	out, err := c.CLI("cluster", "recover", "--data-dir", c.Nodes[0].DataDir, "--node-id", c.Nodes[0].ID,
		"--peers", c.Nodes[0].ID+"="+c.RaftAddr(0))
	if err != nil {
		t.Fatalf("recover: %v\n%s", err, out)
	}
	// Step 3: start it: it leads a one-voter cluster with all its data.
	c.Start(0)
	c.WaitLeader(30 * time.Second)
	harness.Eventually(t, 30*time.Second, "recovered cluster takes writes", func() error {
		return createNamespace(api, "after-recovery")
	})
	// Step 4: start replacement nodes with empty disks: they join and are promoted.
	c.Start(1)
	c.Start(2)
	c.WaitVoters(0, c.IDs(0, 1, 2), 60*time.Second)
	got := namespaceSet(t, api)
	if !got["survives"] || !got["after-recovery"] {
		t.Fatalf("data missing after recovery: %v", got)
	}
	status, err := c.CLI("cluster", "status", "--coordinator", c.GRPCAddr(1))
	if err != nil || !strings.Contains(status, "coordinator-0") {
		t.Fatalf("cluster status: %v\n%s", err, status)
	}
}

// Across a leader change every task runs exactly once and none is lost; an
// executor connected only to a follower keeps receiving tasks.
func TestLeaderChangeNoTaskTwiceNoneLost(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs.log")
	script := writeScript(t, dir, "record.sh", fmt.Sprintf(
		"cat >/dev/null\necho \"$INDEXIFY_TASK_ID $EXECUTOR\" >> %q\necho '{\"features\":[{\"name\":\"seen\",\"value\":1}]}'\n", runs))
	cfg := writeExtractorsConfig(t, dir, "x.yaml", "test/record", script)

	c := harness.NewCluster(t, 3, 18)
	for i := range c.Nodes {
		c.Start(i)
	}
	leader := c.WaitLeader(30 * time.Second)
	follower := (leader + 1) % 3
	_, api := c.StartServer()
	startExec := func(name, targets string) {
		harness.StartEnv(t, name, []string{"EXECUTOR=" + name}, "executor", "--executor-id", name,
			"--coordinator-addr", targets, "--api-server", api.Base, "--extractors-config", cfg)
	}
	startExec("exec-follower", c.GRPCAddr(follower))
	startExec("exec-any", c.Targets())
	harness.Eventually(t, 30*time.Second, "extractor registered", func() error {
		_, body, err := api.JSON(http.MethodGet, "/extractors", nil, nil)
		if err != nil || !strings.Contains(string(body), "test/record") {
			return fmt.Errorf("extractors: %v %s", err, body)
		}
		return nil
	})
	harness.Eventually(t, 30*time.Second, "namespace", func() error { return createNamespace(api, "tasks") })
	code, body, err := api.Do(t.Context(), http.MethodPost, "/namespaces/tasks/extraction_graphs", "application/x-yaml",
		strings.NewReader("name: g\nextraction_policies:\n  - extractor: test/record\n    name: rec\n"))
	if err != nil || code/100 != 2 {
		t.Fatalf("graph: %d %v %s", code, err, body)
	}

	const total = 40
	var ids []string
	uploadOne := func(i int) {
		harness.Eventually(t, 30*time.Second, "upload", func() error {
			code, body, err := uploadRaw(api, http.MethodPost, "/namespaces/tasks/extraction_graphs/g/extract",
				fmt.Sprintf("doc-%d", i), []byte(fmt.Sprintf("payload %d", i)), nil)
			if err != nil {
				return err
			}
			if code/100 != 2 {
				return fmt.Errorf("upload %d: %d %s", i, code, body)
			}
			return nil
		})
		ids = append(ids, fmt.Sprintf("doc-%d", i))
	}
	for i := 0; i < total/2; i++ {
		uploadOne(i)
	}
	c.Nodes[leader].Kill()
	for i := total / 2; i < total; i++ {
		uploadOne(i)
	}
	for _, id := range ids {
		waitContent(t, api, "tasks", id)
	}

	ts := tasks(t, api, "tasks", "g", "rec")
	if len(ts) != total {
		t.Fatalf("%d tasks, want %d", len(ts), total)
	}
	for _, tk := range ts {
		if tk.Outcome != "success" {
			t.Errorf("task %s ended %q", tk.ID, tk.Outcome)
		}
	}
	f, err := os.Open(runs)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	count := map[string]int{}
	byExec := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 {
			count[fields[0]]++
			byExec[fields[1]]++
		}
	}
	for id, n := range count {
		if n != 1 {
			t.Errorf("task %s ran %d times", id, n)
		}
	}
	if len(count) != total {
		t.Errorf("%d distinct tasks ran, want %d", len(count), total)
	}
	if byExec["exec-follower"] == 0 {
		t.Errorf("the executor connected to a follower ran no task: %v", byExec)
	}
	t.Logf("tasks per executor: %v", byExec)
}

// Every node stops and comes back with a new address but the same name and
// disk: the same cluster re-forms with nothing lost, with no membership surgery.
func TestClusterFullRestartWithNewAddresses(t *testing.T) {
	c := harness.NewCluster(t, 3, 19)
	for i := range c.Nodes {
		c.Start(i)
	}
	c.WaitLeader(30 * time.Second)
	api1, api := c.StartServer()
	harness.Eventually(t, 30*time.Second, "write before restart", func() error { return createNamespace(api, "before-move") })
	c.WaitReady(0, 30*time.Second) // ready implies the cluster id is known
	before, err := c.Status(0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Nodes {
		c.Nodes[i].Signal(15)
	}
	for i := range c.Nodes {
		if !c.Nodes[i].Wait(30 * time.Second) {
			t.Fatalf("%s did not stop", c.Nodes[i].ID)
		}
	}
	api1.Kill()
	for i := range c.Nodes {
		c.Readdress(i, fmt.Sprintf("127.0.19.%d", 11+i))
	}
	for i := range c.Nodes {
		c.Start(i)
	}
	c.WaitLeader(60 * time.Second)
	_, api = c.StartServer()
	harness.Eventually(t, 30*time.Second, "write after every address changed", func() error { return createNamespace(api, "after-move") })
	got := namespaceSet(t, api)
	if !got["before-move"] || !got["after-move"] {
		t.Fatalf("namespaces after the move: %v", got)
	}
	harness.Eventually(t, 30*time.Second, "configuration holds the new addresses", func() error {
		st, err := c.Status(0)
		if err != nil {
			return err
		}
		if st.GetClusterId() != before.GetClusterId() {
			return fmt.Errorf("cluster id %q, want %q", st.GetClusterId(), before.GetClusterId())
		}
		for _, m := range st.GetMembers() {
			if m.GetSuffrage() != "voter" || !strings.HasPrefix(m.GetRaftAddr(), "127.0.19.1") {
				return fmt.Errorf("member %s: %s %s", m.GetId(), m.GetSuffrage(), m.GetRaftAddr())
			}
		}
		if len(st.GetMembers()) != 3 {
			return fmt.Errorf("%d members", len(st.GetMembers()))
		}
		return nil
	})
}

// A snapshot saved with the CLI and restored through a follower replaces the
// state on every node.
func TestClusterSnapshotSaveRestoreCLI(t *testing.T) {
	c := harness.NewCluster(t, 3, 29)
	for i := range c.Nodes {
		c.Start(i)
	}
	leader := c.WaitLeader(30 * time.Second)
	_, api := c.StartServer()
	harness.Eventually(t, 30*time.Second, "write a", func() error { return createNamespace(api, "kept") })
	file := filepath.Join(t.TempDir(), "backup.snap")
	if out, err := c.CLI("cluster", "snapshot", "save", file, "--coordinator", c.Targets()); err != nil {
		t.Fatalf("save: %v\n%s", err, out)
	}
	harness.Eventually(t, 30*time.Second, "write b", func() error { return createNamespace(api, "after-backup") })
	follower := (leader + 1) % 3
	if out, err := c.CLI("cluster", "snapshot", "restore", file, "--coordinator", c.GRPCAddr(follower)); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	got := namespaceSet(t, api)
	if !got["kept"] || got["after-backup"] {
		t.Fatalf("after restore: %v, want kept and not after-backup", got)
	}
	bad := filepath.Join(t.TempDir(), "garbage.snap")
	if err := os.WriteFile(bad, []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.CLI("cluster", "snapshot", "restore", bad, "--coordinator", c.Targets()); err == nil {
		t.Fatalf("a garbage snapshot was restored:\n%s", out)
	}
	if got := namespaceSet(t, api); !got["kept"] {
		t.Fatalf("a refused restore changed the state: %v", got)
	}
}
