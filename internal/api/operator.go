package api

// Routes for operators: Prometheus metrics, the cluster's Raft status, the
// registered executors, the embedded web console and the OpenAPI document.

import (
	"context"
	"embed"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

//go:embed console
var consoleFiles embed.FS

//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) operatorRoutes() {
	h := func(pattern string, fn func(http.ResponseWriter, *http.Request) error) {
		s.handle(pattern, s.wrap(fn))
	}
	s.handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	h("GET /cluster", s.clusterStatus)
	h("GET /executors", s.listExecutors)
	s.handle("GET /api-docs/openapi.json", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openAPIDoc)
	}))
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	s.handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(sub)))
	s.handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
}

// clusterStatus: GET /cluster is ClusterService.Status of whichever
// coordinator the connection reached.
func (s *Server) clusterStatus(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Cluster == nil {
		return newError(http.StatusServiceUnavailable, codeUnavailable, "this API server has no cluster client")
	}
	st, err := call(r.Context(), s, func(ctx context.Context) (*pb.StatusResponse, error) {
		return s.cfg.Cluster.Status(ctx, &pb.StatusRequest{})
	})
	if err != nil {
		return err
	}
	if st.GetState() != "Leader" && st.GetLeaderAddr() != "" {
		// Only the leader tracks every member's health and last contact (a
		// follower knows just itself and the leader), so ask it; its
		// answer is the operator's view. On failure the follower's
		// answer still says who leads.
		if lst, err := s.leaderStatus(r.Context(), st.GetLeaderAddr()); err == nil && lst.GetState() == "Leader" {
			st = lst
		} else if err != nil {
			s.log.Debug("leader status unavailable; showing a follower's view", "leader", st.GetLeaderAddr(), "err", err)
		}
	}
	out := wire.ClusterStatusFrom(st)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// leaderConns caches one connection per leader address seen; there are as
// many as coordinators, so the cache stays small.
type leaderConns struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (s *Server) leaderStatus(ctx context.Context, addr string) (*pb.StatusResponse, error) {
	s.leaders.mu.Lock()
	cc, ok := s.leaders.conns[addr]
	if !ok {
		var err error
		if cc, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			s.leaders.mu.Unlock()
			return nil, err
		}
		if s.leaders.conns == nil {
			s.leaders.conns = map[string]*grpc.ClientConn{}
		}
		s.leaders.conns[addr] = cc
	}
	s.leaders.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return pb.NewClusterServiceClient(cc).Status(ctx, &pb.StatusRequest{})
}

// listExecutors: GET /executors.
func (s *Server) listExecutors(w http.ResponseWriter, r *http.Request) error {
	resp, err := read(r.Context(), s, readLevel(r), func(ctx context.Context, level pb.ReadConsistency) (*pb.ListExecutorsResponse, error) {
		return s.cfg.Coordinator.ListExecutors(ctx, &pb.ListExecutorsRequest{Consistency: level})
	})
	if err != nil {
		return err
	}
	out := wire.Executors{Executors: make([]wire.Executor, 0, len(resp.GetExecutors()))}
	for _, e := range resp.GetExecutors() {
		out.Executors = append(out.Executors, wire.ExecutorFromProto(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
