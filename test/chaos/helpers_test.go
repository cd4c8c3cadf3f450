package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/indexify-go/indexify/internal/retry"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Helper modes of this test binary, each run with `ip netns exec` inside a
// namespace of the campaign: status (who leads), verify (end-of-run state
// checks) and proxy (the slow link).

// readConfig decodes the helper's JSON config from the file named by
// CHAOS_CONFIG_FILE (a file, not the environment: the verify helper's list of
// acknowledged ids outgrows the kernel's limit on one environment string).
func readConfig(v any) error {
	b, err := os.ReadFile(os.Getenv("CHAOS_CONFIG_FILE"))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

type statusConfig struct {
	Addrs []string `json:"addrs"`
}

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func statusMain() int {
	var cfg statusConfig
	if err := readConfig(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out := make([]statusView, len(cfg.Addrs))
	done := make(chan struct{}, len(cfg.Addrs))
	for i, addr := range cfg.Addrs {
		go func() {
			defer func() { done <- struct{}{} }()
			out[i].Addr = addr
			conn, err := dial(addr)
			if err != nil {
				out[i].Err = err.Error()
				return
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := pb.NewClusterServiceClient(conn).Status(ctx, &pb.StatusRequest{})
			if err != nil {
				out[i].Err = err.Error()
				return
			}
			out[i].ID, out[i].State, out[i].Leader, out[i].Term = st.GetNodeId(), st.GetState(), st.GetLeaderId(), st.GetTerm()
			out[i].ClusterID = st.GetClusterId()
			for _, m := range st.GetMembers() {
				if m.GetSuffrage() == "voter" {
					out[i].Voters++
					if m.GetHealthy() {
						out[i].HealthyVoters++
					}
				}
			}
		}()
	}
	for range cfg.Addrs {
		<-done
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	return 0
}

type verifyConfig struct {
	Addrs     []string      `json:"addrs"`
	Namespace string        `json:"namespace"`
	Graph     string        `json:"graph"`
	Policy    string        `json:"policy"`
	Acked     []string      `json:"acked"`
	Timeout   time.Duration `json:"timeout"`
}

type verifyResult struct {
	Missing   []string `json:"missing"` // acknowledged ingests not found
	Tasks     int      `json:"tasks"`
	Terminal  int      `json:"terminal"`
	Assigned  int      `json:"assigned"` // unfinished, held by a live executor
	Orphans   []string `json:"orphans"`  // unfinished and pending or held by a dead executor
	Executors []string `json:"executors"`
	Err       string   `json:"err,omitempty"`
}

// verifyMain reads the final state at the linearizable level. It polls until
// the task invariant holds or the timeout passes: right after the last heal
// the scheduler may legitimately still be re-planning.
func verifyMain() int {
	var cfg verifyConfig
	if err := readConfig(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var conns []pb.CoordinatorServiceClient
	for _, a := range cfg.Addrs {
		conn, err := dial(a)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer conn.Close()
		conns = append(conns, pb.NewCoordinatorServiceClient(conn))
	}
	lin := pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE
	// anyNode tries each coordinator in turn for one call.
	anyNode := func(f func(ctx context.Context, c pb.CoordinatorServiceClient) error) error {
		var last error
		for _, c := range conns {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			last = f(ctx, c)
			cancel()
			if last == nil {
				return nil
			}
		}
		return last
	}
	var res verifyResult
	retry.PollUntil(cfg.Timeout, 500*time.Millisecond, func() bool {
		res = verifyResult{}
		err := verifyOnce(cfg, anyNode, lin, &res)
		if err != nil {
			res.Err = err.Error()
		}
		return err == nil && len(res.Orphans) == 0
	})
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

func verifyOnce(cfg verifyConfig, anyNode func(func(context.Context, pb.CoordinatorServiceClient) error) error,
	lin pb.ReadConsistency, res *verifyResult) error {
	for i := 0; i < len(cfg.Acked); i += 200 {
		batch := cfg.Acked[i:min(i+200, len(cfg.Acked))]
		var got *pb.GetContentResponse
		if err := anyNode(func(ctx context.Context, c pb.CoordinatorServiceClient) (err error) {
			got, err = c.GetContent(ctx, &pb.GetContentRequest{Namespace: cfg.Namespace, Ids: batch, Consistency: lin})
			return err
		}); err != nil {
			return fmt.Errorf("get content: %w", err)
		}
		found := map[string]bool{}
		for _, ct := range got.GetContents() {
			found[ct.GetId()] = true
		}
		for _, id := range batch {
			if !found[id] {
				res.Missing = append(res.Missing, id)
			}
		}
	}
	var execs *pb.ListExecutorsResponse
	if err := anyNode(func(ctx context.Context, c pb.CoordinatorServiceClient) (err error) {
		execs, err = c.ListExecutors(ctx, &pb.ListExecutorsRequest{Consistency: lin})
		return err
	}); err != nil {
		return fmt.Errorf("list executors: %w", err)
	}
	live := map[string]bool{}
	for _, x := range execs.GetExecutors() {
		live[x.GetId()] = true
		res.Executors = append(res.Executors, x.GetId())
	}
	start := ""
	for page := 0; page < 10000; page++ {
		var tasks *pb.ListTasksResponse
		if err := anyNode(func(ctx context.Context, c pb.CoordinatorServiceClient) (err error) {
			tasks, err = c.ListTasks(ctx, &pb.ListTasksRequest{Namespace: cfg.Namespace, GraphName: cfg.Graph,
				Policy: cfg.Policy, StartId: start, Limit: 500, Consistency: lin})
			return err
		}); err != nil {
			return fmt.Errorf("list tasks: %w", err)
		}
		for _, tk := range tasks.GetTasks() {
			res.Tasks++
			switch {
			case tk.GetOutcome() != pb.TaskOutcome_TASK_OUTCOME_UNKNOWN:
				res.Terminal++
			case tk.GetExecutorId() != "" && live[tk.GetExecutorId()]:
				res.Assigned++
			default:
				res.Orphans = append(res.Orphans, tk.GetId()+"@"+tk.GetExecutorId())
			}
			start = tk.GetId()
		}
		if len(tasks.GetTasks()) < 500 {
			return nil
		}
	}
	return fmt.Errorf("task listing did not end")
}

type proxyConfig struct {
	Listen    string `json:"listen"`
	Target    string `json:"target"`
	DelayFile string `json:"delay_file"`
}

// proxyMain forwards TCP connections to Target, delaying every chunk by the
// number of milliseconds in DelayFile (re-read every 100 ms). Chunks are
// queued with their due time, so the link has latency, not a lower rate.
func proxyMain() int {
	var cfg proxyConfig
	if err := readConfig(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var delay atomic.Int64
	go func() {
		for {
			if b, err := os.ReadFile(cfg.DelayFile); err == nil {
				if ms, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					delay.Store(int64(ms) * int64(time.Millisecond))
				}
			}
			time.Sleep(100 * time.Millisecond) // poll the control file
		}
	}()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		in, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			out, err := net.DialTimeout("tcp", cfg.Target, 5*time.Second)
			if err != nil {
				in.Close()
				return
			}
			go delayedPipe(out, in, &delay)
			delayedPipe(in, out, &delay)
		}()
	}
}

type chunk struct {
	data []byte
	due  time.Time
}

// delayedPipe copies src to dst, each chunk delivered delay after it was
// read; when either side fails both connections are closed.
func delayedPipe(dst, src net.Conn, delay *atomic.Int64) {
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{data: buf[:n], due: time.Now().Add(time.Duration(delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d) // this is the injected latency
		}
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
	for range q { // let the reader finish
	}
}
