package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/indexify-go/indexify/bench/loadgen"
	"github.com/indexify-go/indexify/test/harness"
)

// etcdPeerBinary builds bench/etcdpeer (its own module) once.
var etcdBuild struct {
	once sync.Once
	path string
	err  error
}

func etcdPeerBinary() (string, error) {
	etcdBuild.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		dir := filepath.Join(filepath.Dir(file), "etcdpeer")
		tmp, err := os.MkdirTemp("", "indexify-bench-etcdpeer-")
		if err != nil {
			etcdBuild.err = err
			return
		}
		out := filepath.Join(tmp, "etcdpeer")
		cmd := exec.Command("go", "build", "-o", out, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			etcdBuild.err = fmt.Errorf("build etcd peer: %v\n%s", err, b)
			return
		}
		etcdBuild.path = out
	})
	return etcdBuild.path, etcdBuild.err
}

// etcdMember is one etcd process.
type etcdMember struct {
	name, dir, client, peer string
	cmd                     *exec.Cmd
	done                    chan struct{}
}

// etcdCluster is a 3-member etcd cluster on loopback.
type etcdCluster struct {
	r       *runner
	bin     string
	members []*etcdMember
	initial string
}

func startEtcd(r *runner, n int) *etcdCluster {
	bin, err := etcdPeerBinary()
	if err != nil {
		r.Fatal(err)
	}
	base := r.TempDir()
	c := &etcdCluster{r: r, bin: bin}
	var parts []string
	for i := range n {
		m := &etcdMember{
			name:   fmt.Sprintf("etcd-%d", i),
			dir:    filepath.Join(base, fmt.Sprintf("m%d", i)),
			client: fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(r, "127.0.0.1")),
			peer:   fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(r, "127.0.0.1")),
		}
		c.members = append(c.members, m)
		parts = append(parts, m.name+"="+m.peer)
	}
	c.initial = strings.Join(parts, ",")
	for i := range c.members {
		c.start(i)
	}
	for i := range c.members {
		c.waitReady(i)
	}
	r.Cleanup(func() {
		for i := range c.members {
			c.kill(i)
		}
	})
	return c
}

// start (re)starts member i on its data directory; a restarted member finds
// its state there and ignores the initial cluster.
func (c *etcdCluster) start(i int) {
	m := c.members[i]
	m.cmd = exec.Command(c.bin, "serve", "--name", m.name, "--dir", m.dir, "--client", m.client,
		"--peer", m.peer, "--cluster", c.initial)
	m.cmd.Stderr = os.Stderr
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		c.r.Fatal(err)
	}
	m.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(m.cmd, m.done)
}

func (c *etcdCluster) running(i int) bool {
	m := c.members[i]
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

func (c *etcdCluster) kill(i int) {
	if c.running(i) {
		syscall.Kill(-c.members[i].cmd.Process.Pid, syscall.SIGKILL)
		<-c.members[i].done
	}
}

// term sends SIGTERM and waits for the graceful stop.
func (c *etcdCluster) term(i int) {
	if !c.running(i) {
		return
	}
	c.members[i].cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.members[i].done:
	case <-time.After(30 * time.Second):
		c.kill(i)
	}
}

func (c *etcdCluster) endpoints() string {
	var e []string
	for _, m := range c.members {
		e = append(e, m.client)
	}
	return strings.Join(e, ",")
}

// status asks member i (through etcd's JSON gateway) for its id and leader.
func (c *etcdCluster) status(i int) (id, leader string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", c.members[i].client+"/v3/maintenance/status", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader string `json:"leader"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return "", "", err
	}
	return st.Header.MemberID, st.Leader, nil
}

func (c *etcdCluster) waitReady(i int) {
	harness.Eventually(c.r, 60*time.Second, c.members[i].name+" has a leader", func() error {
		_, l, err := c.status(i)
		if err != nil {
			return err
		}
		if l == "" || l == "0" {
			return fmt.Errorf("no leader")
		}
		return nil
	})
}

// waitLeader returns the index of the leader every running member agrees on.
func (c *etcdCluster) waitLeader() int {
	idx := -1
	harness.Eventually(c.r, 60*time.Second, "etcd leader agreed", func() error {
		ids := map[string]int{}
		var leader string
		for i := range c.members {
			if !c.running(i) {
				continue
			}
			id, l, err := c.status(i)
			if err != nil {
				return err
			}
			ids[id] = i
			if l == "" || l == "0" || (leader != "" && l != leader) {
				return fmt.Errorf("leader %q vs %q", l, leader)
			}
			leader = l
		}
		i, ok := ids[leader]
		if !ok {
			return fmt.Errorf("leader %s not among running members", leader)
		}
		idx = i
		return nil
	})
	return idx
}

// load runs the shared load generator against etcd in a separate process
// (the etcdpeer binary links etcd's client; this program does not).
func (c *etcdCluster) load(clients, size int, o options) (loadgen.Result, error) {
	args := []string{"load", "--endpoints", c.endpoints(), "--clients", strconv.Itoa(clients),
		"--value-size", strconv.Itoa(size), "--duration", o.duration.String(), "--warmup", warmup(o).String()}
	out, err := exec.Command(c.bin, args...).Output()
	if err != nil {
		return loadgen.Result{}, fmt.Errorf("etcd load: %v", err)
	}
	var res loadgen.Result
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		return res, fmt.Errorf("etcd load output %q: %v", out, err)
	}
	return res, nil
}

// probe starts the etcd probe process; successes are collected until stop.
func (c *etcdCluster) probe(writers int, max time.Duration) (succ *probeSet, stop func()) {
	cmd := exec.Command(c.bin, "probe", "--endpoints", c.endpoints(), "--writers", strconv.Itoa(writers),
		"--duration", max.String())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		c.r.Fatal(err)
	}
	succ = &probeSet{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var a, b int64
			if _, err := fmt.Sscanf(sc.Text(), "ok %d %d", &a, &b); err == nil {
				succ.add(loadgen.Success{Start: time.Unix(0, a), End: time.Unix(0, b)})
			} else if _, err := fmt.Sscanf(sc.Text(), "err %d %d", &a, &b); err == nil {
				succ.fail(loadgen.Success{Start: time.Unix(0, a), End: time.Unix(0, b)})
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		stdin.Close()
		<-done
		cmd.Wait()
	}
	c.r.Cleanup(stop)
	return succ, stop
}

func warmup(o options) time.Duration {
	if o.quick {
		return 200 * time.Millisecond
	}
	return time.Second
}
