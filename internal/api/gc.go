package api

import (
	"context"
	"errors"
	"time"

	"github.com/indexify-go/indexify/internal/blob"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// gcBatch is how many GC tasks one pass fetches.
const gcBatch = 256

// runGC deletes the blobs the coordinator marked for deletion and
// acknowledges them, every GCInterval until ctx is done. Blob deletion is
// idempotent, so a crash between delete and ack only repeats a delete.
func (s *Server) runGC(ctx context.Context) {
	if s.cfg.GCInterval < 0 {
		return
	}
	t := time.NewTicker(s.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.GCOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("blob gc pass failed", "err", err)
		}
	}
}

// GCOnce runs one GC pass and returns how many tasks it acknowledged.
func (s *Server) GCOnce(ctx context.Context) (int, error) {
	resp, err := call(ctx, s, func(ctx context.Context) (*pb.ListGCTasksResponse, error) {
		return s.cfg.Coordinator.ListGCTasks(ctx, &pb.ListGCTasksRequest{Limit: gcBatch})
	})
	if err != nil {
		return 0, err
	}
	tasks := s.forgetGone(ctx, resp.GetTasks())
	var done []string
	for _, t := range tasks {
		if url := t.GetStorageUrl(); url != "" {
			err := s.cfg.Blob.Delete(ctx, url)
			if errors.Is(err, blob.ErrForeignURL) {
				// Another API server's store (or another backend) holds it;
				// leave the task for the server that can delete it.
				s.log.Warn("gc task for a blob outside this store; skipped", "task", t.GetId(), "url", url)
				continue
			}
			if err != nil {
				s.log.Warn("gc: deleting blob failed; will retry", "task", t.GetId(), "url", url, "err", err)
				continue
			}
		}
		done = append(done, t.GetId())
	}
	if len(done) == 0 {
		return 0, nil
	}
	reqID := newRequestID()
	if _, err := call(ctx, s, func(ctx context.Context) (*pb.AckGCTasksResponse, error) {
		return s.cfg.Coordinator.AckGCTasks(ctx, &pb.AckGCTasksRequest{Ids: done, RequestId: reqID})
	}); err != nil {
		return 0, err
	}
	return len(done), nil
}

// forgetGone removes the vectors and metadata rows of GC'd contents that no
// longer have a live version (a superseded version's features were already
// replaced by its successor's upserts, keyed by the same content id). It
// returns the tasks that may be acknowledged: those of a namespace whose
// stores could not be cleaned stay for the next pass.
func (s *Server) forgetGone(ctx context.Context, tasks []*pb.GCTask) []*pb.GCTask {
	if s.cfg.Index == nil && s.cfg.Structured == nil {
		return tasks
	}
	byNS := map[string][]string{}
	for _, t := range tasks {
		if t.GetContentId() != "" {
			byNS[t.GetNamespace()] = append(byNS[t.GetNamespace()], t.GetContentId())
		}
	}
	failed := map[string]bool{}
	for ns, ids := range byNS {
		live, err := s.latestContents(ctx, levelDefault, ns, ids)
		if err != nil {
			failed[ns] = true
			continue
		}
		var gone []string
		for _, id := range ids {
			if live[id] == nil {
				gone = append(gone, id)
			}
		}
		if err := s.forgetContents(ctx, ns, gone); err != nil {
			s.log.Warn("gc: removing deleted contents' features failed; will retry", "namespace", ns, "err", err)
			failed[ns] = true
		}
	}
	out := tasks[:0:0]
	for _, t := range tasks {
		if !failed[t.GetNamespace()] {
			out = append(out, t)
		}
	}
	return out
}
