// Command etcdpeer is the benchmark's reference system: an etcd member
// embedded from etcd's own server package, plus the etcd side of the shared
// load generator. It is its own Go module so the indexify binary and the
// main module's dependency graph never include etcd.
//
//	etcdpeer serve --name N --dir D --client URL --peer URL --cluster n0=URL,n1=URL,...
//	etcdpeer load  --endpoints A,B,C --clients N --value-size S --duration D
//	etcdpeer probe --endpoints A,B,C --writers W --duration D
//
// serve prints "ready" once the member serves clients and stops gracefully
// on SIGTERM (etcd hands leadership over before stopping). load prints one
// JSON loadgen.Result. probe prints "ok START_NS END_NS" for every
// successful write until its duration ends or stdin closes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/indexify-go/indexify/bench/loadgen"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: etcdpeer serve|load|probe [flags]")
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	case "probe":
		err = probe(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	name := fs.String("name", "n0", "member name")
	dir := fs.String("dir", "", "data directory")
	client := fs.String("client", "", "client URL (http://127.0.0.1:PORT)")
	peer := fs.String("peer", "", "peer URL")
	cluster := fs.String("cluster", "", "initial cluster: name=peerURL,...")
	fs.Parse(args)
	cu, err := url.Parse(*client)
	if err != nil {
		return err
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = *name, *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = *cluster
	cfg.InitialClusterToken = "bench"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		return fmt.Errorf("member not ready within 60s")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		e.Close() // EtcdServer.Stop: transfers leadership first
		return nil
	case err := <-e.Err():
		return err
	}
}

func dial(endpoints string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(endpoints, ","),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	endpoints := fs.String("endpoints", "", "comma list of client URLs")
	clients := fs.Int("clients", 1, "concurrent clients")
	size := fs.Int("value-size", 256, "bytes per value")
	dur := fs.Duration("duration", 5*time.Second, "measured phase")
	warm := fs.Duration("warmup", time.Second, "unmeasured warm-up")
	maxOps := fs.Int("max-ops", 0, "per client (0 = until duration)")
	fs.Parse(args)
	cli, err := dial(*endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	val := loadgen.Payload(*size, false)
	// One key per client, overwritten: the same shape as our benchmark,
	// which updates the labels of one content item per client.
	res := loadgen.Run(context.Background(), loadgen.Config{
		Clients: *clients, Duration: *dur, Warmup: *warm, MaxOps: *maxOps,
	}, func(ctx context.Context, c, i int) error {
		_, err := cli.Put(ctx, fmt.Sprintf("bench/%d", c), val)
		return err
	})
	return json.NewEncoder(os.Stdout).Encode(res)
}

func probe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	endpoints := fs.String("endpoints", "", "comma list of client URLs")
	writers := fs.Int("writers", 4, "concurrent writers")
	dur := fs.Duration("duration", time.Minute, "stop after this long")
	timeout := fs.Duration("timeout", 500*time.Millisecond, "per write")
	fs.Parse(args)
	cli, err := dial(*endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }() // parent gone: stop
	var mu sync.Mutex
	val := loadgen.Payload(256, false)
	loadgen.Probe(ctx, *writers, *timeout, func(ctx context.Context, c, i int) error {
		_, err := cli.Put(ctx, fmt.Sprintf("probe/%d", c), val)
		return err
	}, func(s loadgen.Success) {
		mu.Lock()
		fmt.Printf("ok %d %d\n", s.Start.UnixNano(), s.End.UnixNano())
		mu.Unlock()
	}, func(s loadgen.Success) {
		mu.Lock()
		fmt.Printf("err %d %d\n", s.Start.UnixNano(), s.End.UnixNano())
		mu.Unlock()
	})
	return nil
}
