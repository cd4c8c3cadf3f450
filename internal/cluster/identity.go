package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// identity is persisted in DataDir/node.json. The node id guards against
// starting a node on another node's data directory; the cluster id lets a
// node prove which cluster its Raft state belongs to when it (re)joins.
type identity struct {
	NodeID    string `json:"node_id"`
	ClusterID string `json:"cluster_id,omitempty"`
}

func loadIdentity(path, nodeID string) (identity, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		id := identity{NodeID: nodeID}
		return id, writeIdentity(path, id)
	}
	if err != nil {
		return identity{}, fmt.Errorf("cluster: read %s: %w", path, err)
	}
	var id identity
	if err := json.Unmarshal(b, &id); err != nil {
		return identity{}, fmt.Errorf("cluster: parse %s: %w", path, err)
	}
	if id.NodeID != nodeID {
		return identity{}, fmt.Errorf("cluster: data dir belongs to node %q, not %q", id.NodeID, nodeID)
	}
	return id, nil
}

// writeIdentity replaces the file atomically (temp file, fsync, rename) so a
// crash never leaves a half-written identity behind.
func writeIdentity(path string, id identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".node.json-*")
	if err != nil {
		return fmt.Errorf("cluster: write identity: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("cluster: write identity: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("cluster: write identity: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cluster: write identity: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cluster: write identity: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
