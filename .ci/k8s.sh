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
  local log rc=0
  log=$(mktemp /tmp/indexify-k8s-test.XXXXXX.log)
  (cd test/k8s && timeout --kill-after=30s 35m go test -race -count=1 -timeout 30m -v ./...) 2>&1 \
    | tee "$log" || rc=$?
  lap "test/k8s" "$t"
  if [ "$rc" -ne 0 ]; then
    summary "$log"
    exit "$rc"
  fi
}

# summary LOG: what each failed test said, printed last. A failed release
# logs pods, events and the node's own logs (hundreds of lines) after the
# failure itself, so the tail of the run alone showed only kernel messages.
# Keeps each test's own log lines (file_test.go:N: ...), not those dumps.
summary() {
  echo "---- test/k8s failures (each test's last 15 own lines; the dumps are above)"
  awk '
    /^=== (RUN|CONT|NAME)/ { cur = $3; next }
    /^ *[A-Za-z0-9_]+_test\.go:[0-9]+: / {
      line = $0; sub(/^ */, "", line)
      if (line ~ /^[a-z_]+\.go:[0-9]+: (kubectl (get|describe|logs)|coredns log|kube-proxy log|kubelet log|nft list|sh -c|helm uninstall|delete namespace)/) next
      n[cur]++; said[cur, n[cur]] = substr(line, 1, 400)
      next
    }
    /^ *--- FAIL: / {
      name = $3; print "FAIL " name
      for (i = (n[name] > 15 ? n[name] - 15 : 0) + 1; i <= n[name]; i++) print "    " said[name, i]
    }
  ' "$1"
}

case $phase in
  packages) packages ;;
  build) build ;;
  run) run ;;
  all) packages; build; run ;;
  *) echo "usage: $0 [packages|build|run|all]" >&2; exit 2 ;;
esac
lap "k8s.sh $phase in all" "$t0"
