// Package cluster runs the coordinator's Raft node: storage, a DNS-resolving
// transport, safe bootstrap/join, write forwarding to the leader, read
// barriers, leadership hooks and an autopilot. See DESIGN.md.
package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// Errors returned by Node. Callers test them with errors.Is.
var (
	// ErrNoLeader: no leader is known (election in progress or quorum lost).
	ErrNoLeader = errors.New("cluster: no leader")
	// ErrNotLeader: the operation needs the leader and this node is not it.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrShuttingDown: this node is stopping and takes no new writes; a
	// forwarding caller should retry against the next leader.
	ErrShuttingDown = errors.New("cluster: node is shutting down")
	// ErrStaleRead: a DEFAULT read was refused because this node has not heard
	// from a leader recently.
	ErrStaleRead = errors.New("cluster: replica may be stale (no recent leader contact)")
)

// DefaultElectionTimeout is the default of the one Raft timing knob
// (Config.ElectionTimeout, --raft-election-timeout). Why this value:
// DESIGN.md, "Timing".
const DefaultElectionTimeout = 300 * time.Millisecond

// Config configures a Node. Zero values get the documented defaults.
type Config struct {
	NodeID          string        // Raft server id; stable for the life of the node (pod name)
	DataDir         string        // holds raft/ (wal/: log + stable store; snapshots) and node.json
	RaftBind        string        // listen address for Raft, e.g. ":8970"
	RaftAdvertise   string        // address peers dial; may be a DNS name (resolved at every dial)
	GRPCAdvertise   string        // this node's ClusterService address
	HTTPAdvertise   string        // informational, replicated in NodeInfo
	BootstrapExpect int           // voters of the initial cluster; 0/1 with no Join = single-node dev mode
	Join            []string      // peers' gRPC addresses: "[ID=]HOST:PORT" or "dns:NAME:PORT"
	ElectionTimeout time.Duration // the one timing knob (DefaultElectionTimeout; see raftTiming)
	Logger          *slog.Logger
	DialOptions     []grpc.DialOption // for peer gRPC; default insecure

	// Security (auth.go). ClusterSecret authenticates every Raft connection
	// and ClusterService call; RaftTLS encrypts the Raft transport.
	ClusterSecret []byte
	RaftTLS       *TransportTLS

	// Autopilot (leader only).
	MinQuorum           int           // never remove voters below this (default BootstrapExpect, at least 1)
	StabilizationTime   time.Duration // healthy this long before a non-voter is promoted (default 10s)
	DeadServerThreshold time.Duration // unhealthy this long before a server is removed (default 5m; <0 disables)
	MaxTrailingLag      uint64        // log entries a healthy server may trail the leader by (default 256)

	// MaxRestoreBytes bounds a snapshot accepted by Restore (it is spooled
	// to a temp file in DataDir first); default 8 GiB.
	MaxRestoreBytes int64

	// Snapshot tuning; zero keeps hashicorp/raft's defaults.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
}

func (c *Config) setDefaults() error {
	if c.NodeID == "" {
		return errors.New("cluster: NodeID is required")
	}
	if strings.ContainsAny(c.NodeID, "=/ ") {
		return fmt.Errorf("cluster: NodeID %q must not contain '=', '/' or spaces", c.NodeID)
	}
	if c.DataDir == "" {
		return errors.New("cluster: DataDir is required")
	}
	if c.RaftBind == "" {
		return errors.New("cluster: RaftBind is required")
	}
	if c.GRPCAdvertise == "" {
		return errors.New("cluster: GRPCAdvertise is required (peers forward writes there)")
	}
	if len(c.ClusterSecret) > 0 && len(c.ClusterSecret) < MinSecretLen {
		return fmt.Errorf("cluster: ClusterSecret must be at least %d bytes", MinSecretLen)
	}
	if c.BootstrapExpect < 0 {
		return errors.New("cluster: BootstrapExpect must be >= 0")
	}
	if c.ElectionTimeout <= 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.ElectionTimeout < 20*time.Millisecond {
		return errors.New("cluster: ElectionTimeout must be at least 20ms")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MinQuorum <= 0 {
		c.MinQuorum = max(c.BootstrapExpect, 1)
	}
	if c.StabilizationTime <= 0 {
		c.StabilizationTime = 10 * time.Second
	}
	if c.DeadServerThreshold == 0 {
		c.DeadServerThreshold = 5 * time.Minute
	}
	if c.MaxRestoreBytes <= 0 {
		c.MaxRestoreBytes = 8 << 30
	}
	if c.MaxTrailingLag == 0 {
		c.MaxTrailingLag = 256
	}
	return nil
}

// joinTarget is one parsed Join entry.
type joinTarget struct {
	raw  string
	dns  bool   // "dns:NAME:PORT": resolve NAME to all A records every round
	id   string // known server id ("" if unknown)
	host string
	port string
}

// addr is the gRPC address of a static target.
func (t joinTarget) addr() string { return net.JoinHostPort(t.host, t.port) }

// parseJoin parses one Join entry. The id of a static entry is the explicit
// "ID=" prefix, else the first DNS label when the host is a name
// (coordinator-2.coordinator-headless:8950 -> coordinator-2); an IP without a
// prefix has no known id.
func parseJoin(s string) (joinTarget, error) {
	t := joinTarget{raw: s}
	rest := strings.TrimSpace(s)
	if name, ok := strings.CutPrefix(rest, "dns:"); ok {
		host, port, err := net.SplitHostPort(name)
		if err != nil || host == "" || port == "" {
			return t, fmt.Errorf("cluster: join entry %q: want dns:NAME:PORT", s)
		}
		t.dns, t.host, t.port = true, host, port
		return t, nil
	}
	if id, addr, ok := strings.Cut(rest, "="); ok {
		if id == "" {
			return t, fmt.Errorf("cluster: join entry %q: empty id before '='", s)
		}
		t.id, rest = id, addr
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" || port == "" {
		return t, fmt.Errorf("cluster: join entry %q: want [ID=]HOST:PORT", s)
	}
	t.host, t.port = host, port
	if t.id == "" && net.ParseIP(host) == nil {
		t.id, _, _ = strings.Cut(host, ".")
	}
	return t, nil
}

func parseJoins(list []string) ([]joinTarget, error) {
	var out []joinTarget
	for _, s := range list {
		if strings.TrimSpace(s) == "" {
			continue
		}
		t, err := parseJoin(s)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// voter is one server of a bootstrap configuration.
type voter struct{ id, addr string }

// staticVoters returns the bootstrap voter list of static-list mode, or nil
// when the Join list does not qualify: exactly BootstrapExpect entries, none
// via DNS discovery, each with a known and distinct id, this node among them.
// Raft addresses are the entry's host with this node's Raft port, so every
// node derives the identical list without talking to anyone.
func staticVoters(selfID, raftAdvertise string, expect int, targets []joinTarget) ([]voter, error) {
	if expect < 1 || len(targets) != expect {
		return nil, nil
	}
	_, raftPort, err := net.SplitHostPort(raftAdvertise)
	if err != nil {
		return nil, fmt.Errorf("cluster: RaftAdvertise %q: %w", raftAdvertise, err)
	}
	seen := map[string]bool{}
	self := false
	var vs []voter
	for _, t := range targets {
		if t.dns || t.id == "" || seen[t.id] {
			return nil, nil
		}
		seen[t.id] = true
		self = self || t.id == selfID
		vs = append(vs, voter{id: t.id, addr: net.JoinHostPort(t.host, raftPort)})
	}
	if !self {
		return nil, nil
	}
	sortVoters(vs)
	return vs, nil
}

func sortVoters(vs []voter) { sort.Slice(vs, func(i, j int) bool { return vs[i].id < vs[j].id }) }
