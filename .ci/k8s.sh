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

missing=()
for p in containerd runc nftables iptables openssl containernetworking-plugins; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

t=$(date +%s)
timeout 90m bash test/k8s/build.sh
lap "cluster binaries (build.sh)" "$t"

(cd test/k8s && go mod download && go vet ./...)

trap 'bash test/k8s/cluster-down.sh' EXIT
t=$(date +%s)
timeout 5m bash test/k8s/cluster-up.sh
lap "cluster up (with make image and the image import)" "$t"

t=$(date +%s)
(cd test/k8s && timeout --kill-after=30s 35m go test -race -count=1 -timeout 30m -v ./...)
lap "test/k8s" "$t"
lap "k8s.sh in all" "$t0"
