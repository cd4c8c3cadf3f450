# The targets a newcomer needs; CI runs `make test` through .ci/run.
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: build test bench generate

build: ## static binary in bin/indexify
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/indexify ./cmd/indexify

test: ## the whole test suite, race detector on
	$(GO) test -race -timeout 20m ./...

bench: ## benchmarks reported in BENCHMARKS.md
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

generate: ## regenerate protobuf code (needs protoc, protoc-gen-go, protoc-gen-go-grpc)
	$(GO) generate ./proto
