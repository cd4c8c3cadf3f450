// Package grpcconn holds what this project does to a cached gRPC client
// connection before using it: the one rule, shared by the coordinators'
// peer connections (internal/cluster) and the clients' connections to a
// hinted leader (internal/coordclient).
package grpcconn

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

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
