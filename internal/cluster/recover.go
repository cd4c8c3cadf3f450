package cluster

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/state"
)

// Peer is one voter of a recovered configuration.
type Peer struct {
	ID      string
	Address string // Raft address (host:port; a DNS name is fine)
}

// ParsePeers parses "ID=HOST:PORT,ID=HOST:PORT".
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" {
			return nil, fmt.Errorf("%q: want ID=HOST:PORT", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%q: %v", part, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("node %q listed twice", id)
		}
		seen[id] = true
		out = append(out, Peer{ID: id, Address: addr})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no peers given")
	}
	return out, nil
}

// Recover is the offline quorum-loss procedure: with the node stopped, it
// replaces the Raft configuration in its data directory by peers (which must
// include nodeID). Committed state is kept: hashicorp/raft's RecoverCluster
// replays the log into a fresh snapshot carrying the new configuration. Run
// it with the same peers on every surviving node, then start them.
func Recover(dataDir, nodeID string, peers []Peer) error {
	found := false
	conf := raft.Configuration{}
	for _, p := range peers {
		found = found || p.ID == nodeID
		conf.Servers = append(conf.Servers, raft.Server{
			ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address), Suffrage: raft.Voter,
		})
	}
	if !found {
		return fmt.Errorf("recover: --peers must include this node (%s)", nodeID)
	}
	raftDir := filepath.Join(dataDir, "raft")
	if !hasRaftData(raftDir) {
		return fmt.Errorf("recover: no Raft data in %s", raftDir)
	}
	logs, err := openLogStore(raftDir, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("recover: open raft log (is the node still running?): %w", err)
	}
	defer logs.Close()
	snaps, err := raft.NewFileSnapshotStore(raftDir, 2, io.Discard)
	if err != nil {
		return fmt.Errorf("recover: snapshot store: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(nodeID)
	_, trans := raft.NewInmemTransport("")
	fsm := state.NewFSM(state.NewStore(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := raft.RecoverCluster(rc, fsm, logs, logs, snaps, trans, conf); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	// The operator chose this node's data as the cluster's: a node that was
	// still catching up after a wipe votes again (votehold.go).
	if err := os.Remove(voteHoldPath(dataDir)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}
