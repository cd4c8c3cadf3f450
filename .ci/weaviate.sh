#!/usr/bin/env bash
# Builds the Weaviate server the index tests run (internal/index, through
# test/harness/weaviate.go) from the Go module proxy, cached by version
# under $INDEXIFY_TOOLS_DIR (default ~/.cache/indexify-tools). Idempotent: a
# cached binary is kept. The version and path must match
# test/harness/weaviate.go, which builds it itself when missing.
set -euo pipefail
WEAVIATE_VERSION=v1.35.2
BIN="${INDEXIFY_TOOLS_DIR:-$HOME/.cache/indexify-tools}/weaviate-$WEAVIATE_VERSION/weaviate-server"
if [ -x "$BIN" ]; then
  exit 0
fi
start=$(date +%s)
mkdir -p "$(dirname "$BIN")"
tmp=$(mktemp -d "$(dirname "$BIN")/build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 go install "github.com/weaviate/weaviate/cmd/weaviate-server@$WEAVIATE_VERSION")
mv "$tmp/weaviate-server" "$BIN"
echo "built weaviate-server $WEAVIATE_VERSION (vector index test server) in $(( $(date +%s) - start ))s"
