#!/usr/bin/env bash
# Tears down the cluster of cluster-up.sh and leaves the host as it was:
# processes (by their pid files only), pod sandboxes and mounts, the
# bridge, the guard table, kube-proxy's tables, the DOCKER-USER rule,
# kernel settings. Safe to run twice, or after a failed bring-up.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
[ -d "$IDXK8S_DIR" ] || exit 0

stop() { # name: TERM its process group, then KILL after 10 s
  local f=$IDXK8S_DIR/run/$1.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# The kubelet first (it would restart what we stop), then the pods'
# containers, then the rest.
stop kubelet
stop kube-proxy
if [ -S "$CTR_SOCK" ]; then
  c() { timeout 30 ctr -a "$CTR_SOCK" -n k8s.io "$@"; }
  for t in $(c tasks ls -q 2>/dev/null); do c tasks kill -s KILL "$t" >/dev/null 2>&1; done
  for _ in $(seq 50); do [ -z "$(c tasks ls -q 2>/dev/null)" ] && break; sleep 0.2; done
  for t in $(c tasks ls -q 2>/dev/null); do c tasks rm -f "$t" >/dev/null 2>&1; done
  for k in $(c containers ls -q 2>/dev/null); do c containers rm "$k" >/dev/null 2>&1; done
fi
for s in kube-scheduler kube-controller-manager kube-apiserver coredns etcd containerd; do stop "$s"; done
# Leftover shims (each is its own session; found by our containerd's socket
# path on their command line, never by a broad name).
for p in /proc/[0-9]*; do
  if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "-address $CTR_SOCK"; then kill -KILL "${p#/proc/}" 2>/dev/null; fi
done

# Pod network namespaces and every mount under our directory (deepest
# first), then the CNI bridge.
for m in $(awk -v d="$IDXK8S_DIR" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
done
# CNI namespaces that appeared since bring-up (containerd names them cni-*).
if [ -f "$IDXK8S_DIR/run/netns.before" ]; then
  for n in $(ls /run/netns 2>/dev/null | grep '^cni-'); do
    grep -qx "$n" "$IDXK8S_DIR/run/netns.before" && continue
    umount "/run/netns/$n" 2>/dev/null; rm -f "/run/netns/$n"
  done
fi
ip link del "$BRIDGE" 2>/dev/null || true

# Firewall: only what we added.
nft delete table inet "$NFT_GUARD" 2>/dev/null || true
nft delete table ip kube-proxy 2>/dev/null || true
nft delete table ip6 kube-proxy 2>/dev/null || true
while iptables -D DOCKER-USER -i "$BRIDGE" -o "$BRIDGE" -m comment --comment idxk8s -j ACCEPT 2>/dev/null; do :; done

# Kernel settings back to what they were before bring-up.
if [ -f "$IDXK8S_DIR/sysctls.saved" ]; then
  while read -r k v; do sysctl -qw "$k=$v" 2>/dev/null || true; done <"$IDXK8S_DIR/sysctls.saved"
fi
# host-local IPAM's leases live under /var/lib/cni/networks/<network name>
rm -rf /var/lib/cni/networks/idxk8s /var/lib/cni/results/idxk8s-* 2>/dev/null
if [ "${IDXK8S_KEEP_LOGS:-}" != "" ]; then
  mkdir -p "$IDXK8S_KEEP_LOGS" && cp -r "$IDXK8S_DIR/logs/." "$IDXK8S_KEEP_LOGS/" 2>/dev/null
fi
rm -rf "$IDXK8S_DIR"
echo "idxk8s cluster down"
