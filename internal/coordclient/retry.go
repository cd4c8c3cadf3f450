package coordclient

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/grpcconn"
	"github.com/indexify-go/indexify/internal/retry"
)

// This file is the one retry owner of the hop from a coordinator client
// (API server, executor, CLI) to the coordinators; see DESIGN.md for the
// table of every hop. gRPC's own retry policy is off (serviceConfig has
// none) and callers above do not loop on Unavailable.
//
// What is retried: a unary call answered UNAVAILABLE. Every coordinator
// accepts every call and forwards writes itself, and holds a write while
// there is no leader, so UNAVAILABLE means "this coordinator cannot help
// now" (it is down, shutting down, or cut off from the leader). Writes carry
// request ids, so a retry of a write that did commit is answered from the
// coordinators' dedup table.
//
// Where it goes: a NOT_LEADER answer (errcode.NotLeader) naming the leader's
// address is re-sent there at once: the refusing node proposed nothing and
// knows where the leader is, so waiting would only add latency. Any other
// UNAVAILABLE is re-sent through the balanced connection (the next
// coordinator), the first time at once, then after a capped, jittered,
// doubling pause.
//
// Where it goes first: a method whose last answer came with the leader's
// address in its trailer (errcode.LeaderTrailer: the coordinator forwarded
// its write there), or that last succeeded at a hinted leader, goes to that
// leader directly while the connection to it is ready; that saves the
// follower's forwarding hop on two writes in three. Calls the coordinators
// serve themselves (reads) never carry the trailer and stay balanced. The
// route is only a shortcut: a connection that is not ready is not waited
// for (the call goes balanced and the connection is kicked), and a routed
// try that fails drops the route (UNAVAILABLE is re-sent balanced at once,
// as any), so an address the client cannot reach (a CLI outside the
// cluster) costs nothing, and a leader that stopped answering (paused, cut
// off) costs one call per method, which ends at its deadline as a balanced
// call to that node would.
//
// How long: until the caller's context ends; a context without a deadline
// gets maxAttemptsNoDeadline attempts, and a connection dialled with
// MaxAttempts at most that many (the operator CLI).

const (
	firstBackoff          = 20 * time.Millisecond
	maxBackoff            = 500 * time.Millisecond
	maxAttemptsNoDeadline = 5
	// maxRedirects bounds hint-following without pause in one call, so two
	// nodes naming each other (a stale view during an election) cannot
	// bounce a call in a tight loop; after that hints wait like any retry.
	maxRedirects = 3
)

// Attempt describes one try of a call, for observers (OnAttempt).
type Attempt struct {
	Method string
	N      int    // 1 for the first try
	Target string // the hinted leader's address, or "" for the balanced connection
	Waited time.Duration
	Err    error // the answer (nil: success)
}

// OnAttempt returns a dial option that calls fn after every try of every
// unary call, in the calling goroutine (tests and metrics).
func OnAttempt(fn func(Attempt)) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(withObserver(ctx, fn), method, req, reply, cc, opts...)
	})
}

type observerKey struct{}

func withObserver(ctx context.Context, fn func(Attempt)) context.Context {
	return context.WithValue(ctx, observerKey{}, fn)
}

type maxAttemptsKey struct{}

// MaxAttempts returns a dial option that bounds every unary call to n
// tries even when its deadline is far: an operator's command against a
// coordinator that is down should say so in a second or two, not at the
// end of its --timeout.
func MaxAttempts(n int) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(context.WithValue(ctx, maxAttemptsKey{}, n), method, req, reply, cc, opts...)
	})
}

// retrier owns the retries of one Dial'ed connection. leaders caches one
// connection per hinted leader address, dialled with the caller's options;
// routes maps a method to the leader address its calls go to first.
type retrier struct {
	opts []grpc.DialOption

	mu      sync.Mutex
	leaders map[string]*grpc.ClientConn
	routes  map[string]string
}

// route is where a call of method goes first: the leader's connection when
// the method has a route and that connection is ready, else main.
func (r *retrier) route(main *grpc.ClientConn, method string) (string, *grpc.ClientConn) {
	r.mu.Lock()
	addr := r.routes[method]
	lc := r.leaders[addr]
	r.mu.Unlock()
	if lc == nil {
		return "", main
	}
	switch lc.GetState() {
	case connectivity.Ready:
		return addr, lc
	case connectivity.Idle:
		lc.Connect() // ready for a later call; this one does not wait
	}
	return "", main
}

// learn routes method to the leader at addr and starts connecting to it.
func (r *retrier) learn(main *grpc.ClientConn, method, addr string) {
	r.mu.Lock()
	known := r.routes[method] == addr
	r.mu.Unlock()
	if known {
		return
	}
	lc, err := r.leaderConn(main, addr)
	if err != nil {
		return
	}
	r.mu.Lock()
	if r.leaders[addr] == lc { // not closed meanwhile
		if r.routes == nil {
			r.routes = map[string]string{}
		}
		r.routes[method] = addr
	}
	r.mu.Unlock()
	lc.Connect()
}

// forget drops method's route if it still points at addr.
func (r *retrier) forget(method, addr string) {
	r.mu.Lock()
	if r.routes[method] == addr {
		delete(r.routes, method)
	}
	r.mu.Unlock()
}

// leaderConn returns the connection to a hinted leader; main is the
// balanced connection the call came through.
func (r *retrier) leaderConn(main *grpc.ClientConn, addr string) (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if main.GetState() == connectivity.Shutdown {
		return nil, status.Error(codes.Canceled, "coordclient: connection closed")
	}
	if cc, ok := r.leaders[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, r.opts...)
	if err != nil {
		return nil, err
	}
	if r.leaders == nil {
		r.leaders = map[string]*grpc.ClientConn{}
	}
	r.leaders[addr] = cc
	return cc, nil
}

// close drops the leader connections; it runs when the balanced
// connection closes its resolver (Close, or entering idle mode, after which
// leaderConn dials again on demand).
func (r *retrier) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cc := range r.leaders {
		cc.Close()
	}
	r.leaders, r.routes = nil, nil
}

// unary is the innermost interceptor of the connection, so the caller's
// interceptors (request ids, metadata) run once per call and every try
// sends the same request. A redirected try invokes the raw call on the
// leader's connection, which runs none of that connection's interceptors.
func (r *retrier) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	observe, _ := ctx.Value(observerKey{}).(func(Attempt))
	limit := 0 // none: until ctx ends
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		limit = maxAttemptsNoDeadline
	}
	if n, ok := ctx.Value(maxAttemptsKey{}).(int); ok && n > 0 {
		limit = n
	}
	backoff := time.Duration(0) // the first plain retry goes at once
	redirects := 0
	target, conn := r.route(cc, method)
	var waited time.Duration
	var trailer metadata.MD
	opts = append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))
	for n := 1; ; n++ {
		trailer = nil
		err := invoker(ctx, method, req, reply, conn, opts...)
		if observe != nil {
			observe(Attempt{Method: method, N: n, Target: target, Waited: waited, Err: err})
		}
		if leader := trailer.Get(errcode.LeaderTrailer); len(leader) > 0 && leader[0] != "" {
			r.learn(cc, method, leader[0])
		} else if err == nil && target != "" {
			r.learn(cc, method, target) // the hinted leader served it
		}
		if err != nil && target != "" {
			// Any failure there drops the route, not only UNAVAILABLE: a
			// leader paused or cut off after a new election still holds
			// a ready connection, and its calls end at the deadline.
			r.forget(method, target)
		}
		if err == nil || status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return err
		}
		if limit > 0 && n >= limit {
			return err
		}
		if _, addr, ok := errcode.LeaderHint(err); ok && addr != "" && addr != target && redirects < maxRedirects {
			if lc, derr := r.leaderConn(cc, addr); derr == nil {
				// A hinted leader that was down when last tried (it
				// restarted, and won) is tried now, not after gRPC's backoff.
				grpcconn.Wake(ctx, lc)
				redirects++
				target, conn, waited = addr, lc, 0
				continue
			}
		}
		target, conn = "", cc
		waited = jitter(backoff)
		if waited > 0 && !retry.Sleep(ctx, waited) {
			return err
		}
		backoff = min(max(2*backoff, firstBackoff), maxBackoff)
	}
}

// jitter spreads d over [d/2, d] so clients that failed together do not
// retry together.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}
