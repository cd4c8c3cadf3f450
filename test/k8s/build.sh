#!/usr/bin/env bash
# Builds the binaries of the single-node test cluster from the Go module
# proxy, cached by version under $INDEXIFY_TOOLS_DIR (default
# $HOME/.cache/indexify-tools); what is cached is skipped. Prints the
# directories it filled, one per piece, and how long each build took.
#
#   kubernetes-v1.34.4/  kube-apiserver kube-controller-manager kube-scheduler
#                        kubelet kube-proxy kubectl
#   etcd-v3.6.4/         etcd
#   coredns-v1.15.0/     coredns (only the plugins the cluster needs)
#   idxk8s-pause-1/      pause (the sandbox container's process)
#
# k8s.io/kubernetes is not meant to be required as a module: its go.mod
# replaces every k8s.io staging module with a ./staging path that is not in
# the module zip. A small wrapper module requires it and replaces each
# staging module with its published v0.<minor>.<patch> release instead.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.4}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
PAUSE_VERSION=1
TOOLS=${INDEXIFY_TOOLS_DIR:-$HOME/.cache/indexify-tools}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
NICE=${NICE:-nice -n 10}

staging_version() { # v1.34.4 -> v0.34.4
  echo "v0.${1#v1.}"
}

# done_marker DIR: a build is complete only when its marker exists (a
# killed build leaves no half-filled cache).
cached() { [ -f "$1/.complete" ]; }

build_kubernetes() {
  local out="$TOOLS/kubernetes-$K8S_VERSION"
  if cached "$out"; then echo "cached $out"; return; fi
  local start=$SECONDS tmp sv gomod minor
  tmp=$(mktemp -d /tmp/idxk8s-build-k8s.XXXXXX)
  sv=$(staging_version "$K8S_VERSION")
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  gomod=$(cd "$tmp" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  {
    echo "module idxk8s/buildkubernetes"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    # every "k8s.io/x => ./staging/src/k8s.io/x" of kubernetes' own go.mod
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#replace \1 => \1 '"$sv"'#p' "$gomod"
  } >"$tmp/go.mod"
  cat >"$tmp/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  local pkg=k8s.io/component-base/version cpkg=k8s.io/client-go/pkg/version
  local ld="-s -w"
  for p in $pkg $cpkg; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$tmp" && go mod tidy -e >/dev/null 2>&1 || true)
  (cd "$tmp" && $NICE go build -tags tools -trimpath -ldflags "$ld" -o "$tmp/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl)
  mkdir -p "$out" && mv "$tmp"/bin/* "$out/" && touch "$out/.complete" && rm -rf "$tmp"
  echo "built kubernetes $K8S_VERSION in $((SECONDS - start))s: $out"
}

build_etcd() {
  local out="$TOOLS/etcd-$ETCD_VERSION"
  if cached "$out"; then echo "cached $out"; return; fi
  local start=$SECONDS tmp
  tmp=$(mktemp -d /tmp/idxk8s-build-etcd.XXXXXX)
  printf 'module idxk8s/buildetcd\n\ngo 1.24\n' >"$tmp/go.mod"
  (cd "$tmp" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 \
    && $NICE go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
  mkdir -p "$out" && mv "$tmp/etcd" "$out/" && touch "$out/.complete" && rm -rf "$tmp"
  echo "built etcd $ETCD_VERSION in $((SECONDS - start))s: $out"
}

build_coredns() {
  local out="$TOOLS/coredns-$COREDNS_VERSION"
  if cached "$out"; then echo "cached $out"; return; fi
  local start=$SECONDS tmp
  tmp=$(mktemp -d /tmp/idxk8s-build-coredns.XXXXXX)
  printf 'module idxk8s/buildcoredns\n\ngo 1.24\n' >"$tmp/go.mod"
  # Only the plugins the test cluster's Corefile uses: the default build
  # links every cloud provider's SDK and takes far longer.
  cat >"$tmp/main.go" <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
	"github.com/coredns/coredns/coremain"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes", "template"}
}

func main() { coremain.Run() }
GO
  (cd "$tmp" && go get "github.com/coredns/coredns@$COREDNS_VERSION" >/dev/null 2>&1 && go mod tidy >/dev/null 2>&1 \
    && $NICE go build -trimpath -ldflags "-s -w" -o "$tmp/coredns" .)
  mkdir -p "$out" && mv "$tmp/coredns" "$out/" && touch "$out/.complete" && rm -rf "$tmp"
  echo "built coredns $COREDNS_VERSION in $((SECONDS - start))s: $out"
}

build_pause() {
  local out="$TOOLS/idxk8s-pause-$PAUSE_VERSION"
  if cached "$out"; then echo "cached $out"; return; fi
  local tmp
  tmp=$(mktemp -d /tmp/idxk8s-build-pause.XXXXXX)
  printf 'module idxk8s/pause\n\ngo 1.24\n' >"$tmp/go.mod"
  # The sandbox's process: holds the pod's namespaces until told to stop,
  # and reaps orphans (it is PID 1 of the pod when the PID namespace is
  # shared).
  cat >"$tmp/main.go" <<'GO'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
GO
  (cd "$tmp" && go build -trimpath -ldflags "-s -w" -o "$tmp/pause" .)
  mkdir -p "$out" && mv "$tmp/pause" "$out/" && touch "$out/.complete" && rm -rf "$tmp"
  echo "built pause in $out"
}

what=${1:-all}
case $what in
  all) build_pause; build_kubernetes; build_etcd; build_coredns ;;
  kubernetes|etcd|coredns|pause) "build_$what" ;;
  *) echo "usage: $0 [all|kubernetes|etcd|coredns|pause]" >&2; exit 2 ;;
esac
