package api

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Every read route accepts ?consistency=stale|default|linearizable and passes
// it to the coordinator. Rather than threading a parameter through each
// handler, the level rides in the request context and a gRPC client
// interceptor fills the `consistency` field of any read request that has one
// and left it unset, so a handler that asks for a level explicitly keeps it.

type consistencyKey struct{}

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

func withConsistency(ctx context.Context, level pb.ReadConsistency) context.Context {
	if level == pb.ReadConsistency_READ_CONSISTENCY_DEFAULT {
		return ctx
	}
	return context.WithValue(ctx, consistencyKey{}, level)
}

// ReadConsistencyInterceptor must be installed on the API server's
// coordinator connection for ?consistency= to take effect.
//
// It also gives the default level read-your-writes for absent objects: API
// servers and executors may reach different coordinators, so content just
// created through one (an executor's chunk, say) can be missing on a replica
// a few milliseconds behind. A NotFound at the default level is therefore
// confirmed once at the linearizable level before the caller sees it.
func ReadConsistencyInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		m, ok := req.(proto.Message)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		fd := m.ProtoReflect().Descriptor().Fields().ByName("consistency")
		if fd == nil || m.ProtoReflect().Has(fd) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		level, _ := ctx.Value(consistencyKey{}).(pb.ReadConsistency)
		withLevel := func(l pb.ReadConsistency) proto.Message {
			c := proto.Clone(m)
			c.ProtoReflect().Set(fd, protoreflect.ValueOfEnum(protoreflect.EnumNumber(l)))
			return c
		}
		if level != pb.ReadConsistency_READ_CONSISTENCY_DEFAULT {
			return invoker(ctx, method, withLevel(level), reply, cc, opts...)
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) != codes.NotFound {
			return err
		}
		return invoker(ctx, method, withLevel(pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE), reply, cc, opts...)
	}
}
