package coordinator

// Prometheus metrics of one coordinator node. Every node gets its own
// registry (never the process-wide default), so several nodes in one test
// process, or `indexify dev` with its API server, never collide on names.
// Values that already live somewhere (Raft indexes, the task table, the
// executor streams) are read at scrape time by collectors instead of being
// mirrored into gauges that could drift.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// raftStates are the values of the indexify_raft_state gauge's label.
var raftStates = []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}

type nodeMetrics struct {
	reg           *prometheus.Registry
	applySeconds  *prometheus.HistogramVec
	forwarded     prometheus.Counter
	leaderChanges prometheus.Counter
	grpcRequests  *prometheus.CounterVec
	grpcSeconds   *prometheus.HistogramVec

	observer *raft.Observer
	obsCh    chan raft.Observation
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// newNodeMetrics creates the node's metrics for reg (a fresh registry when
// nil); register adds them once the service they read exists.
func newNodeMetrics(reg *prometheus.Registry) *nodeMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &nodeMetrics{
		reg: reg,
		applySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "indexify_raft_apply_duration_seconds",
			Help:    "Time from proposing a command to its FSM result, by where it was committed (local leader or forwarded) and result.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"path", "result"}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "indexify_raft_forwarded_applies_total",
			Help: "Writes this node forwarded to the leader because it was not leading.",
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "indexify_raft_leader_changes_total",
			Help: "Leaders (new leader id or new term) this node has observed since it started.",
		}),
		grpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "indexify_grpc_requests_total",
			Help: "gRPC calls served by this coordinator, by method and status code.",
		}, []string{"method", "code"}),
		grpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "indexify_grpc_request_duration_seconds",
			Help:    "Duration of unary gRPC calls served by this coordinator.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method"}),
		obsCh: make(chan raft.Observation, 16),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	return m
}

// register adds every collector to the registry and starts counting leader
// changes; close stops the counting.
func (m *nodeMetrics) register(store *state.Store, cn *cluster.Node, svc *Service) error {
	cs := []prometheus.Collector{
		m.applySeconds, m.forwarded, m.leaderChanges, m.grpcRequests, m.grpcSeconds,
		&raftCollector{cn: cn},
		&storeCollector{store: store, svc: svc},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue // a registry shared by the caller already has it (Go/process collectors)
			}
			return err
		}
	}
	m.observer = raft.NewObserver(m.obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	cn.Raft().RegisterObserver(m.observer)
	go m.countLeaders(cn)
	return nil
}

// countLeaders turns Raft's leader observations into the leader change
// counter. An observation of "no leader" (election under way) is not a
// change by itself; the next leader is.
func (m *nodeMetrics) countLeaders(cn *cluster.Node) {
	defer close(m.done)
	var lastID raft.ServerID
	var lastTerm uint64
	for {
		select {
		case <-m.stop:
			return
		case o := <-m.obsCh:
			lo := o.Data.(raft.LeaderObservation)
			if lo.LeaderID == "" {
				continue
			}
			term := cn.Raft().CurrentTerm()
			if lo.LeaderID != lastID || term != lastTerm {
				m.leaderChanges.Inc()
				lastID, lastTerm = lo.LeaderID, term
			}
		}
	}
}

func (m *nodeMetrics) close(cn *cluster.Node) {
	m.stopOnce.Do(func() {
		cn.Raft().DeregisterObserver(m.observer)
		close(m.stop)
		<-m.done
	})
}

// instrumentedApply measures every write this node proposes (service calls
// and, on the leader, the scheduler) around cluster.Node.Apply.
type instrumentedApply struct {
	cn *cluster.Node
	m  *nodeMetrics
}

func (a instrumentedApply) Apply(ctx context.Context, cmd *pb.Command) (*pb.CommandResult, error) {
	path := "local"
	if !a.cn.IsLeader() {
		// Decided before the call: a write that starts on a follower is
		// forwarded (possibly more than once, if leadership moves).
		path = "forwarded"
		a.m.forwarded.Inc()
	}
	start := time.Now()
	res, err := a.cn.Apply(ctx, cmd)
	result := "ok"
	if err != nil {
		result = "error"
	} else if res.GetErrorCode() != pb.ErrorCode_ERROR_CODE_OK {
		result = "rejected"
	}
	a.m.applySeconds.WithLabelValues(path, result).Observe(time.Since(start).Seconds())
	return res, err
}

func (a instrumentedApply) ReadBarrier(ctx context.Context, level pb.ReadConsistency) error {
	return a.cn.ReadBarrier(ctx, level)
}

// raftCollector reads the Raft node's numbers at scrape time.
type raftCollector struct{ cn *cluster.Node }

var (
	descRaftState   = prometheus.NewDesc("indexify_raft_state", "1 for the Raft state this node is in, 0 for the others.", []string{"state"}, nil)
	descRaftLeader  = prometheus.NewDesc("indexify_raft_is_leader", "1 if this node is the Raft leader.", nil, nil)
	descRaftTerm    = prometheus.NewDesc("indexify_raft_term", "Current Raft term.", nil, nil)
	descRaftCommit  = prometheus.NewDesc("indexify_raft_commit_index", "Highest log index known to be committed.", nil, nil)
	descRaftApplied = prometheus.NewDesc("indexify_raft_applied_index", "Highest log index applied to this node's state.", nil, nil)
	descRaftLast    = prometheus.NewDesc("indexify_raft_last_log_index", "Last index in this node's Raft log.", nil, nil)
	descRaftPeers   = prometheus.NewDesc("indexify_raft_members", "Servers in the Raft configuration as this node sees it, by suffrage.", []string{"suffrage"}, nil)
	descVoteHeld    = prometheus.NewDesc("indexify_raft_vote_held", "1 while this node, started without Raft state, takes no part in elections until it has caught up.", nil, nil)
	descWithheld    = prometheus.NewDesc("indexify_raft_votes_withheld_total", "Vote, pre-vote and leadership-transfer requests this node refused while its vote was held.", nil, nil)
)

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descRaftLeader, descRaftTerm, descRaftCommit, descRaftApplied, descRaftLast, descRaftPeers, descVoteHeld, descWithheld} {
		ch <- d
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.cn.Raft()
	cur := r.State()
	for _, s := range raftStates {
		v := 0.0
		if s == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaftState, prometheus.GaugeValue, v, s.String())
	}
	leader := 0.0
	if cur == raft.Leader {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descRaftLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descRaftTerm, prometheus.GaugeValue, float64(r.CurrentTerm()))
	ch <- prometheus.MustNewConstMetric(descRaftCommit, prometheus.GaugeValue, float64(r.CommitIndex()))
	ch <- prometheus.MustNewConstMetric(descRaftApplied, prometheus.GaugeValue, float64(r.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(descRaftLast, prometheus.GaugeValue, float64(r.LastIndex()))
	counts := map[string]int{"voter": 0, "nonvoter": 0, "staging": 0}
	for _, m := range c.cn.Status().GetMembers() {
		counts[m.GetSuffrage()]++
	}
	for s, n := range counts {
		ch <- prometheus.MustNewConstMetric(descRaftPeers, prometheus.GaugeValue, float64(n), s)
	}
	held := 0.0
	if c.cn.VoteHeld() {
		held = 1
	}
	ch <- prometheus.MustNewConstMetric(descVoteHeld, prometheus.GaugeValue, held)
	ch <- prometheus.MustNewConstMetric(descWithheld, prometheus.CounterValue, float64(c.cn.VotesWithheld()))
}

// storeCollector reads this node's replica of the state at scrape time.
type storeCollector struct {
	store *state.Store
	svc   *Service
}

var (
	descTasks     = prometheus.NewDesc("indexify_tasks", "Tasks in this node's replica by extractor and state (pending, running, success, failed).", []string{"extractor", "state"}, nil)
	descConnected = prometheus.NewDesc("indexify_executors_connected", "Executors whose heartbeat stream is open to this node.", nil, nil)
	descExecutors = prometheus.NewDesc("indexify_executors_registered", "Executors registered in the replicated state (cluster-wide).", nil, nil)
)

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descTasks
	ch <- descConnected
	ch <- descExecutors
}

// taskState names a task's place in its life cycle.
func taskState(t *pb.Task) string {
	switch t.GetOutcome() {
	case pb.TaskOutcome_TASK_OUTCOME_SUCCESS:
		return "success"
	case pb.TaskOutcome_TASK_OUTCOME_FAILED:
		return "failed"
	}
	if t.GetExecutorId() == "" {
		return "pending"
	}
	return "running"
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ extractor, state string }
	counts := map[key]int{}
	tasks, _ := c.store.ListTasks(state.TaskQuery{})
	for _, t := range tasks {
		counts[key{t.GetExtractor(), taskState(t)}]++
	}
	// Every state of every extractor seen is reported, zeros included, so
	// a dashboard's rate() does not see series vanish and reappear.
	extractors := map[string]bool{}
	for k := range counts {
		extractors[k.extractor] = true
	}
	for e := range extractors {
		for _, s := range []string{"pending", "running", "success", "failed"} {
			ch <- prometheus.MustNewConstMetric(descTasks, prometheus.GaugeValue, float64(counts[key{e, s}]), e, s)
		}
	}
	ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, float64(c.svc.ConnectedExecutors()))
	ch <- prometheus.MustNewConstMetric(descExecutors, prometheus.GaugeValue, float64(len(c.store.Executors())))
}
