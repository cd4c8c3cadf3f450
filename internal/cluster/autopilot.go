package cluster

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// autopilot runs on the leader (as a leadership hook). Every tick it asks
// each server for its Status and tracks how long it has been continuously
// healthy or unhealthy:
//   - a non-voter healthy for StabilizationTime is promoted to voter;
//   - a server unhealthy for DeadServerThreshold is removed, but a voter only
//     if the remaining voters are >= MinQuorum and a healthy majority of them;
//   - NodeInfo rows of servers no longer in the configuration are deleted.
//
// It makes at most one configuration change per tick.
type autopilot struct {
	n      *Node
	mu     sync.Mutex
	health map[raft.ServerID]*serverHealth
	ticks  atomic.Int64 // completed ticks (tests observe progress)
}

type serverHealth struct {
	healthy     bool
	since       time.Time // start of the current healthy/unhealthy streak
	lastContact time.Time // last successful Status answer
	checked     time.Time
}

func newAutopilot(n *Node) *autopilot {
	return &autopilot{n: n, health: map[raft.ServerID]*serverHealth{}}
}

func (a *autopilot) interval() time.Duration {
	return max(a.n.cfg.ElectionTimeout/2, 50*time.Millisecond)
}

func (a *autopilot) run(ctx context.Context, term uint64) {
	a.mu.Lock()
	a.health = map[raft.ServerID]*serverHealth{} // a new leader judges from scratch
	a.mu.Unlock()
	t := time.NewTicker(a.interval())
	defer t.Stop()
	for {
		a.tick(ctx, term)
		a.tickDone()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// view returns the leader's current judgement of a server.
func (a *autopilot) view(id raft.ServerID) (serverHealth, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.health[id]
	if !ok {
		return serverHealth{}, false
	}
	return *h, true
}

// isHealthy: judged healthy by a recent check.
func (a *autopilot) isHealthy(id raft.ServerID) bool {
	h, ok := a.view(id)
	return ok && h.healthy && time.Since(h.checked) < 4*a.interval()
}

// check asks one server for its status. Healthy means: it answers, follows
// this leader in this term, and its log trails ours by at most MaxTrailingLag.
func (a *autopilot) check(ctx context.Context, s raft.Server, term uint64) (healthy bool, answered bool) {
	n := a.n
	st, ok := n.peerStatus(ctx, s)
	if !ok {
		return false, false
	}
	last := n.raft.LastIndex()
	caughtUp := st.LastLogIndex+n.cfg.MaxTrailingLag >= last
	return st.Term == term && st.LeaderId == n.cfg.NodeID && caughtUp, true
}

func (a *autopilot) tick(ctx context.Context, term uint64) {
	n := a.n
	if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return
	}
	cfg, _ := n.configuration()
	type result struct {
		healthy, answered bool
	}
	results := make([]result, len(cfg.Servers))
	var wg sync.WaitGroup
	for i, s := range cfg.Servers {
		if string(s.ID) == n.cfg.NodeID {
			results[i] = result{true, true}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, ans := a.check(ctx, s, term)
			results[i] = result{h, ans}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}

	now := time.Now()
	a.mu.Lock()
	inCfg := map[raft.ServerID]bool{}
	for i, s := range cfg.Servers {
		inCfg[s.ID] = true
		h, ok := a.health[s.ID]
		if !ok {
			h = &serverHealth{healthy: results[i].healthy, since: now}
			a.health[s.ID] = h
		} else if h.healthy != results[i].healthy {
			h.healthy, h.since = results[i].healthy, now
		}
		h.checked = now
		if results[i].answered {
			h.lastContact = now
		}
	}
	for id := range a.health {
		if !inCfg[id] {
			delete(a.health, id)
		}
	}
	snap := map[raft.ServerID]serverHealth{}
	for id, h := range a.health {
		snap[id] = *h
	}
	a.mu.Unlock()

	servers := append([]raft.Server(nil), cfg.Servers...)
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	if a.promote(ctx, servers, snap, now) || a.pruneDead(ctx, servers, snap, now) {
		return
	}
	a.pruneNodeInfo(ctx, inCfg)
}

// tickDone counts a completed tick whatever it decided.
func (a *autopilot) tickDone() { a.ticks.Add(1) }

func (a *autopilot) promote(ctx context.Context, servers []raft.Server, snap map[raft.ServerID]serverHealth, now time.Time) bool {
	n := a.n
	for _, s := range servers {
		h := snap[s.ID]
		if s.Suffrage == raft.Voter || !h.healthy || now.Sub(h.since) < n.cfg.StabilizationTime {
			continue
		}
		n.membershipMu.Lock()
		n.log.Info("autopilot: promoting stable non-voter", "id", s.ID)
		err := waitFuture(ctx, n.raft.AddVoter(s.ID, s.Address, 0, n.changeTimeout()))
		n.membershipMu.Unlock()
		if err != nil {
			n.log.Warn("autopilot: promotion failed", "id", s.ID, "err", err)
		}
		return true
	}
	return false
}

func (a *autopilot) pruneDead(ctx context.Context, servers []raft.Server, snap map[raft.ServerID]serverHealth, now time.Time) bool {
	n := a.n
	if n.cfg.DeadServerThreshold < 0 {
		return false
	}
	voters, healthyVoters := 0, 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters++
			if snap[s.ID].healthy {
				healthyVoters++
			}
		}
	}
	for _, s := range servers {
		h := snap[s.ID]
		if string(s.ID) == n.cfg.NodeID || h.healthy || now.Sub(h.since) < n.cfg.DeadServerThreshold {
			continue
		}
		if s.Suffrage == raft.Voter {
			remaining := voters - 1
			if remaining < n.cfg.MinQuorum || healthyVoters < remaining/2+1 {
				continue
			}
		}
		n.log.Warn("autopilot: removing dead server", "id", s.ID, "unhealthy_for", now.Sub(h.since).Round(time.Second))
		if err := n.removeServer(ctx, string(s.ID)); err != nil {
			n.log.Warn("autopilot: removal failed", "id", s.ID, "err", err)
		}
		return true
	}
	return false
}

// pruneNodeInfo deletes one NodeInfo row whose server left the configuration.
func (a *autopilot) pruneNodeInfo(ctx context.Context, inCfg map[raft.ServerID]bool) {
	n := a.n
	for _, info := range n.fsm.Store().Nodes() {
		if inCfg[raft.ServerID(info.Id)] {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, n.changeTimeout())
		_, err := n.Apply(cctx, &pb.Command{Op: &pb.Command_RemoveNode{RemoveNode: &pb.RemoveNodeCmd{Id: info.Id}}})
		cancel()
		if err != nil {
			n.log.Debug("autopilot: remove stale NodeInfo failed", "id", info.Id, "err", err)
		}
		return
	}
}
