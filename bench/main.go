// Command bench measures the coordinator against a peer measured in the same
// run on the same machine (a 3-member etcd cluster on loopback) and writes
// the tables of BENCHMARKS.md. Run from the repository root:
//
//	go run ./bench writes     # small writes: ours vs etcd, 1/16/64 clients, 256 B / 4 KiB; 3 vs 1 node
//	go run ./bench failover   # kill -9 and SIGTERM of the leader, ours vs etcd
//	go run ./bench sched      # upload -> task at an executor; tasks created+assigned per second
//	go run ./bench scale      # 1M items: memory, snapshot, restart, follower catch-up
//	go run ./bench retrieval  # vector search embedded vs Weaviate, bulk indexing, upload -> searchable
//	go run ./bench micro      # go test -bench figures (allocation planner etc.)
//	go run ./bench all
//
// Every suite takes --quick (seconds instead of minutes; what CI's smoke test
// runs) and writes its section of --out (default BENCHMARKS.md). The etcd
// peer is built from bench/etcdpeer, a separate Go module.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
)

type options struct {
	out      string
	quick    bool
	duration time.Duration // per load cell
	trials   int
	items    int
	noEtcd   bool
	profile  bool
	// profileKeep, if set, is a directory the raw CPU profiles are copied
	// into (named after the node), for `go tool pprof` beyond the listing.
	profileKeep string
	// profileFor is how long the sched suite profiles the coordinators.
	profileFor time.Duration
	inProc     bool
	// failover: extra kill -9 rows of ours, one per --raft-election-timeout value
	altTimeouts []string
	// failover: skip the kill -9 trials (a SIGTERM run on a fresh cluster)
	termOnly bool
	// retrieval: wall time allowed for Weaviate's import at each size
	weaviateBudget time.Duration
	// gogc, if set, is GOGC for the processes the bench starts (not for
	// the bench's own process, whose load generators share the machine)
	gogc string
}

type suite struct {
	name string
	doc  string
	run  func(r *runner, o options) (string, error)
}

var suites = []suite{
	{"writes", "small writes, ours vs etcd", writesSuite},
	{"failover", "leader kill -9 and SIGTERM hand-off, ours vs etcd", failoverSuite},
	{"sched", "scheduling latency and throughput", schedSuite},
	{"scale", "1M items: memory, snapshot, restart, new follower", scaleSuite},
	{"retrieval", "vector search embedded vs Weaviate (100k, 1M x 384), bulk indexing, upload -> searchable", retrievalSuite},
	{"micro", "the repository's go test -bench figures (allocation planner, scheduler pass, FSM apply)", microSuite},
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	o, err := parseFlags(os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cmd := "go run ./bench " + shellJoin(os.Args[1:])
	if o.gogc != "" {
		// The runtime read GOGC when this process started; children read
		// it from the environment they inherit.
		os.Setenv("GOGC", o.gogc)
	}
	if err := run(name, o, cmd); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: go run ./bench <suite|all> [--quick] [--out FILE] [--duration D] [--trials N] [--items N] [--no-etcd] [--profile] [--profile-keep DIR] [--profile-for D] [--weaviate-import-budget D] [--gogc N]")
	for _, s := range suites {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", s.name, s.doc)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.out, "out", "BENCHMARKS.md", "Markdown file whose section this suite rewrites")
	fs.BoolVar(&o.quick, "quick", false, "tiny run (smoke test): short cells, few trials, few items")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per load cell")
	fs.IntVar(&o.trials, "trials", 20, "failover trials per kind and system")
	fs.IntVar(&o.items, "items", 1_000_000, "content items of the scale suite")
	fs.BoolVar(&o.noEtcd, "no-etcd", false, "skip the etcd peer")
	fs.BoolVar(&o.profile, "profile", false, "add pprof top listings: our leader's CPU in the heaviest write cell; the scale suite's heap and restore CPU")
	fs.StringVar(&o.profileKeep, "profile-keep", "", "with --profile: also keep the raw CPU profiles of the coordinators in this directory")
	fs.DurationVar(&o.profileFor, "profile-for", 8*time.Second, "with --profile: how long the sched suite's throughput run is profiled, from its start")
	fs.BoolVar(&o.inProc, "in-process-only", false, "scale: skip the real-process part (restart, new follower)")
	fs.DurationVar(&o.weaviateBudget, "weaviate-import-budget", 10*time.Minute, "retrieval: longest Weaviate import per size; the row reports how many vectors made it")
	fs.BoolVar(&o.termOnly, "sigterm-only", false, "failover: only the SIGTERM hand-off trials, on a cluster that was not through kill -9 first")
	fs.StringVar(&o.gogc, "gogc", "", "GOGC of the servers the bench starts (ours and etcd), e.g. 400 or off; the bench's own process keeps its GOGC")
	alt := fs.String("failover-timeouts", "1s", "failover: comma-separated --raft-election-timeout values, one extra kill -9 row of ours each (\"\" for none)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, v := range strings.Split(*alt, ",") {
		if v = strings.TrimSpace(v); v != "" {
			if _, err := time.ParseDuration(v); err != nil {
				return o, fmt.Errorf("--failover-timeouts: %w", err)
			}
			o.altTimeouts = append(o.altTimeouts, v)
		}
	}
	if o.gogc != "" {
		if _, err := strconv.Atoi(o.gogc); err != nil && o.gogc != "off" {
			return o, fmt.Errorf("--gogc: %q is neither a number nor off", o.gogc)
		}
	}
	if o.quick {
		o.duration = min(o.duration, 700*time.Millisecond)
		o.trials = min(o.trials, 2)
		o.items = min(o.items, 5_000)
	}
	return o, nil
}

// shellJoin joins arguments so the printed command can be pasted back into
// a shell: an empty argument or one with a space or quote is quoted.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// run runs one suite (or all) and writes each finished section.
func run(name string, o options, cmd string) error {
	var errs []error
	found := false
	for _, s := range suites {
		if name != "all" && name != s.name {
			continue
		}
		found = true
		slog.Info("suite start", "suite", s.name)
		body, err := runSuite(s, o)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			continue
		}
		c := cmd
		if name == "all" {
			c = strings.Replace(cmd, " all", " "+s.name, 1)
		}
		text := body + "\nReproduce: `" + c + "`\n\n" + machineLine() + "\n"
		if err := writeSection(o.out, s.name, text); err != nil {
			errs = append(errs, err)
		}
		slog.Info("suite done", "suite", s.name, "out", o.out)
	}
	if !found {
		usage()
		return fmt.Errorf("unknown suite %q", name)
	}
	return errors.Join(errs...)
}

// runSuite turns a harness Fatal into an error and always cleans up the
// processes the suite started.
func runSuite(s suite, o options) (body string, err error) {
	r := &runner{}
	defer r.close()
	defer func() {
		if v := recover(); v != nil {
			f, ok := v.(fatal)
			if !ok {
				panic(v)
			}
			err = errors.New(f.msg)
		}
	}()
	return s.run(r, o)
}
