package api

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Every read route accepts ?consistency=stale|default|linearizable. The
// handler reads the level from its request (readLevel) and passes it as an
// argument down to the coordinator call, which sets the request message's
// `consistency` field; paths that are not a user's read (GC, result
// uploads, write handlers' lookups) choose their level in code. serveHTTP
// refuses an unknown level for every route before any handler runs.

// parseConsistency reads the query parameter; "" means the default level.
func parseConsistency(r *http.Request) (pb.ReadConsistency, error) {
	switch strings.ToLower(r.URL.Query().Get("consistency")) {
	case "", "default":
		return pb.ReadConsistency_READ_CONSISTENCY_DEFAULT, nil
	case "stale":
		return pb.ReadConsistency_READ_CONSISTENCY_STALE, nil
	case "linearizable", "strong":
		return pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE, nil
	}
	return 0, badRequest(codeInvalidArgument, "consistency %q: want stale, default or linearizable", r.URL.Query().Get("consistency"))
}

// readLevel is the level a read route was asked for. serveHTTP already
// refused invalid values, so an error cannot occur here.
func readLevel(r *http.Request) pb.ReadConsistency {
	level, _ := parseConsistency(r)
	return level
}

const (
	levelDefault      = pb.ReadConsistency_READ_CONSISTENCY_DEFAULT
	levelLinearizable = pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE
)

// read runs one coordinator read at level, bounded like call. fn must put
// the level it is given into its request.
//
// The default level also gets read-your-writes for absent objects: API
// servers and executors may reach different coordinators, so content just
// created through one (an executor's chunk, say) can be missing on a replica
// a few milliseconds behind. A NotFound at the default level is therefore
// confirmed once at the linearizable level before the caller sees it.
func read[T any](ctx context.Context, s *Server, level pb.ReadConsistency, fn func(context.Context, pb.ReadConsistency) (T, error)) (T, error) {
	return call(ctx, s, func(ctx context.Context) (T, error) {
		v, err := fn(ctx, level)
		if level != levelDefault || status.Code(err) != codes.NotFound {
			return v, err
		}
		return fn(ctx, levelLinearizable)
	})
}
