// Package coordclient connects API servers, executors and the CLI to a set of
// coordinators. Callers name coordinators as a list of host:port addresses
// and/or "dns:NAME:PORT" entries (every A record of NAME, e.g. a Kubernetes
// headless service), never "the leader": every coordinator accepts every call
// and forwards writes itself, so the client only needs some live node. It
// learns the leader from the answers of forwarded writes and sends those
// methods there directly while that connection is ready (retry.go).
package coordclient

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/indexify-go/indexify/internal/grpcconn"
)

// serviceConfig balances calls over all resolved coordinators. It has no
// retry policy: retries of this hop have one owner, the interceptor in
// retry.go, which also follows leader hints.
const serviceConfig = `{"loadBalancingConfig": [{"round_robin": {}}]}`

// ParseTargets splits a comma-separated coordinator list, trimming blanks.
func ParseTargets(list string) []string {
	var out []string
	for _, t := range strings.Split(list, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// Dial returns one connection spreading calls over every coordinator named by
// targets. DNS entries are re-resolved periodically so pods that come back
// with new IPs are found again. Unary calls answered UNAVAILABLE are retried
// (retry.go) until the caller's context ends; callers do not retry them.
func Dial(targets []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if len(targets) == 0 {
		return nil, fmt.Errorf("no coordinator address given")
	}
	for _, t := range targets {
		if _, _, err := splitTarget(t); err != nil {
			return nil, err
		}
	}
	r := manual.NewBuilderWithScheme("indexify")
	d := &discovery{targets: targets, r: r, stop: make(chan struct{})}
	r.BuildCallback = func(resolver.Target, resolver.ClientConn, resolver.BuildOptions) { go d.loop() }
	r.InitialState(resolver.State{Addresses: d.resolve()})
	// Keepalive pings find a connection whose peer vanished without a
	// FIN (a pod replaced with a new IP): without them an executor's
	// heartbeat stream to a gone coordinator hung for minutes (test/k8s,
	// every pod deleted). 10 s is twice the servers' enforcement minimum
	// (coordinator/limits.go), so jitter never makes a ping too early.
	ka := grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true})
	base := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), ka, grpcconn.Connect()}
	// Hinted leaders are dialled with the caller's options (credentials);
	// their interceptors do not run on redirected tries (see retrier.unary).
	rt := &retrier{opts: append(append(base, opts...), grpc.WithDisableRetry())}
	r.CloseCallback = func() { d.close(); rt.close() }
	all := append(base, grpc.WithResolvers(r), grpc.WithDefaultServiceConfig(serviceConfig), grpc.WithDisableRetry())
	all = append(all, opts...)
	// Innermost, after the caller's interceptors: see retrier.unary.
	all = append(all, grpc.WithChainUnaryInterceptor(rt.unary))
	return grpc.NewClient(r.Scheme()+":///coordinators", all...)
}

type discovery struct {
	targets []string
	r       *manual.Resolver
	stop    chan struct{}
	once    sync.Once
}

func (d *discovery) close() { d.once.Do(func() { close(d.stop) }) }

func (d *discovery) loop() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		if addrs := d.resolve(); len(addrs) > 0 {
			d.r.UpdateState(resolver.State{Addresses: addrs})
		}
	}
}

// resolve expands dns: entries; static entries pass through (a host name in
// a static entry is resolved by gRPC at connect time).
func (d *discovery) resolve() []resolver.Address {
	seen := map[string]bool{}
	var out []resolver.Address
	// ServerName is the name TLS verifies the coordinator's certificate
	// against: the entry's host (or the dns: name), not the resolved IP.
	add := func(a, serverName string) {
		if !seen[a] {
			seen[a] = true
			out = append(out, resolver.Address{Addr: a, ServerName: serverName})
		}
	}
	for _, t := range d.targets {
		name, port, _ := splitTarget(t)
		if port == "" {
			host, _, _ := net.SplitHostPort(name)
			add(name, host)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ips, err := net.DefaultResolver.LookupHost(ctx, name)
		cancel()
		if err != nil {
			continue // not resolvable yet; retried on the next round
		}
		sort.Strings(ips)
		for _, ip := range ips {
			add(net.JoinHostPort(ip, port), name)
		}
	}
	return out
}

// splitTarget returns (address, "") for a static entry and (name, port) for
// a "dns:NAME:PORT" entry.
func splitTarget(t string) (string, string, error) {
	rest, ok := strings.CutPrefix(t, "dns:")
	if !ok {
		if _, _, err := net.SplitHostPort(t); err != nil {
			return "", "", fmt.Errorf("coordinator address %q: want HOST:PORT or dns:NAME:PORT", t)
		}
		return t, "", nil
	}
	name, port, err := net.SplitHostPort(rest)
	if err != nil || name == "" || port == "" {
		return "", "", fmt.Errorf("coordinator address %q: want dns:NAME:PORT", t)
	}
	return name, port, nil
}
