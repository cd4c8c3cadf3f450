package chaos

import (
	"fmt"
	"math/rand"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/indexify-go/indexify/internal/retry"
)

// Fault kinds. Every fault is injected, held for a random time, then healed;
// the nemesis then waits until a write succeeds again (the recovery time).
const (
	kKillLeader    = "kill-leader"
	kKillFollower  = "kill-follower"
	kPause         = "pause"           // SIGSTOP beyond the election timeout, then SIGCONT
	kIsolateLeader = "isolate-leader"  // leader cut off from every other coordinator
	kMajority      = "partition-2|1"   // 3 nodes 2|1, 5 nodes 2|3
	kSplit         = "partition-1|1|1" // no majority anywhere (5 nodes: 2|2|1)
	kNewAddress    = "new-address"     // restart with another IP, same id
	kWipe          = "wipe-follower"   // follower's disk wiped, then rejoins
	kRestartAll    = "restart-all"     // every coordinator killed, then started
	kSlowLink      = "slow-link"       // latency on the links into coordinator-0
	// A follower's disk wiped and the follower restarted, then the leader
	// crashed at once: the wiped voter's window (issue 13 item 2). Without
	// the vote hold, the wiped node's vote could elect a peer that lacks
	// entries the lost copy helped commit.
	kWipeKillLeader = "wipe-follower+kill-leader"
)

var allFaults = []string{kKillLeader, kKillFollower, kPause, kIsolateLeader, kMajority, kSplit,
	kNewAddress, kWipe, kRestartAll, kSlowLink, kWipeKillLeader}

// fault records one injection.
type fault struct {
	Kind      string
	Target    string
	Start     int64 // unix ns
	Heal      int64
	Recovered int64 // return time of the first successful write after Heal; 0 = none
	Note      string
}

func (f fault) recovery() time.Duration {
	if f.Recovered == 0 {
		return -1
	}
	return time.Duration(f.Recovered - f.Heal)
}

// wholeWait bounds the wait for a whole cluster (every coordinator a
// healthy voter) before a wipe.
const wholeWait = time.Minute

type nemesis struct {
	e       *env
	rng     *rand.Rand
	hist    *historyTail
	bound   time.Duration // writes must succeed again within this after a heal
	faults  []fault
	home    map[string]string // original address per coordinator
	logf    func(string, ...any)
	timeout time.Duration // the coordinators' election timeout
	// partitionHold, if set, replaces the random hold of partitions.
	partitionHold time.Duration
}

func (n *nemesis) pick(cs []*coord) *coord { return cs[n.rng.Intn(len(cs))] }

// leaderOr finds the leader; without one it names a random node.
func (n *nemesis) leaderOr(f *fault) *coord {
	if l := n.e.leader(15 * time.Second); l != nil {
		return l
	}
	f.Note = "no agreed leader; random node"
	return n.pick(n.e.coords)
}

func (n *nemesis) followers(l *coord) []*coord {
	var out []*coord
	for _, c := range n.e.coords {
		if c != l {
			out = append(out, c)
		}
	}
	return out
}

func (n *nemesis) hold(min, max time.Duration) {
	time.Sleep(min + time.Duration(n.rng.Int63n(int64(max-min)+1))) // the fault's duration
}

// holdPartition holds a partition up to 10 s: longer than the API server's
// default 8 s request timeout, so some client operations fail or end
// ambiguously.
func (n *nemesis) holdPartition() {
	if n.partitionHold > 0 {
		time.Sleep(n.partitionHold) // the fault's duration
		return
	}
	n.hold(2*time.Second, 10*time.Second)
}

// partition cuts every link between coordinators of different groups.
func (n *nemesis) partition(groups [][]*coord) error {
	for gi, g := range groups {
		for _, c := range g {
			var others []string
			for gj, h := range groups {
				if gj == gi {
					continue
				}
				for _, o := range h {
					others = append(others, o.ip)
				}
			}
			if err := block(c.ns, others...); err != nil {
				return err
			}
		}
	}
	return nil
}

func (n *nemesis) healNetwork() error {
	for _, c := range n.e.coords {
		if err := unblock(c.ns); err != nil {
			return err
		}
	}
	return nil
}

func names(cs []*coord) string {
	var s []string
	for _, c := range cs {
		s = append(s, strings.TrimPrefix(c.id, "coordinator-"))
	}
	return strings.Join(s, ",")
}

// inject runs one fault of kind to its heal and returns the record.
func (n *nemesis) inject(kind string) (fault, error) {
	e := n.e
	f := fault{Kind: kind}
	var err error
	switch kind {
	case kKillLeader, kKillFollower, kWipe:
		var l *coord
		wipe := kind == kWipe
		if wipe {
			if l = e.wholeLeader(wholeWait); l == nil {
				wipe, f.Note = false, "cluster not whole: killed instead of wiped"
			}
		}
		if l == nil {
			l = n.leaderOr(&f)
		}
		victim := l
		if kind != kKillLeader {
			victim = n.pick(n.followers(l))
		}
		f.Target = victim.id
		f.Start = time.Now().UnixNano()
		victim.p.kill()
		if wipe {
			err = os.RemoveAll(victim.dataDir)
			n.hold(500*time.Millisecond, time.Second)
		} else {
			n.hold(time.Second, 4*time.Second)
		}
		e.startCoord(victim)
	case kWipeKillLeader:
		l := e.wholeLeader(wholeWait)
		wipe := l != nil
		if !wipe {
			l = n.leaderOr(&f)
			f.Note = "cluster not whole: follower restarted without wiping"
		}
		victim := n.pick(n.followers(l))
		f.Target = victim.id + " wiped, " + l.id + " killed"
		f.Start = time.Now().UnixNano()
		victim.p.kill()
		if wipe {
			err = os.RemoveAll(victim.dataDir)
		}
		e.startCoord(victim)
		// The leader dies while the wiped node is starting or catching up.
		n.hold(0, 500*time.Millisecond)
		l.p.kill()
		n.hold(time.Second, 4*time.Second)
		e.startCoord(l)
	case kPause:
		victim := n.pick(e.coords)
		if l := e.leader(15 * time.Second); l != nil && n.rng.Intn(2) == 0 {
			victim = l
		}
		f.Target = victim.id
		f.Start = time.Now().UnixNano()
		err = victim.p.signal(syscall.SIGSTOP)
		n.hold(3*n.timeout, 6*n.timeout)
		if e2 := victim.p.signal(syscall.SIGCONT); err == nil {
			err = e2
		}
	case kIsolateLeader:
		l := n.leaderOr(&f)
		f.Target = l.id
		f.Start = time.Now().UnixNano()
		err = n.partition([][]*coord{{l}, n.followers(l)})
		n.holdPartition()
	case kMajority, kSplit:
		perm := n.rng.Perm(len(e.coords))
		cs := make([]*coord, len(perm))
		for i, p := range perm {
			cs[i] = e.coords[p]
		}
		var groups [][]*coord
		switch {
		case kind == kMajority:
			groups = [][]*coord{cs[:len(cs)/2], cs[len(cs)/2:]} // 1|2, 2|3
		case len(cs) == 3:
			groups = [][]*coord{cs[:1], cs[1:2], cs[2:]}
		default:
			groups = [][]*coord{cs[:2], cs[2:4], cs[4:]}
		}
		var parts []string
		for _, g := range groups {
			parts = append(parts, names(g))
		}
		f.Target = strings.Join(parts, " | ")
		f.Start = time.Now().UnixNano()
		err = n.partition(groups)
		n.holdPartition()
	case kNewAddress:
		// At most one node is away from its original address, so the API
		// server and executors (given the original list) always know a
		// majority; a moved node moves back home (again a new address).
		var victim *coord
		for _, c := range e.coords {
			if c.ip != n.home[c.id] {
				victim = c
			}
		}
		ip := ""
		if victim != nil {
			ip = n.home[victim.id]
		} else {
			victim, ip = n.pick(e.coords), e.newIP()
		}
		f.Target = victim.id + " " + victim.ip + "->" + ip
		f.Start = time.Now().UnixNano()
		victim.p.kill()
		if err = readdress(victim.ns, ip); err == nil {
			victim.ip = ip
		}
		n.hold(500*time.Millisecond, 2*time.Second)
		e.startCoord(victim)
	case kRestartAll:
		f.Target = "all"
		f.Start = time.Now().UnixNano()
		for _, c := range e.coords {
			c.p.kill()
		}
		n.hold(500*time.Millisecond, 3*time.Second)
		for _, c := range e.coords {
			e.startCoord(c)
		}
	case kSlowLink:
		ms := 100 + n.rng.Intn(300)
		f.Target = fmt.Sprintf("%s +%dms", e.coords[0].id, ms)
		f.Start = time.Now().UnixNano()
		err = os.WriteFile(e.delay, []byte(fmt.Sprint(ms)), 0o644)
		n.hold(4*time.Second, 8*time.Second)
		if e2 := os.WriteFile(e.delay, []byte("0"), 0o644); err == nil {
			err = e2
		}
	default:
		return f, fmt.Errorf("unknown fault %q", kind)
	}
	if kind == kIsolateLeader || kind == kMajority || kind == kSplit {
		if e2 := n.healNetwork(); err == nil {
			err = e2
		}
	}
	f.Heal = time.Now().UnixNano()
	return f, err
}

// awaitRecovery polls the history until a write returned after the heal.
func (n *nemesis) awaitRecovery(f *fault) {
	deadline := time.Unix(0, f.Heal).Add(n.bound)
	retry.PollUntil(time.Until(deadline), 100*time.Millisecond, func() bool {
		f.Recovered = firstWriteOKAfter(n.hist.poll(), f.Heal)
		return f.Recovered != 0
	})
	if f.Recovered > deadline.UnixNano() {
		f.Recovered = 0
	}
}

// run injects faults until count or the time budget is used up.
func (n *nemesis) run(kinds []string, count int, budget time.Duration) error {
	end := time.Now().Add(budget)
	for i := 0; i < count && time.Now().Before(end); i++ {
		kind := kinds[i%len(kinds)]
		f, err := n.inject(kind)
		if err != nil {
			return fmt.Errorf("fault %s: %w", kind, err)
		}
		n.awaitRecovery(&f)
		n.faults = append(n.faults, f)
		n.logf("fault %d %-16s %-28s held %6s  recovery %s %s", i+1, f.Kind, f.Target,
			time.Duration(f.Heal-f.Start).Round(time.Millisecond), fmtRecovery(f), f.Note)
		n.hold(time.Second, 2*time.Second) // quiet time between faults
	}
	return nil
}

func fmtRecovery(f fault) string {
	if r := f.recovery(); r >= 0 {
		return r.Round(time.Millisecond).String()
	}
	return "NONE"
}
