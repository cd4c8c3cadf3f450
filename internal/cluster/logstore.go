package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/migrate"
	"go.etcd.io/bbolt"

	"github.com/indexify-go/indexify/internal/durable"
)

// Raft's log and stable store is a raft-wal (v0.4.1) write-ahead log in
// DataDir/raft/wal (segment files plus wal-meta.db, which also holds the
// stable values: term and vote). It appends a batch with one write and one
// fsync; raft-boltdb, used before, paid a bolt transaction (two fsyncs) per
// batch. A data dir written by an earlier version holds DataDir/raft/raft.db
// (raft-boltdb); it is migrated on the first start (migrateBoltLog).
const (
	walDirName       = "wal"
	walMigratingName = "wal.migrating" // a migration in progress; removed when found at start
	boltLogName      = "raft.db"       // raft-boltdb, written by earlier versions
	// walSegmentSize is the size of one preallocated segment file. Head
	// truncation (after a snapshot) frees whole segments only. 16 MiB holds
	// the default 10,240 trailing entries of a few hundred bytes in one or two
	// segments and keeps an idle node's footprint small (test clusters start
	// many nodes on one disk); raft-wal's default is 64 MiB.
	walSegmentSize = 16 << 20
)

// Stable-store keys hashicorp/raft uses (raft.go: keyCurrentTerm,
// keyLastVoteTerm, keyLastVoteCand). The first two are uint64s, which
// raft-boltdb stores big-endian and raft-wal little-endian, so they are
// copied as numbers, never as bytes.
var (
	stableUint64Keys = [][]byte{[]byte("CurrentTerm"), []byte("LastVoteTerm")}
	stableBytesKeys  = [][]byte{[]byte("LastVoteCand")}
)

// openLogStore opens (creating it if needed) the write-ahead log under
// raftDir, first migrating a raft-boltdb log left by an earlier version.
func openLogStore(raftDir string, logger hclog.Logger) (*raftwal.WAL, error) {
	if err := migrateBoltLog(raftDir, logger); err != nil {
		return nil, err
	}
	dir := filepath.Join(raftDir, walDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return openWAL(dir, logger)
}

func openWAL(dir string, logger hclog.Logger) (*raftwal.WAL, error) {
	return raftwal.Open(dir, raftwal.WithLogger(logger.Named("wal")), raftwal.WithSegmentSize(walSegmentSize))
}

// hasRaftData reports whether raftDir holds a Raft log of either format.
func hasRaftData(raftDir string) bool {
	for _, name := range []string{walDirName, boltLogName} {
		if _, err := os.Stat(filepath.Join(raftDir, name)); err == nil {
			return true
		}
	}
	return false
}

// migrateBoltLog moves a raft-boltdb log and stable store into a new WAL.
// It is atomic and idempotent: the WAL is built in wal.migrating, synced,
// then renamed to wal (the commit point; the directory is synced), and only
// then is raft.db removed. A crash before the rename leaves raft.db alone
// and the half-built copy is thrown away at the next start; a crash after it
// leaves a raft.db next to a complete WAL, which is removed. raft.db is
// opened read-only, so a failed migration changes nothing. Going back to a
// version that reads raft.db is not supported after the migration (it would
// start as a node without state; the vote hold keeps that safe).
func migrateBoltLog(raftDir string, logger hclog.Logger) error {
	boltPath := filepath.Join(raftDir, boltLogName)
	walDir := filepath.Join(raftDir, walDirName)
	tmpDir := filepath.Join(raftDir, walMigratingName)
	if _, err := os.Stat(boltPath); errors.Is(err, os.ErrNotExist) {
		return os.RemoveAll(tmpDir)
	} else if err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	if _, err := os.Stat(walDir); err == nil {
		logger.Info("removing the raft-boltdb log left by a finished migration", "path", boltPath)
		if err := os.Remove(boltPath); err != nil {
			return fmt.Errorf("raft log: %w", err)
		}
		return durable.SyncDir(raftDir)
	}
	if err := os.RemoveAll(tmpDir); err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	n, err := copyBoltToWAL(boltPath, tmpDir, logger)
	if err != nil {
		return fmt.Errorf("raft log migration (raft.db is unchanged): %w", err)
	}
	if err := durable.SyncDir(tmpDir); err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	if err := os.Rename(tmpDir, walDir); err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	if err := durable.SyncDir(raftDir); err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	if err := os.Remove(boltPath); err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	logger.Info("migrated the raft log from raft-boltdb to raft-wal", "entries", n, "dir", walDir)
	return durable.SyncDir(raftDir)
}

// copyBoltToWAL copies every log entry and stable value of the bolt store
// at boltPath into a new WAL in dir (empty). It returns the entries copied.
func copyBoltToWAL(boltPath, dir string, logger hclog.Logger) (uint64, error) {
	// Read-only, and a bounded wait for bolt's file lock: a process still
	// holding the file (a node of the old version) fails the start instead of
	// hanging it.
	src, err := raftboltdb.New(raftboltdb.Options{Path: boltPath,
		BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: 2 * time.Second}})
	if err != nil {
		return 0, fmt.Errorf("open %s (is another process using it?): %w", boltPath, err)
	}
	defer src.Close()
	dst, err := openWAL(dir, logger)
	if err != nil {
		return 0, err
	}
	first, _ := src.FirstIndex()
	last, err := src.LastIndex()
	if err != nil {
		dst.Close()
		return 0, err
	}
	if last > 0 {
		if err := migrate.CopyLogs(context.Background(), dst, src, 4<<20, nil); err != nil {
			dst.Close()
			return 0, err
		}
	}
	if err := copyStable(dst, src); err != nil {
		dst.Close()
		return 0, err
	}
	if err := dst.Close(); err != nil {
		return 0, err
	}
	if last == 0 {
		return 0, nil
	}
	return last - first + 1, nil
}

// copyStable copies the stable values Raft keeps (missing ones stay unset).
func copyStable(dst, src raft.StableStore) error {
	for _, k := range stableUint64Keys {
		v, err := src.GetUint64(k)
		if isBoltNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		if err := dst.SetUint64(k, v); err != nil {
			return fmt.Errorf("write %s: %w", k, err)
		}
	}
	for _, k := range stableBytesKeys {
		v, err := src.Get(k)
		if isBoltNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		if err := dst.Set(k, v); err != nil {
			return fmt.Errorf("write %s: %w", k, err)
		}
	}
	return nil
}

func isBoltNotFound(err error) bool { return errors.Is(err, raftboltdb.ErrKeyNotFound) }
