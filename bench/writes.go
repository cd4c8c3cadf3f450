package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/indexify-go/indexify/bench/loadgen"
)

var (
	writeClients = []int{1, 16, 64}
	writeSizes   = []int{256, 4096}
)

// writesSuite: the same closed-loop generator against our 3-node cluster
// and a 3-member etcd cluster, then our 1-node cluster (issue 3's 3 vs 1).
func writesSuite(r *runner, o options) (string, error) {
	ctx := context.Background()
	type cell struct{ ours, etcd, one loadgen.Result }
	cells := map[[2]int]*cell{}
	for _, s := range writeSizes {
		for _, c := range writeClients {
			cells[[2]int{s, c}] = &cell{}
		}
	}
	run := fmt.Sprint(time.Now().UnixNano())
	var profile string

	// Both 3-member clusters run side by side (idle but for heartbeats) and
	// the cells alternate ours, etcd, ours, etcd: on a shared machine whose
	// load changes by the minute, each pair is measured under the same load.
	pdir := pprofEnv(r, o)
	ours := startOurs(r, 3)
	ours.setupContent(ctx, 64)
	var ec *etcdCluster
	etcdNote := ""
	if o.noEtcd {
		etcdNote = "etcd skipped (--no-etcd)."
	} else {
		ec = startEtcd(r, 3)
	}
	for _, s := range writeSizes {
		for _, c := range writeClients {
			cfg := loadgen.Config{Clients: c, Duration: o.duration, Warmup: warmup(o)}
			var top, ftop chan string
			if pdir != "" && c == 64 && s == 256 {
				top, ftop = make(chan string, 1), make(chan string, 1)
				li, id := ours.leader()
				fid := ours.Nodes[(li+1)%3].ID
				d := max(o.duration-time.Second, time.Second)
				go func() { top <- cpuTop(pdir, id, d, 30) }()
				go func() { ftop <- cpuTop(pdir, fid, d, 30) }()
			}
			res := loadgen.Run(ctx, cfg, labelWrite(ours.cl, s, fmt.Sprintf("%s-%d-%d", run, s, c)))
			if top != nil {
				profile = "leader:\n" + <-top + "\n\na follower:\n" + <-ftop
			}
			slog.Info("ours 3 nodes", "size", s, "res", res.String())
			cells[[2]int{s, c}].ours = res
			if ec != nil {
				res, err := ec.load(c, s, o)
				if err != nil {
					return "", err
				}
				slog.Info("etcd 3 members", "size", s, "res", res.String())
				cells[[2]int{s, c}].etcd = res
			}
		}
	}
	r.close()

	// Ours, 1 node, 64 clients.
	one := startOurs(r, 1)
	one.setupContent(ctx, 64)
	for _, s := range writeSizes {
		res := loadgen.Run(ctx, loadgen.Config{Clients: 64, Duration: o.duration, Warmup: warmup(o)},
			labelWrite(one.cl, s, fmt.Sprintf("%s-one-%d", run, s)))
		slog.Info("ours 1 node", "size", s, "res", res.String())
		cells[[2]int{s, 64}].one = res
	}
	r.close()

	var rows [][]string
	for _, s := range writeSizes {
		for _, c := range writeClients {
			x := cells[[2]int{s, c}]
			rows = append(rows, []string{
				fmt.Sprint(s), fmt.Sprint(c),
				num(x.ours.OpsPerSec), ms(x.ours.P50Ms), ms(x.ours.P99Ms),
				num(x.etcd.OpsPerSec), ms(x.etcd.P50Ms), ms(x.etcd.P99Ms),
				ratio(x.ours.OpsPerSec, x.etcd.OpsPerSec), ratio(x.ours.P99Ms, x.etcd.P99Ms),
				fmt.Sprint(x.ours.Errors + x.etcd.Errors),
			})
		}
	}
	var b strings.Builder
	b.WriteString("## Small writes: ours vs etcd (3 members each, loopback, same disk)\n\n")
	b.WriteString("Ours: `CoordinatorService.UpdateLabels` (labels `{\"v\": <JSON string of SIZE bytes>}`, a request id per write) " +
		"on content `w<client>`, through one `coordclient` connection over all three coordinators, as the API server's (a follower forwards a write to the leader and names it in its answer; the connection then sends that method to the leader while its connection is ready). " +
		"etcd: `clientv3.Put` of a SIZE-byte value to key `bench/<client>`, one client over all three endpoints. " +
		"Both are driven by the same closed-loop generator (`bench/loadgen`; etcd's side runs in the `bench/etcdpeer` process); ops/s and latencies are per acknowledged write. " +
		"Both clusters run at the same time and the cells alternate (ours, then etcd, for each row), so each ratio compares runs under the same machine load. " +
		etcdNote + "\n\n")
	b.WriteString(table([]string{"value B", "clients", "ours ops/s", "ours p50 ms", "ours p99 ms",
		"etcd ops/s", "etcd p50 ms", "etcd p99 ms", "throughput ours/etcd", "p99 ours/etcd", "errors"}, rows))
	b.WriteString("\n### Write throughput, 3 nodes vs 1 node (ours, 64 clients)\n\n")
	var rows2 [][]string
	for _, s := range writeSizes {
		x := cells[[2]int{s, 64}]
		rows2 = append(rows2, []string{fmt.Sprint(s), num(x.one.OpsPerSec), ms(x.one.P99Ms),
			num(x.ours.OpsPerSec), ms(x.ours.P99Ms), ratio(x.ours.OpsPerSec, x.one.OpsPerSec)})
	}
	b.WriteString(table([]string{"value B", "1 node ops/s", "1 node p99 ms", "3 nodes ops/s", "3 nodes p99 ms", "3 nodes / 1 node"}, rows2))
	if profile != "" {
		b.WriteString("\n### CPU profiles of our leader and a follower (256 B, 64 clients): `go tool pprof -top`\n\n```\n" + profile + "\n```\n")
	}
	return b.String(), nil
}
