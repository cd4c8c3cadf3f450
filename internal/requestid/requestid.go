// Package requestid carries one request id from the HTTP edge (the API
// server) into the coordinators' logs, so an operator can follow a single
// user request through every process it touched by grepping one value.
//
// The id rides in the Go context inside a process and in the gRPC metadata
// key "x-request-id" between processes.
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Header is the HTTP header a client may set and the API server echoes.
const Header = "X-Request-Id"

// MetadataKey is the gRPC metadata key (lower case, as gRPC requires).
const MetadataKey = "x-request-id"

// maxLen bounds ids taken from clients: they end up in every log line.
const maxLen = 128

type ctxKey struct{}

// New returns a fresh random id: 128 random bits as 32 hex characters.
// It is the one generator of request ids, both the ones that follow a
// request through the logs and the idempotency keys of writes (a command's
// request_id, which the state machine deduplicates on), so it is long
// enough never to collide.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Valid reports whether a client-supplied id may be used as is: short and
// made of visible ASCII without spaces, so it cannot forge log fields or
// break a header.
func Valid(id string) bool {
	if id == "" || len(id) > maxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the id in ctx ("" if none).
func From(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// outgoing adds the context's id to the outgoing gRPC metadata.
func outgoing(ctx context.Context) context.Context {
	if id := From(ctx); id != "" {
		return metadata.AppendToOutgoingContext(ctx, MetadataKey, id)
	}
	return ctx
}

// UnaryClientInterceptor sends the context's request id with every call.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(outgoing(ctx), method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor sends the context's request id when a stream opens.
func StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(outgoing(ctx), desc, cc, method, opts...)
	}
}

// DialOptions installs both client interceptors.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(StreamClientInterceptor()),
	}
}

// FromIncoming returns the id a gRPC caller sent ("" if none or invalid).
func FromIncoming(ctx context.Context) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	if v := md.Get(MetadataKey); len(v) > 0 && Valid(v[0]) {
		return v[0]
	}
	return ""
}
