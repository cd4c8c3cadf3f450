# The targets a newcomer needs; CI runs `make test` through .ci/run.
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
IMAGE ?= indexify
# The chart's default tag (its appVersion); tests build a private tag instead.
DEV_TAG ?= dev
# Docker tags allow [A-Za-z0-9_.-] only; git describe output already fits.
IMAGE_TAG ?= $(subst +,-,$(VERSION))
IMAGE_CTX := bin/image-context
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt

.PHONY: build test bench bench-full generate image

build: ## static binary in bin/indexify
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/indexify ./cmd/indexify

# -vet=all runs every go vet analyzer on each package as part of its test
# build (go test's default runs a few), so no separate go vet compiles the
# whole dependency graph a second time without -race.
test: ## the whole test suite, race detector and all vet checks on; then the chart and Docker pod tests (module test/deploy)
	$(GO) test -race -vet=all -timeout 20m ./...
	cd test/deploy && $(GO) test -race -vet=all -timeout 10m ./...

bench: ## Go micro-benchmarks (go test -bench) of the internal packages
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

bench-full: ## every BENCHMARKS.md table: ours vs etcd, failover, scheduling, scale (about 30 minutes)
	$(GO) run ./bench all

generate: ## regenerate protobuf code (needs protoc, protoc-gen-go, protoc-gen-go-grpc)
	$(GO) generate ./proto

image: ## container image $(IMAGE):$(DEV_TAG) (default dev) and $(IMAGE):$(VERSION), built from a local context (no pulls)
	rm -rf $(IMAGE_CTX)
	mkdir -p $(IMAGE_CTX)/rootfs/var/lib/indexify $(IMAGE_CTX)/rootfs/var/lib/indexify-executor $(IMAGE_CTX)/rootfs/tmp
	chmod 0755 $(IMAGE_CTX)/rootfs/var/lib/indexify $(IMAGE_CTX)/rootfs/var/lib/indexify-executor
	chmod 1777 $(IMAGE_CTX)/rootfs/tmp
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_CTX)/indexify ./cmd/indexify
	cp $(CA_BUNDLE) $(IMAGE_CTX)/ca-certificates.crt
	cp deploy/docker/Dockerfile $(IMAGE_CTX)/Dockerfile
	DOCKER_BUILDKIT=0 docker build -q -t $(IMAGE):$(DEV_TAG) -t $(IMAGE):$(IMAGE_TAG) $(IMAGE_CTX)
