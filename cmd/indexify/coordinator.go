package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/coordinator"
	"github.com/indexify-go/indexify/internal/coordproc"
	"github.com/indexify-go/indexify/internal/scheduler"
	"github.com/indexify-go/indexify/internal/state"
)

// coordFlags are the settings of a coordinator node, shared by `coordinator`
// and `dev`.
type coordFlags struct {
	nodeID          string
	dataDir         string
	raftAddr        string
	advertise       string
	grpcAddr        string
	grpcAdvertise   string
	httpAddr        string
	bootstrapExpect int
	join            string
	electionTimeout time.Duration
	executorTimeout time.Duration
	maxAttempts     uint32
	maxUnfinished   int
	retryBackoff    time.Duration
	minQuorum       int
	stabilization   time.Duration
	deadServer      time.Duration
	sec             *securityFlags // tlsflags.go; shared with the other parts in dev
}

func (f *coordFlags) register(fs *pflag.FlagSet, dev bool) {
	host, _ := os.Hostname()
	fs.StringVar(&f.nodeID, "node-id", host, "Raft server id of this node, stable across restarts; the host name, so pod coordinator-2 is node coordinator-2, unless set")
	fs.StringVar(&f.raftAddr, "raft-addr", ":8970", "listen address of the Raft transport")
	fs.StringVar(&f.advertise, "advertise", "", "Raft address other nodes dial, stored in the Raft configuration; may be a DNS name resolved at every dial (default: this host name with the --raft-addr port)")
	fs.StringVar(&f.grpcAddr, "coordinator-addr", ":8950", "listen address of the coordinator gRPC API")
	fs.StringVar(&f.grpcAdvertise, "coordinator-advertise", "", "gRPC address other nodes use to forward writes here (default: the --advertise host with the --coordinator-addr port)")
	fs.StringVar(&f.httpAddr, "coordinator-http-addr", ":8960", "listen address of /livez, /readyz, /startupz and /metrics")
	fs.DurationVar(&f.electionTimeout, "raft-election-timeout", cluster.DefaultElectionTimeout, "the one Raft timing knob: a follower that hears no leader for 1-3x this (1-1.5x once the dead leader's connections close; heartbeats every tenth of it) starts a pre-vote, and a leader that hears no quorum for this long steps down; raise it (e.g. 1s) where pods are CPU-throttled for long stretches or the network between nodes has multi-100 ms stalls")
	fs.DurationVar(&f.executorTimeout, "executor-timeout", 15*time.Second, "an executor with no heartbeat for this long is removed and its tasks re-planned")
	fs.Uint32Var(&f.maxAttempts, "task-max-attempts", 3, "runs of a failing task before it is marked failed")
	fs.IntVar(&f.maxUnfinished, "max-unfinished-tasks", state.DefaultMaxUnfinishedTasks, "unfinished tasks per namespace: at this many, new tasks wait until some finish and uploads are refused with 429")
	f.sec = ensureSecurity(f.sec)
	f.sec.registerTLS(fs)
	f.sec.registerClusterSecret(fs)
	fs.DurationVar(&f.retryBackoff, "task-retry-backoff", time.Second, "delay before a failed task's first retry; doubles per attempt")
	if dev {
		return
	}
	fs.IntVar(&f.minQuorum, "min-quorum", 0, "autopilot never removes voters below this count (default: --bootstrap-expect)")
	fs.DurationVar(&f.stabilization, "autopilot-stabilization", 10*time.Second, "a new or rejoining server must be healthy this long before it becomes a voter")
	fs.DurationVar(&f.deadServer, "autopilot-dead-server-threshold", 5*time.Minute, "a server unreachable this long is removed (never below --min-quorum); negative disables")
	fs.StringVar(&f.dataDir, "data-dir", "/var/lib/indexify", "directory for the Raft log, snapshots and node identity")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 1, "number of voters of a new cluster; the same value on every node")
	fs.StringVar(&f.join, "join", "", "comma list of peers' coordinator gRPC addresses: [ID=]HOST:PORT or dns:NAME:PORT (all A records); the same list on every node")
}

func (f *coordFlags) nodeConfig(log *slog.Logger) (coordproc.Config, error) {
	if f.nodeID == "" {
		return coordproc.Config{}, fmt.Errorf("--node-id is empty and the host name is unknown")
	}
	if f.dataDir == "" {
		return coordproc.Config{}, fmt.Errorf("--data-dir is required")
	}
	advertise, err := advertiseAddr(f.advertise, f.raftAddr)
	if err != nil {
		return coordproc.Config{}, fmt.Errorf("--advertise: %w", err)
	}
	grpcAdv := f.grpcAdvertise
	if grpcAdv == "" {
		grpcAdv, err = sameHost(advertise, f.grpcAddr)
		if err != nil {
			return coordproc.Config{}, fmt.Errorf("--coordinator-addr: %w", err)
		}
	}
	httpAdv, err := sameHost(advertise, f.httpAddr)
	if err != nil {
		return coordproc.Config{}, fmt.Errorf("--coordinator-http-addr: %w", err)
	}
	cfg := coordproc.Config{
		Cluster: cluster.Config{
			NodeID:              f.nodeID,
			DataDir:             filepath.Join(f.dataDir, "coordinator"),
			RaftBind:            f.raftAddr,
			RaftAdvertise:       advertise,
			GRPCAdvertise:       grpcAdv,
			HTTPAdvertise:       httpAdv,
			BootstrapExpect:     f.bootstrapExpect,
			Join:                coordclient.ParseTargets(f.join),
			ElectionTimeout:     f.electionTimeout,
			Logger:              log,
			MinQuorum:           f.minQuorum,
			StabilizationTime:   f.stabilization,
			DeadServerThreshold: f.deadServer,
		},
		Scheduler: scheduler.Config{ExecutorTimeout: f.executorTimeout, MaxUnfinishedTasks: f.maxUnfinished},
		Server: coordinator.ServerConfig{
			Service: coordinator.Config{
				MaxTaskAttempts:    f.maxAttempts,
				RetryBackoff:       f.retryBackoff,
				MaxUnfinishedTasks: f.maxUnfinished,
			},
			GRPCAddr: f.grpcAddr,
			HTTPAddr: f.httpAddr,
			Logger:   log,
		},
	}
	if err := f.sec.secureCoordinator(&cfg, log); err != nil {
		return coordproc.Config{}, err
	}
	return cfg, nil
}

// advertiseAddr fills an advertise address from the listen address: an
// empty or wildcard host becomes this machine's host name.
func advertiseAddr(advertise, listen string) (string, error) {
	if advertise != "" {
		if _, _, err := net.SplitHostPort(advertise); err != nil {
			return "", err
		}
		return advertise, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		if host, err = os.Hostname(); err != nil {
			return "", err
		}
	}
	return net.JoinHostPort(host, port), nil
}

// sameHost returns the advertise host with the port of listen.
func sameHost(advertise, listen string) (string, error) {
	host, _, err := net.SplitHostPort(advertise)
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

func newCoordinatorCmd() *cobra.Command {
	f := &coordFlags{}
	var replicasFile *string
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run a coordinator node (Raft member, gRPC API, scheduler while leader)",
		Long: `Run a coordinator node. Start the same command line on every node:

  indexify coordinator --bootstrap-expect 3 \
    --join coordinator-0.coordinator-headless:8950,coordinator-1.coordinator-headless:8950,coordinator-2.coordinator-headless:8950 \
    --advertise $(hostname).coordinator-headless:8970

A node joins an existing cluster if one answers; it bootstraps only when it has
no state and no peer has a cluster, with the same voter list on every node.
SIGTERM hands leadership off before exiting and never removes the node, unless
--replicas-file says this node's ordinal was scaled away (then it leaves).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.Default()
			cfg, err := f.nodeConfig(log)
			if err != nil {
				return err
			}
			ctx, stop := processContext()
			defer stop()
			node, err := coordproc.Start(ctx, cfg)
			if err != nil {
				return err
			}
			<-ctx.Done()
			if leave, why := scaleDownLeave(cfg.Cluster.NodeID, *replicasFile); leave {
				log.Info("leaving the cluster", "why", why)
				return node.Leave()
			}
			log.Info("shutting down: handing leadership off")
			return node.Shutdown()
		},
	}
	f.register(cmd.Flags(), false)
	replicasFile = registerScaleDownFlag(cmd.Flags())
	return cmd
}
