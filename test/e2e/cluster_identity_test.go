package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// Issue 13, with real processes: coordinators 0..2 form cluster X and take a
// write; all stop; 1 and 2 lose their data and start while 0 stays down, so
// they form a new cluster Y from the same --join list and take a write; then
// 0 comes back with X's data. Y has another cluster id; 0 refuses Y, keeps
// X's state, logs an ERROR naming both ids, shows the conflict in
// `cluster status` and is not ready with the reason; 1 and 2 hold only Y's
// write and stay ready.
func TestClusterNeverMergesWithASecondClusterOfTheSameNames(t *testing.T) {
	c := harness.NewCluster(t, 3, 23)
	for i := range c.Nodes {
		c.Start(i)
	}
	c.WaitLeader(30 * time.Second)
	apiProc, api := c.StartServer()
	harness.Eventually(t, 30*time.Second, "write in cluster X", func() error { return createNamespace(api, "xonly") })
	for i := range c.Nodes {
		c.WaitReady(i, 30*time.Second)
	}
	st, err := c.Status(0)
	if err != nil {
		t.Fatal(err)
	}
	xid := st.GetClusterId()
	// A snapshot on node 0, so that alone (no leader, nothing committed
	// beyond it) its state shows X's write.
	harness.Eventually(t, 30*time.Second, "snapshot of node 0", func() error {
		out, err := c.CLI("cluster", "snapshot", "save", filepath.Join(t.TempDir(), "x.snap"), "--coordinator", c.GRPCAddr(0))
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	apiProc.Kill()
	for i := range c.Nodes {
		c.Nodes[i].Signal(syscall.SIGTERM)
	}
	for i := range c.Nodes {
		if !c.Nodes[i].Wait(30 * time.Second) {
			t.Fatalf("%s did not stop", c.Nodes[i].ID)
		}
	}
	c.Wipe(1)
	c.Wipe(2)

	c.Start(1)
	c.Start(2)
	c.WaitLeader(30 * time.Second)
	_, api = c.StartServer()
	harness.Eventually(t, 30*time.Second, "write in cluster Y", func() error { return createNamespace(api, "yonly") })
	c.WaitReady(1, 30*time.Second)
	c.WaitReady(2, 30*time.Second)
	st, err = c.Status(1)
	if err != nil {
		t.Fatal(err)
	}
	yid := st.GetClusterId()
	if yid == "" || yid == xid {
		t.Fatalf("second cluster of the same names has cluster id %q; the first had %q", yid, xid)
	}

	c.Start(0)
	h0 := harness.NewHTTP("http://" + c.HTTPAddr(0))
	harness.Eventually(t, 60*time.Second, "node 0 refuses cluster Y and says so", func() error {
		out := c.Nodes[0].Output()
		if !harness.RefusalLogged(out, xid, yid) {
			return fmt.Errorf("no ERROR line naming ours=%s theirs=%s yet", xid, yid)
		}
		code, body, err := h0.Do(context.Background(), http.MethodGet, "/readyz", "", nil)
		if err != nil {
			return err
		}
		if code == http.StatusOK || !strings.Contains(string(body), yid) {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		status, err := c.CLI("cluster", "status", "--coordinator", c.GRPCAddr(0))
		if err != nil || !strings.Contains(status, "CONFLICT") || !strings.Contains(status, xid) || !strings.Contains(status, yid) {
			return fmt.Errorf("cluster status: %v\n%s", err, status)
		}
		return nil
	})

	// Give Y's heartbeats and node 0's elections time to do harm, with a
	// write in Y meanwhile, then compare what each side holds.
	harness.Eventually(t, 30*time.Second, "second write in cluster Y", func() error { return createNamespace(api, "yafter") })
	c.WaitReady(1, 30*time.Second)
	c.WaitReady(2, 30*time.Second)
	y := namespaceSetAt(t, api, "linearizable")
	if !y["yonly"] || !y["yafter"] || y["xonly"] {
		t.Fatalf("cluster Y lists %v, want yonly and yafter, not xonly", y)
	}
	addr := "127.0.0.1:" + strconv.Itoa(harness.FreePort(t, "127.0.0.1"))
	harness.Start(t, "api-node0", "server", "--coordinator-addr", c.GRPCAddr(0), "--api-addr", addr,
		"--data-dir", filepath.Join(t.TempDir(), "api0"))
	api0 := harness.NewHTTP("http://" + addr)
	var x map[string]bool
	harness.Eventually(t, 30*time.Second, "stale read of node 0", func() error {
		code, _, err := api0.Do(context.Background(), http.MethodGet, "/", "", nil)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("api on node 0: %d %v", code, err)
		}
		x = namespaceSetAt(t, api0, "stale")
		return nil
	})
	if !x["xonly"] || x["yonly"] || x["yafter"] {
		t.Fatalf("node 0 lists %v, want only X's write xonly", x)
	}
	if st, err := c.Status(0); err != nil || st.GetClusterId() != xid || st.GetLeaderId() == c.Nodes[1].ID || st.GetLeaderId() == c.Nodes[2].ID {
		t.Fatalf("node 0 status %v %v", st, err)
	}
}
