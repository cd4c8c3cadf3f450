#!/usr/bin/env bash
# Builds the S3-compatible server the S3 tests run (versitygw, posix
# backend; test/harness/s3.go) from the Go module proxy, cached by version
# under $INDEXIFY_TOOLS_DIR (default ~/.cache/indexify-tools). Idempotent: a
# cached binary is kept. The version and path must match test/harness/s3.go,
# which builds it itself when missing, so plain `go test` works too.
set -euo pipefail
VGW_VERSION=v1.8.0
BIN="${INDEXIFY_TOOLS_DIR:-$HOME/.cache/indexify-tools}/versitygw-$VGW_VERSION/versitygw"
if [ -x "$BIN" ]; then
  exit 0
fi
start=$(date +%s)
mkdir -p "$(dirname "$BIN")"
tmp=$(mktemp -d "$(dirname "$BIN")/build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 go install "github.com/versity/versitygw/cmd/versitygw@$VGW_VERSION")
mv "$tmp/versitygw" "$BIN"
echo "built versitygw $VGW_VERSION (S3 test server) in $(( $(date +%s) - start ))s"
