#!/usr/bin/env bash
# The chart on a real single-node Kubernetes (test/k8s, issue 17): installs
# the Debian packages the cluster needs, builds its binaries (cached by
# version under $HOME/.cache/indexify-tools; zero when cached), brings the
# cluster up, runs the test package and ALWAYS tears the cluster down,
# leaving the host as it was. Every step is bounded by `timeout`. Prints
# how long each step took.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
lap() { echo "k8s: $1 in $(( $(date +%s) - $2 ))s"; }

phase=${1:-all} # packages | build | run | all

packages() {
  local missing=()
  for p in containerd runc nftables iptables openssl containernetworking-plugins; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# build: the cluster's binaries (cached by version) and the test package's
# -race compile (Helm, client-go: warms the build cache), niced so that it
# can run behind `make test` without slowing it.
build() {
  local t=$(date +%s)
  timeout 90m bash test/k8s/build.sh
  lap "cluster binaries (build.sh)" "$t"
  t=$(date +%s)
  local bin
  bin=$(mktemp -d)
  (cd test/k8s && go mod download && nice -n 19 go vet ./... \
    && nice -n 19 go test -race -c -o "$bin/k8s.test" .)
  rm -rf "$bin" # only the build cache it filled is wanted
  lap "test/k8s compile" "$t"
}

run() {
  trap 'bash test/k8s/cluster-down.sh' EXIT
  local t=$(date +%s)
  timeout 5m bash test/k8s/cluster-up.sh
  lap "cluster up (with make image and the image import)" "$t"
  t=$(date +%s)
  (cd test/k8s && timeout --kill-after=30s 35m go test -race -count=1 -timeout 30m -v ./...)
  lap "test/k8s" "$t"
}

case $phase in
  packages) packages ;;
  build) build ;;
  run) run ;;
  all) packages; build; run ;;
  *) echo "usage: $0 [packages|build|run|all]" >&2; exit 2 ;;
esac
lap "k8s.sh $phase in all" "$t0"
