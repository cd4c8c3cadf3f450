// Package proto holds the protobuf definitions; the generated Go code lives in
// proto/indexifypb and is committed. Regenerate with `go generate ./proto`
// (needs protoc, protoc-gen-go and protoc-gen-go-grpc on PATH).
package proto

//go:generate protoc -I . --go_out=.. --go_opt=module=github.com/indexify-go/indexify --go-grpc_out=.. --go-grpc_opt=module=github.com/indexify-go/indexify indexify/v1/indexify.proto
