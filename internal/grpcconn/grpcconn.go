// Package grpcconn holds what this project does to a cached gRPC client
// connection before using it: the one rule, shared by the coordinators'
// peer connections (internal/cluster) and the clients' connections to a
// hinted leader (internal/coordclient).
package grpcconn

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
)

// ConnectTimeout is how long one connect to a coordinator may take, on gRPC
// connections (Connect) and Raft's own (internal/cluster's stream layer).
const ConnectTimeout = time.Second

// Connect bounds how long one connect attempt may take and how long gRPC
// waits between attempts, for every connection to a coordinator. gRPC's
// defaults (a connect may take 20 s; the wait grows to 2 minutes) are made
// for far-away servers. Ours are pods on the cluster network: a connect
// there takes milliseconds or is refused at once, and one that hangs is to
// the old IP of a pod that restarted while DNS still named it. Every call
// on the connection waits out such a connect (a follower's /readyz, which
// asks the leader, timed out behind one in test/k8s's rolling upgrade), so
// a connect gives up after a second and the next one resolves the name
// again; the wait between attempts stays under 5 s so a restarted pod is
// found again soon even without Wake.
func Connect() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
		MinConnectTimeout: ConnectTimeout,
	})
}

// wakeWait bounds how long Wake waits for the connection to start
// connecting again (it takes microseconds; the bound is for a stuck conn).
const wakeWait = 250 * time.Millisecond

// Wake takes cc out of gRPC's reconnect backoff when its last connect
// failed. In TRANSIENT_FAILURE gRPC fails every call at once with the old
// error until the backoff (a second, growing) ends, although the server may
// be back: after a failover the new leader is often the pod that restarted
// a moment ago, and callers that had tried it while it was down kept getting
// "connection refused" for 400-500 ms (failover bench, SIGTERM). Wake asks
// for a new connect and waits (bounded by ctx and wakeWait) until cc has
// left TRANSIENT_FAILURE, so the call that follows waits for that connect
// instead of failing with the old error. The callers' own retry loops
// bound how often it runs. Call it without holding locks.
func Wake(ctx context.Context, cc *grpc.ClientConn) {
	if cc.GetState() != connectivity.TransientFailure {
		return
	}
	cc.ResetConnectBackoff()
	ctx, cancel := context.WithTimeout(ctx, wakeWait)
	defer cancel()
	cc.WaitForStateChange(ctx, connectivity.TransientFailure)
}
