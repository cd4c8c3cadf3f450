package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// BenchmarkApply measures committed writes through a 3-node cluster on
// loopback (leader-local and follower-forwarded), with request ids as the API
// server sends them. Run: go test -run X -bench Apply ./internal/cluster/
func BenchmarkApply(b *testing.B) {
	for _, via := range []string{"leader", "follower"} {
		b.Run(via, func(b *testing.B) {
			nodes := startStatic3(b, nil)
			leader := waitLeader(b, nodes...)
			target := leader
			if via == "follower" {
				target = followersOf(leader, nodes)[0]
			}
			var seq atomic.Int64
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb_ *testing.PB) {
				for pb_.Next() {
					i := seq.Add(1)
					res, err := target.node.Apply(ctx, &pb.Command{
						RequestId: fmt.Sprint("bench-", i),
						Op:        &pb.Command_CreateNamespace{CreateNamespace: &pb.CreateNamespaceCmd{Name: fmt.Sprint("b", i)}},
					})
					if err != nil || res.ErrorCode != pb.ErrorCode_ERROR_CODE_OK {
						b.Errorf("apply: %v %v", res, err)
						return
					}
				}
			})
			b.StopTimer()
		})
	}
}
