package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrSnapshotTooLarge: a snapshot sent to Restore exceeds
// Config.MaxRestoreBytes.
var ErrSnapshotTooLarge = errors.New("cluster: snapshot exceeds MaxRestoreBytes")

// restoreTempPattern names the spool files of Restore in DataDir. Leftovers
// of a crash are removed at the next start.
const restoreTempPattern = "restore-*.tmp"

func removeRestoreLeftovers(dataDir string) {
	old, _ := filepath.Glob(filepath.Join(dataDir, restoreTempPattern))
	for _, p := range old {
		os.Remove(p)
	}
}

// Restore replaces the whole replicated state, on every node, with a
// snapshot in the FSM's format (what the Snapshot RPC streams). Leader only:
// other nodes get ErrNotLeader. It returns once a quorum holds the restored
// state, with the leader's applied index at that point (WaitApplied on that
// index shows the restored state on any node).
//
// The snapshot is spooled to a temp file (bounded by MaxRestoreBytes) and
// fully restored into a scratch Store before Raft sees it: hashicorp/raft
// panics when the FSM rejects a user restore, so a bad file must never
// reach it. raft.Restore then installs it as a snapshot at an index past the
// end of the log, leaving a hole that makes every follower install it too.
// Writes in flight at that moment fail (raft.ErrAbortedByRestore).
func (n *Node) Restore(ctx context.Context, r io.Reader) (uint64, error) {
	if n.shuttingDown.Load() {
		return 0, ErrShuttingDown
	}
	if n.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	f, err := os.CreateTemp(n.cfg.DataDir, restoreTempPattern)
	if err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	limit := n.cfg.MaxRestoreBytes
	size, err := io.Copy(f, io.LimitReader(r, limit+1))
	if err != nil {
		return 0, fmt.Errorf("cluster: restore: receiving snapshot: %w", err)
	}
	if size > limit {
		return 0, fmt.Errorf("%w (%d bytes); raise the limit or restore a smaller snapshot", ErrSnapshotTooLarge, limit)
	}
	if size == 0 {
		return 0, state.Errorf(pb.ErrorCode_ERROR_CODE_INVALID, "restore: the snapshot is empty")
	}
	applied, err := validateSnapshot(f)
	if err != nil {
		return 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}

	// raft refuses a restore while a configuration change is uncommitted;
	// this leader's own changes are serialised by membershipMu.
	n.membershipMu.Lock()
	defer n.membershipMu.Unlock()
	// Index: the restored Store's applied index, so Raft places the snapshot
	// beyond it and later log indexes stay above the Store's applied index.
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: applied, Size: size}
	n.log.Info("restoring snapshot", "bytes", size, "snapshot_applied_index", applied)
	if err := n.raft.Restore(meta, f, n.changeTimeout()); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
			errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return 0, fmt.Errorf("%w: %v", ErrNotLeader, err)
		case errors.Is(err, raft.ErrRaftShutdown):
			return 0, ErrShuttingDown
		default:
			return 0, fmt.Errorf("cluster: restore: %w", err)
		}
	}
	idx := n.raft.AppliedIndex()
	n.log.Info("snapshot restored", "index", idx)
	// The restored NodeInfo table may describe other addresses (a restore
	// into a new cluster); forwarding needs the leader's row. Followers fix
	// theirs in housekeeping.
	uctx, cancel := context.WithTimeout(ctx, n.rpcTimeout())
	n.upsertSelfAsLeader(uctx, 0)
	cancel()
	return idx, nil
}

// validateSnapshot restores f into a scratch Store and returns its applied
// index.
func validateSnapshot(f *os.File) (uint64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	scratch := state.NewStore()
	if err := scratch.Restore(bufio.NewReader(f)); err != nil {
		return 0, state.Errorf(pb.ErrorCode_ERROR_CODE_INVALID,
			"restore: not a snapshot in the coordinator's format: %v", err)
	}
	return scratch.AppliedIndex(), nil
}

// Restore (gRPC) streams the snapshot into Node.Restore. A follower answers
// errcode.NotLeader naming the leader's gRPC address before reading the
// stream.
func (s *service) Restore(stream grpc.ClientStreamingServer[pb.SnapshotChunk, pb.RestoreResponse]) error {
	if s.n.shuttingDown.Load() {
		return s.n.refusal(ErrShuttingDown)
	}
	if s.n.raft.State() != raft.Leader {
		return s.notLeader()
	}
	idx, err := s.n.Restore(stream.Context(), &chunkReader{stream: stream})
	switch {
	case err == nil:
		return stream.SendAndClose(&pb.RestoreResponse{Index: idx})
	case errors.Is(err, ErrNotLeader):
		return s.notLeader()
	case errors.Is(err, ErrSnapshotTooLarge):
		return status.Error(codes.ResourceExhausted, err.Error())
	default:
		return s.toStatus(err)
	}
}

// chunkReader turns a SnapshotChunk stream into an io.Reader.
type chunkReader struct {
	stream grpc.ClientStreamingServer[pb.SnapshotChunk, pb.RestoreResponse]
	buf    []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		chunk, err := c.stream.Recv()
		if err != nil {
			return 0, err // io.EOF at the end of the stream
		}
		c.buf = chunk.GetData()
	}
	k := copy(p, c.buf)
	c.buf = c.buf[k:]
	return k, nil
}
