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

type memberJSON struct {
	ID            string `json:"id"`
	RaftAddr      string `json:"raft_addr"`
	GRPCAddr      string `json:"grpc_addr"`
	Suffrage      string `json:"suffrage"`
	Voter         bool   `json:"voter"`
	Leader        bool   `json:"leader"`
	LastContactMs int64  `json:"last_contact_ms"` // -1: unknown to the answering node
	Healthy       bool   `json:"healthy"`
}

type clusterJSON struct {
	NodeID       string       `json:"node_id"` // the coordinator that answered
	ClusterID    string       `json:"cluster_id"`
	State        string       `json:"state"`
	LeaderID     string       `json:"leader_id"`
	LeaderAddr   string       `json:"leader_addr"`
	Term         uint64       `json:"term"`
	CommitIndex  uint64       `json:"commit_index"`
	AppliedIndex uint64       `json:"applied_index"`
	LastLogIndex uint64       `json:"last_log_index"`
	Members      []memberJSON `json:"members"`
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
	out := clusterJSON{
		NodeID: st.GetNodeId(), ClusterID: st.GetClusterId(), State: st.GetState(),
		LeaderID: st.GetLeaderId(), LeaderAddr: st.GetLeaderAddr(), Term: st.GetTerm(),
		CommitIndex: st.GetCommitIndex(), AppliedIndex: st.GetAppliedIndex(), LastLogIndex: st.GetLastLogIndex(),
		Members: make([]memberJSON, 0, len(st.GetMembers())),
	}
	for _, m := range st.GetMembers() {
		out.Members = append(out.Members, memberJSON{
			ID: m.GetId(), RaftAddr: m.GetRaftAddr(), GRPCAddr: m.GetGrpcAddr(), Suffrage: m.GetSuffrage(),
			Voter: m.GetSuffrage() == "voter", Leader: m.GetLeader(), LastContactMs: m.GetLastContactMs(),
			Healthy: m.GetHealthy(),
		})
	}
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

type executorJSON struct {
	ID              string   `json:"id"`
	Address         string   `json:"address"`
	Extractors      []string `json:"extractors"`
	MaxPendingTasks uint32   `json:"max_pending_tasks"`
	LastSeen        int64    `json:"last_seen"`     // unix seconds
	RegisteredAt    int64    `json:"registered_at"` // unix seconds
}

// listExecutors: GET /executors.
func (s *Server) listExecutors(w http.ResponseWriter, r *http.Request) error {
	resp, err := call(r.Context(), s, func(ctx context.Context) (*pb.ListExecutorsResponse, error) {
		return s.cfg.Coordinator.ListExecutors(ctx, &pb.ListExecutorsRequest{})
	})
	if err != nil {
		return err
	}
	out := make([]executorJSON, 0, len(resp.GetExecutors()))
	for _, e := range resp.GetExecutors() {
		names := make([]string, 0, len(e.GetExtractors()))
		for _, x := range e.GetExtractors() {
			names = append(names, x.GetName())
		}
		out = append(out, executorJSON{
			ID: e.GetId(), Address: e.GetAddress(), Extractors: names, MaxPendingTasks: e.GetMaxPendingTasks(),
			LastSeen: unixSeconds(e.GetLastSeen()), RegisteredAt: unixSeconds(e.GetRegisteredAt()),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"executors": out})
	return nil
}
