package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/hashicorp/raft"
	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RegisterGRPC registers this node's ClusterService on s.
func (n *Node) RegisterGRPC(s *grpc.Server) { pb.RegisterClusterServiceServer(s, &service{n: n}) }

type service struct {
	pb.UnimplementedClusterServiceServer
	n *Node
}

// toStatus maps Node errors to gRPC codes by the one table
// (internal/errcode). A refusal before anything was proposed (not leader,
// shutting down) is errcode.NotLeader, which forwarding callers may retry
// at the leader unconditionally; FailedPrecondition is a conflict.
func (s *service) toStatus(err error) error {
	var se *state.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrShuttingDown),
		errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		if errors.Is(err, ErrShuttingDown) {
			return s.n.refusal(ErrShuttingDown)
		}
		id, addr := s.n.Leader()
		return errcode.NotLeader(err.Error(), id, addr)
	case errors.Is(err, ErrNoLeader), errors.Is(err, ErrOutcomeUnknown):
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, &se):
		return status.Error(errcode.GRPC(se.Code), se.Msg)
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}

// notLeader is the answer of a node that will not (or may not) forward.
func (s *service) notLeader() error {
	id, addr := s.n.Leader()
	return errcode.NotLeader(fmt.Sprintf("not leader; leader=%s addr=%s", id, addr), id, addr)
}

// A node that is leaving answers n.refusal(ErrShuttingDown): nothing was
// proposed, so the caller may retry at the leader it names (the one this
// node handed over to) or at another node.

// leaderOrForward returns (nil, nil) when this node is the leader and should
// serve the call, or a client for the leader. A call that was already
// forwarded once is never forwarded again.
func (s *service) leaderOrForward(ctx context.Context) (pb.ClusterServiceClient, error) {
	if s.n.shuttingDown.Load() {
		return nil, s.n.refusal(ErrShuttingDown)
	}
	if s.n.raft.State() == raft.Leader {
		return nil, nil
	}
	if hasMeta(ctx, forwardedKey) {
		return nil, s.notLeader()
	}
	cl, _, err := s.n.leaderClient(ctx)
	if err != nil {
		return nil, s.toStatus(err)
	}
	return cl, nil
}

func (s *service) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	cmd := req.GetCommand()
	if cmd == nil || cmd.Op == nil {
		return nil, status.Error(codes.InvalidArgument, "command has no operation")
	}
	if s.n.shuttingDown.Load() {
		return nil, s.n.refusal(ErrShuttingDown)
	}
	if s.n.raft.State() != raft.Leader {
		return nil, s.notLeader()
	}
	if cmd.Timestamp == 0 {
		cmd.Timestamp = timeNowMs()
	}
	state.StampRules(cmd)
	if refused := s.n.admit(cmd); refused != nil {
		return &pb.ApplyResponse{Result: refused}, nil
	}
	data, err := state.EncodeCommand(cmd)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res, err, _ := s.n.applyLocal(ctx, data, false)
	if err != nil {
		return nil, s.toStatus(err)
	}
	return &pb.ApplyResponse{Result: res}, nil
}

func (s *service) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	if req.NodeId == "" || req.RaftAddr == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id and raft_addr are required")
	}
	if _, _, err := net.SplitHostPort(req.RaftAddr); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "raft_addr %q: %v", req.RaftAddr, err)
	}
	if req.GrpcAddr != "" {
		if _, _, err := net.SplitHostPort(req.GrpcAddr); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "grpc_addr %q: %v", req.GrpcAddr, err)
		}
	}
	// A member of our cluster announcing its Raft address is news even when
	// we cannot act on the Join: if it moved and we need its vote, no leader
	// can be elected until we dial the new address (chaos seed
	// 1796216422002091526: two voters left, one moved, 70 s without leader).
	if req.ClusterId != "" && req.ClusterId == s.n.ClusterID() {
		s.n.book.learnProbe(&pb.ProbeResponse{NodeId: req.NodeId, ClusterId: req.ClusterId,
			RaftAddr: req.RaftAddr, HasState: true}, req.GrpcAddr)
	}
	cl, err := s.leaderOrForward(ctx)
	if err != nil {
		return nil, err
	}
	if cl != nil {
		fctx, cancel := context.WithTimeout(forwardedCtx(ctx), s.n.rpcTimeout())
		defer cancel()
		return cl.Join(fctx, req)
	}
	if err := s.n.handleJoin(ctx, req); err != nil {
		return nil, s.toStatus(err)
	}
	return &pb.JoinResponse{ClusterId: s.n.ClusterID(), LeaderId: s.n.cfg.NodeID}, nil
}

func (s *service) Probe(ctx context.Context, req *pb.ProbeRequest) (*pb.ProbeResponse, error) {
	n := s.n
	resp := &pb.ProbeResponse{NodeId: n.cfg.NodeID, RaftAddr: n.advertise, HasState: n.hasState()}
	// Report a cluster id only with state: a node that merely learned an id
	// (joined, log not yet received) must not look like a cluster member.
	if resp.HasState {
		resp.ClusterId = n.ClusterID()
	}
	if _, lid := n.raft.LeaderWithID(); lid != "" {
		resp.LeaderId = string(lid)
	}
	return resp, nil
}

func (s *service) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	if !hasMeta(ctx, readIndexKey) {
		return s.n.Status(), nil
	}
	if s.n.raft.State() != raft.Leader {
		return nil, s.notLeader()
	}
	idx, err := s.n.leaderReadIndex(ctx)
	if err != nil {
		return nil, s.toStatus(err)
	}
	st := s.n.Status()
	st.CommitIndex = idx
	return st, nil
}

func (s *service) RemovePeer(ctx context.Context, req *pb.RemovePeerRequest) (*pb.RemovePeerResponse, error) {
	if req.NodeId == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	cl, err := s.leaderOrForward(ctx)
	if err != nil {
		return nil, err
	}
	if cl != nil {
		fctx, cancel := context.WithTimeout(forwardedCtx(ctx), s.n.rpcTimeout())
		defer cancel()
		return cl.RemovePeer(fctx, req)
	}
	if err := s.n.removeServer(ctx, req.NodeId); err != nil {
		return nil, s.toStatus(err)
	}
	return &pb.RemovePeerResponse{}, nil
}

func (s *service) TransferLeader(ctx context.Context, req *pb.TransferLeaderRequest) (*pb.TransferLeaderResponse, error) {
	cl, err := s.leaderOrForward(ctx)
	if err != nil {
		return nil, err
	}
	if cl != nil {
		fctx, cancel := context.WithTimeout(forwardedCtx(ctx), s.n.rpcTimeout())
		defer cancel()
		return cl.TransferLeader(fctx, req)
	}
	id, err := s.n.transferLeadership(ctx, req.NodeId)
	if err != nil {
		return nil, s.toStatus(err)
	}
	return &pb.TransferLeaderResponse{NewLeaderId: id}, nil
}

// snapshotChunk is the size of one streamed SnapshotChunk.
const snapshotChunk = 256 << 10

// Snapshot streams a fresh snapshot of this node's FSM (or the latest one on
// disk when nothing changed since it was taken). The bytes are the FSM's own
// snapshot format, restorable with FSM.Restore.
func (s *service) Snapshot(_ *pb.SnapshotRequest, stream grpc.ServerStreamingServer[pb.SnapshotChunk]) error {
	// A backup must hold every write acknowledged before it was asked for,
	// whichever node serves it: catch up to the leader's commit index first.
	if err := s.n.ReadBarrier(stream.Context(), pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE); err != nil {
		return s.toStatus(err)
	}
	rc, err := s.n.openSnapshot()
	if err != nil {
		return s.toStatus(err)
	}
	defer rc.Close()
	buf := make([]byte, snapshotChunk)
	for {
		k, err := io.ReadFull(rc, buf)
		if k > 0 {
			if serr := stream.Send(&pb.SnapshotChunk{Data: append([]byte(nil), buf[:k]...)}); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return status.Errorf(codes.Internal, "read snapshot: %v", err)
		}
	}
}

func (n *Node) openSnapshot() (io.ReadCloser, error) {
	f := n.raft.Snapshot()
	err := f.Error()
	if err == nil {
		_, rc, err := f.Open()
		return rc, err
	}
	if !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil, fmt.Errorf("cluster: snapshot: %w", err)
	}
	list, lerr := n.snaps.List()
	if lerr != nil {
		return nil, fmt.Errorf("cluster: list snapshots: %w", lerr)
	}
	if len(list) == 0 {
		return nil, state.Errorf(pb.ErrorCode_ERROR_CODE_NOT_FOUND, "no snapshot available")
	}
	_, rc, err := n.snaps.Open(list[0].ID)
	return rc, err
}
