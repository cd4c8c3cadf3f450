package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// `cluster status` says when the answering node withholds its vote: a
// coordinator that starts empty in a static three-node list whose other
// members never answer can neither bootstrap nor join, so it stays held.
func TestClusterStatusShowsTheVoteHold(t *testing.T) {
	addr := func() string { return "127.0.0.1:" + strconv.Itoa(harness.FreePort(t, "127.0.0.1")) }
	grpc, raft := addr(), addr()
	harness.Start(t, "held-coordinator", "coordinator", "--node-id", "h-0", "--data-dir", t.TempDir(),
		"--coordinator-addr", grpc, "--coordinator-http-addr", addr(), "--raft-addr", raft, "--advertise", raft,
		"--bootstrap-expect", "3", "--join", "h-0="+grpc+",h-1="+addr()+",h-2="+addr())
	var out string
	harness.Eventually(t, 60*time.Second, "cluster status answers", func() error {
		var err error
		out, _, err = runCLI(t, "cluster", "status", "--coordinator", grpc, "--timeout", "5s")
		return err
	})
	if !strings.Contains(out, "VOTE HELD: h-0 started without raft state") {
		t.Fatalf("cluster status of a held node:\n%s", out)
	}
	out, _ = mustCLI(t, "cluster", "status", "-o", "json", "--coordinator", grpc, "--timeout", "5s")
	if !strings.Contains(out, `"vote_held": true`) {
		t.Fatalf("cluster status -o json of a held node:\n%s", out)
	}
}
