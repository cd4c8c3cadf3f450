package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/wire"
)

// The replica check: at the end of a campaign every coordinator's state
// digest (GET /debug/state-digest: SHA-256 of the canonical state dump) is
// read at the same applied index; all must be equal.

type digestConfig struct {
	Addrs   []string      `json:"addrs"` // coordinators' health/HTTP addresses
	Timeout time.Duration `json:"timeout"`
}

// digestView is one coordinator's answer.
type digestView struct {
	Addr string `json:"addr"`
	wire.StateDigest
	Err string `json:"err,omitempty"`
}

type digestResult struct {
	Rounds int          `json:"rounds"`
	Views  []digestView `json:"views"` // the last round
}

// digestMain asks every coordinator at once, round after round, until a
// round in which all answered at the same applied index (the cluster is
// quiet) or the timeout passes; it prints that (or the last) round.
func digestMain() int {
	var cfg digestConfig
	if err := readConfig(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	var res digestResult
	retry.PollUntil(cfg.Timeout, 200*time.Millisecond, func() bool {
		res.Rounds++
		res.Views = make([]digestView, len(cfg.Addrs))
		done := make(chan struct{}, len(cfg.Addrs))
		for i, addr := range cfg.Addrs {
			go func() {
				defer func() { done <- struct{}{} }()
				v := &res.Views[i]
				v.Addr = addr
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/state-digest", nil)
				if err != nil {
					v.Err = err.Error()
					return
				}
				resp, err := hc.Do(req)
				if err != nil {
					v.Err = err.Error()
					return
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					v.Err = resp.Status
					return
				}
				if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
					v.Err = err.Error()
				}
			}()
		}
		for range cfg.Addrs {
			<-done
		}
		return sameApplied(res.Views)
	})
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

func sameApplied(vs []digestView) bool {
	for _, v := range vs {
		if v.Err != "" || v.AppliedIndex != vs[0].AppliedIndex {
			return false
		}
	}
	return len(vs) > 0
}

// digestVerdict names what is wrong with one round of digests: a node that
// did not answer, nodes at different applied indexes (no comparison was
// possible), or nodes whose digests differ at the same index (divergent
// replicas, grouped by digest). "" means every replica is identical.
// divergent counts the replicas outside the largest group of equal digests.
func digestVerdict(vs []digestView) (problem string, divergent int) {
	if len(vs) == 0 {
		return "no coordinator asked", 0
	}
	for _, v := range vs {
		if v.Err != "" {
			return fmt.Sprintf("%s did not answer: %s", v.Addr, v.Err), 0
		}
	}
	if !sameApplied(vs) {
		var parts []string
		for _, v := range vs {
			parts = append(parts, fmt.Sprintf("%s@%d", v.NodeID, v.AppliedIndex))
		}
		return "replicas never reached the same applied index: " + strings.Join(parts, " "), 0
	}
	groups := map[string][]string{}
	for _, v := range vs {
		groups[v.SHA256] = append(groups[v.SHA256], v.NodeID)
	}
	if len(groups) == 1 {
		return "", 0
	}
	largest := 0
	var parts []string
	for sum, nodes := range groups {
		sort.Strings(nodes)
		largest = max(largest, len(nodes))
		parts = append(parts, fmt.Sprintf("%v=%s", nodes, sum[:min(12, len(sum))]))
	}
	sort.Strings(parts)
	return fmt.Sprintf("divergent replicas at applied index %d: %s", vs[0].AppliedIndex, strings.Join(parts, " ")), len(vs) - largest
}
