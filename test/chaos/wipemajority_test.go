package chaos

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// The identity fault (issue 13 item 1): the minority of the coordinators
// stops, the majority loses its disks and starts again -- a new cluster,
// bootstrapped from the same --join list, with a new random cluster id --
// and then the minority returns with the old cluster's data. The returning
// nodes must refuse the new cluster and say so, and their replicas must stay
// what their own log made them.
//
// This fault discards the old cluster's acknowledged writes by design (the
// operator wiped a majority), so it cannot run inside the campaign, whose
// checks demand that no acknowledged write is lost and that every replica
// ends equal. It is the campaign's last act instead: it runs after the
// campaign's history has been checked (lost writes, linearizability, task
// invariants, replica digests of the old cluster) and has checks of its own
// (test/chaos/DESIGN.md).
const kWipeMajority = "wipe-majority-minority-down"

// identityWait bounds each wait of the identity fault: the new cluster's
// first leader and write, and the returning node's refusal.
const identityWait = 90 * time.Second

// identityResult is what the identity fault found.
type identityResult struct {
	Minority []string
	OldID    string
	NewID    string
	// Pinned is the digest of each minority node's last snapshot, taken
	// just before it stopped; Returned what it answers after coming back.
	// Equal means its state still derives from its own log only.
	Pinned, Returned map[string]digestView
	// NewViews are the new cluster's replicas at the end.
	NewViews []digestView
	Problems []string
}

func (r *identityResult) fail(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// summaryRow is the result in one line for the run's summary.
func (r identityResult) summaryRow() string {
	if len(r.Problems) > 0 {
		return "FAILED: " + strings.Join(r.Problems, "; ")
	}
	var pinned []string
	for _, id := range r.Minority {
		pinned = append(pinned, fmt.Sprintf("%s@%d", id, r.Pinned[id].AppliedIndex))
	}
	applied := uint64(0)
	if len(r.NewViews) > 0 {
		applied = r.NewViews[0].AppliedIndex
	}
	return fmt.Sprintf("refused: old cluster %s, new cluster %s; returning replica unchanged (%s); new cluster's %d replicas equal at %d",
		r.OldID, r.NewID, strings.Join(pinned, ", "), len(r.NewViews), applied)
}

// wipeMajority injects the identity fault and checks its outcome.
func (n *nemesis) wipeMajority() (fault, identityResult) {
	e := n.e
	f := fault{Kind: kWipeMajority}
	res := identityResult{Pinned: map[string]digestView{}, Returned: map[string]digestView{}}
	l := e.wholeLeader(wholeWait)
	if l == nil {
		res.fail("cluster not whole before the fault")
		return f, res
	}
	for _, s := range e.status() {
		if s.ID == l.id {
			res.OldID = s.ClusterID
		}
	}
	if res.OldID == "" {
		res.fail("leader %s reports no cluster id", l.id)
		return f, res
	}
	perm := n.rng.Perm(len(e.coords))
	var minority, majority []*coord
	for i, p := range perm {
		if i < len(perm)/2 {
			minority = append(minority, e.coords[p])
			res.Minority = append(res.Minority, e.coords[p].id)
		} else {
			majority = append(majority, e.coords[p])
		}
	}
	f.Target = names(majority) + " wiped while " + names(minority) + " down"

	f.Start = time.Now().UnixNano()
	for _, m := range minority {
		v, err := e.stopPinned(m)
		if err != nil {
			res.fail("%s: %v", m.id, err)
			return f, res
		}
		res.Pinned[m.id] = v
	}
	for _, c := range majority {
		c.p.kill()
		if err := os.RemoveAll(c.dataDir); err != nil {
			res.fail("wipe %s: %v", c.id, err)
			return f, res
		}
	}
	for _, c := range majority {
		e.startCoord(c)
	}
	err := retry.PollFor(identityWait, 200*time.Millisecond, func() error {
		for _, s := range e.status() {
			if s.State == "Leader" && s.ClusterID != "" {
				res.NewID = s.ClusterID
				return nil
			}
		}
		return fmt.Errorf("no leader with a cluster id among %s", names(majority))
	})
	if err != nil {
		res.fail("new cluster: %v", err)
		return f, res
	}
	if res.NewID == res.OldID {
		res.fail("the new cluster has the old cluster's id %s", res.OldID)
		return f, res
	}
	// A write in the new cluster (through the campaign's API server, which
	// knows every coordinator's address).
	err = retry.PollFor(identityWait, 200*time.Millisecond, func() error {
		r, err := e.httpDo(http.MethodPost, e.apiURL()+"/namespaces", `{"name":"yonly"}`)
		if err != nil {
			return err
		}
		if r.Code/100 != 2 && r.Code != http.StatusConflict {
			return fmt.Errorf("%d %s", r.Code, r.Body)
		}
		return nil
	})
	if err != nil {
		res.fail("write in the new cluster: %v", err)
		return f, res
	}

	f.Heal = time.Now().UnixNano()
	for _, m := range minority {
		e.startCoord(m)
	}
	for _, m := range minority {
		if err := e.awaitRefusal(m, res.OldID, res.NewID); err != nil {
			res.fail("%s: %v", m.id, err)
		}
	}
	f.Recovered = time.Now().UnixNano()

	// The returning replicas: exactly what they held when they stopped.
	for _, m := range minority {
		vs, err := e.digests([]*coord{m})
		if err != nil {
			res.fail("digest of %s: %v", m.id, err)
			continue
		}
		v, pin := vs[0], res.Pinned[m.id]
		res.Returned[m.id] = v
		if v.AppliedIndex != pin.AppliedIndex || v.SHA256 != pin.SHA256 {
			res.fail("%s's replica changed: %s@%d before, %s@%d after", m.id, short(pin.SHA256), pin.AppliedIndex, short(v.SHA256), v.AppliedIndex)
		}
	}
	for _, st := range e.status() {
		for _, m := range minority {
			if st.ID != m.id {
				continue
			}
			if st.ClusterID != res.OldID {
				res.fail("%s reports cluster %q, want its own %s", m.id, st.ClusterID, res.OldID)
			}
			for _, c := range majority {
				if st.Leader == c.id {
					res.fail("%s follows %s of the new cluster", m.id, c.id)
				}
			}
		}
	}
	// The new cluster's replicas agree among themselves.
	vs, err := e.digests(majority)
	res.NewViews = vs
	if err != nil {
		res.fail("new cluster's digests: %v", err)
	} else if problem, _ := digestVerdict(vs); problem != "" {
		res.fail("new cluster: %s", problem)
	} else {
		for _, m := range minority {
			if vs[0].SHA256 == res.Returned[m.id].SHA256 {
				res.fail("%s holds the new cluster's state", m.id)
			}
		}
	}
	return f, res
}

func short(sum string) string { return sum[:min(12, len(sum))] }

// stopPinned stops c right after a Raft snapshot of its whole applied
// state, and returns that state's digest (state.Store.Digest of the saved
// snapshot, as GET /debug/state-digest computes it). A node without a
// leader applies nothing beyond its latest snapshot, so if c comes back
// with its state derived from its own log only, it answers this digest.
func (e *env) stopPinned(c *coord) (digestView, error) {
	path := filepath.Join(e.dir, c.id+"-pinned.snap")
	var out string
	err := retry.PollFor(time.Minute, time.Second, func() error {
		var err error
		out, err = e.cli(time.Minute, "cluster", "snapshot", "save", path, "--coordinator", e.grpcAddr(c))
		return err
	})
	c.p.kill()
	if err != nil {
		return digestView{}, fmt.Errorf("snapshot: %v: %s", err, out)
	}
	f, err := os.Open(path)
	if err != nil {
		return digestView{}, err
	}
	defer f.Close()
	st := state.NewStore()
	if err := st.Restore(f); err != nil {
		return digestView{}, fmt.Errorf("read the saved snapshot: %w", err)
	}
	applied, sum := st.Digest()
	return digestView{StateDigest: wire.StateDigest{NodeID: c.id, AppliedIndex: applied, SHA256: hex.EncodeToString(sum[:])}}, nil
}

// awaitRefusal waits until the returning node m says, in each of the three
// places the issue names, that it refuses the other cluster.
func (e *env) awaitRefusal(m *coord, ours, theirs string) error {
	return retry.PollFor(identityWait, 500*time.Millisecond, func() error {
		out, err := os.ReadFile(m.logPath)
		if err != nil {
			return err
		}
		if !harness.RefusalLogged(string(out), ours, theirs) {
			return fmt.Errorf("no ERROR line naming ours=%s theirs=%s in %s", ours, theirs, m.logPath)
		}
		r, err := e.httpDo(http.MethodGet, "http://"+m.ip+":"+healthPort+"/readyz", "")
		if err != nil {
			return err
		}
		if r.Code == http.StatusOK || !strings.Contains(r.Body, theirs) {
			return fmt.Errorf("readyz %d %q", r.Code, r.Body)
		}
		status, err := e.cli(30*time.Second, "cluster", "status", "--coordinator", e.grpcAddr(m))
		if err != nil || !strings.Contains(status, "CONFLICT") || !strings.Contains(status, ours) || !strings.Contains(status, theirs) {
			return fmt.Errorf("cluster status: %v\n%s", err, status)
		}
		return nil
	})
}

// digests reads the state digests of cs at one applied index.
func (e *env) digests(cs []*coord) ([]digestView, error) {
	var addrs []string
	for _, c := range cs {
		addrs = append(addrs, c.ip+":"+healthPort)
	}
	var res digestResult
	if err := e.runHelper("digest", digestConfig{Addrs: addrs, Timeout: time.Minute}, &res, 2*time.Minute); err != nil {
		return nil, err
	}
	for _, v := range res.Views {
		if v.Err != "" {
			return nil, fmt.Errorf("%s: %s", v.Addr, v.Err)
		}
	}
	return res.Views, nil
}

// cli runs the indexify CLI inside the clients' namespace.
func (e *env) cli(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", e.clientNS, e.bin}, args...)...).CombinedOutput()
	return string(out), err
}

type httpConfig struct {
	Method string `json:"method"`
	URL    string `json:"url"`
	Body   string `json:"body"`
}

type httpResult struct {
	Code int    `json:"code"`
	Body string `json:"body"`
	Err  string `json:"err,omitempty"`
}

// httpDo makes one HTTP request from the clients' namespace.
func (e *env) httpDo(method, url, body string) (httpResult, error) {
	var r httpResult
	if err := e.runHelper("http", httpConfig{Method: method, URL: url, Body: body}, &r, 20*time.Second); err != nil {
		return r, err
	}
	if r.Err != "" {
		return r, fmt.Errorf("%s %s: %s", method, url, r.Err)
	}
	return r, nil
}

// httpMain is the helper behind httpDo.
func httpMain() int {
	var cfg httpConfig
	if err := readConfig(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var r httpResult
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, cfg.Method, cfg.URL, bytes.NewReader([]byte(cfg.Body)))
	if err == nil {
		if cfg.Body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			r.Code, r.Body = resp.StatusCode, string(b)
		}
	}
	if err != nil {
		r.Err = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}
