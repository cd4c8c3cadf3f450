package api

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"
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
func ReadConsistencyInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if level, ok := ctx.Value(consistencyKey{}).(pb.ReadConsistency); ok {
			if m, ok := req.(proto.Message); ok {
				msg := m.ProtoReflect()
				if fd := msg.Descriptor().Fields().ByName("consistency"); fd != nil && !msg.Has(fd) {
					c := proto.Clone(m)
					c.ProtoReflect().Set(fd, protoreflect.ValueOfEnum(protoreflect.EnumNumber(level)))
					req = c
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
