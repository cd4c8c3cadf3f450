package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/bench/loadgen"
	"github.com/indexify-go/indexify/internal/coordclient"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"github.com/indexify-go/indexify/test/harness"
)

// subnets hands each cluster of a run its own 127.0.N.0/24, so addresses
// never collide with a cluster of the same run that is still shutting down.
var subnetSeq atomic.Int32

func nextSubnet() int { return 200 + int(subnetSeq.Add(1))%50 }

// ourCluster is n coordinator processes of the real binary.
type ourCluster struct {
	*harness.Cluster
	r    *runner
	conn *grpc.ClientConn
	cl   pb.CoordinatorServiceClient
}

func startOurs(r *runner, n int, extra ...string) *ourCluster {
	c := &ourCluster{Cluster: harness.NewCluster(r, n, nextSubnet(), extra...), r: r}
	for i := range n {
		c.Start(i)
	}
	c.WaitLeader(60 * time.Second)
	for i := range n {
		c.WaitReady(i, 60*time.Second)
	}
	conn, err := coordclient.Dial(coordclient.ParseTargets(c.Targets()))
	if err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { conn.Close() })
	c.conn, c.cl = conn, pb.NewCoordinatorServiceClient(conn)
	return c
}

// pprofEnv makes every coordinator process serve pprof on a unix socket
// (see cmd/indexify/pprof.go) when profiling was asked for.
func pprofEnv(r *runner, o options) string {
	if !o.profile {
		return ""
	}
	dir := r.TempDir()
	os.Setenv("INDEXIFY_PPROF_DIR", dir)
	r.Cleanup(func() { os.Unsetenv("INDEXIFY_PPROF_DIR") })
	return dir
}

// profileKeep is options.profileKeep (set by schedSuite).
var profileKeep string

// cpuTop takes a CPU profile of node id for d and returns `go tool pprof
// -top` output (first lines).
func cpuTop(dir, id string, d time.Duration, lines int) string {
	sock := filepath.Join(dir, id+".sock")
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (netConn, error) {
		return dialUnix(ctx, sock)
	}}}
	url := fmt.Sprintf("http://pprof/debug/pprof/profile?seconds=%d", int(d.Seconds()))
	resp, err := cl.Get(url)
	if err != nil {
		return "profile failed: " + err.Error()
	}
	defer resp.Body.Close()
	f, err := os.CreateTemp(dir, "cpu-*.pprof")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.ReadFrom(resp.Body); err != nil {
		return err.Error()
	}
	if profileKeep != "" {
		if b, err := os.ReadFile(f.Name()); err == nil {
			os.MkdirAll(profileKeep, 0o755)
			os.WriteFile(filepath.Join(profileKeep, id+".pprof"), b, 0o644)
		}
	}
	return pprofTop(f.Name(), lines)
}

// setupContent creates namespace "bench" and content items w0..w(n-1), the
// targets of the label-update writes.
func (c *ourCluster) setupContent(ctx context.Context, n int) {
	if _, err := c.cl.CreateNamespace(ctx, &pb.CreateNamespaceRequest{Name: "bench"}); err != nil && status.Code(err) != codes.AlreadyExists {
		c.r.Fatal(err)
	}
	var cs []*pb.Content
	for i := range n {
		id := "w" + strconv.Itoa(i)
		cs = append(cs, &pb.Content{Namespace: "bench", Id: id, Name: id, MimeType: "text/plain", Hash: fmt.Sprintf("%064d", i)})
	}
	if _, err := c.cl.CreateContent(ctx, &pb.CreateContentRequest{Contents: cs, RequestId: fmt.Sprintf("setup-%d", time.Now().UnixNano())}); err != nil {
		c.r.Fatal(err)
	}
}

// labelWrite is our small write: replace the labels of content w<client>
// with {"v": <JSON string of size bytes>} via CoordinatorService.UpdateLabels
// with a request id (as the API server sends it). etcd's counterpart is a Put
// of a size-byte value to key bench/<client>.
func labelWrite(cl pb.CoordinatorServiceClient, size int, run string) loadgen.Op {
	return labelWriteSized(cl, "bench", "w%d", size, run)
}

// labelWriteNS writes 64 B label values to content fmt.Sprintf(idFmt, client).
func labelWriteNS(cl pb.CoordinatorServiceClient, ns, idFmt string, size int, run string) loadgen.Op {
	return labelWriteSized(cl, ns, idFmt, size, run)
}

func labelWriteSized(cl pb.CoordinatorServiceClient, ns, idFmt string, size int, run string) loadgen.Op {
	val := loadgen.Payload(size, true)
	return func(ctx context.Context, c, i int) error {
		_, err := cl.UpdateLabels(ctx, &pb.UpdateLabelsRequest{
			Namespace: ns, ContentId: fmt.Sprintf(idFmt, c),
			Labels:    map[string]string{"v": val},
			RequestId: run + "-" + strconv.Itoa(c) + "-" + strconv.Itoa(i),
		})
		return err
	}
}

// leaderID returns the current leader's node id and index.
func (c *ourCluster) leader() (int, string) {
	i := c.WaitLeader(60 * time.Second)
	return i, c.Nodes[i].ID
}

func joinInts(v []int) string {
	var s []string
	for _, x := range v {
		s = append(s, strconv.Itoa(x))
	}
	return strings.Join(s, ",")
}
