#!/usr/bin/env bash
# Brings up a single-node Kubernetes (see env.sh for versions and ranges):
# etcd, kube-apiserver, controller-manager, scheduler, kubelet, kube-proxy
# (nftables), CoreDNS on the host, a second containerd with CRI, the CNI
# bridge plugin on a bridge made here. Needs root and the binaries of
# build.sh (built when missing). Bounded: fails after IDXK8S_UP_TIMEOUT s
# (default 120) and tears down what it started. Also imports the pause
# image and our image (make image) under the tags of $APP_TAGS.
#
# Traffic stays on loopback and the bridge: every port binds to the
# bridge's address, and a guard table drops pod traffic that would leave
# the bridge for anything else. cluster-down.sh undoes all of it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/env.sh"
UP_TIMEOUT=${IDXK8S_UP_TIMEOUT:-120}
start=$SECONDS

[ "$(id -u)" = 0 ] || { echo "cluster-up.sh: needs root (containerd, kubelet, a bridge)" >&2; exit 1; }
for b in "$K8S_BIN/kubelet" "$ETCD_BIN" "$COREDNS_BIN" "$PAUSE_BIN"; do
  [ -x "$b" ] || { "$here/build.sh" all; break; }
done
for t in containerd containerd-shim-runc-v2 runc ctr nft iptables openssl docker; do
  command -v "$t" >/dev/null || { echo "cluster-up.sh: $t missing (apt-get install containerd runc nftables iptables openssl; see .ci/k8s.sh)" >&2; exit 1; }
done
[ -x /usr/lib/cni/bridge ] || { echo "cluster-up.sh: /usr/lib/cni/bridge missing (apt-get install containernetworking-plugins)" >&2; exit 1; }
if [ -d "$IDXK8S_DIR" ]; then "$here/cluster-down.sh" >/dev/null; fi

fail() { echo "cluster-up.sh: $*" >&2; for l in "$IDXK8S_DIR"/logs/*.log; do echo "---- $l" >&2; tail -n 15 "$l" >&2; done; "$here/cluster-down.sh" >/dev/null 2>&1; exit 1; }
trap 'fail "failed at line $LINENO"' ERR
mkdir -p "$IDXK8S_DIR"/{pki,run,logs,etc,kubelet,volumes,containerd,cni/net.d}
ls /run/netns 2>/dev/null >"$IDXK8S_DIR/run/netns.before" || true
for k in $SYSCTLS; do v=$(sysctl -n "$k" 2>/dev/null) && echo "$k $v"; done >"$IDXK8S_DIR/sysctls.saved"
restore_sysctls() { while read -r k v; do sysctl -qw "$k=$v" 2>/dev/null || true; done <"$IDXK8S_DIR/sysctls.saved"; }

# run NAME CMD...: a daemon in its own session, logs and pid under $IDXK8S_DIR.
run() { local n=$1; shift; setsid "$@" >"$IDXK8S_DIR/logs/$n.log" 2>&1 </dev/null & echo $! >"$IDXK8S_DIR/run/$n.pid"; }
# wait_for WHAT CMD...: poll until CMD succeeds, within the overall budget.
wait_for() {
  local what=$1; shift
  until "$@" >/dev/null 2>&1; do
    [ $((SECONDS - start)) -lt "$UP_TIMEOUT" ] || fail "timed out waiting for $what"
    sleep 0.3
  done
}

# ---- network: the bridge, the guard, Docker's FORWARD policy
ip link add "$BRIDGE" type bridge
ip addr add "$NODE_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
nft -f - <<NFT
table inet $NFT_GUARD {
  chain forward {
    type filter hook forward priority -10; policy accept;
    iifname "$BRIDGE" oifname != "$BRIDGE" counter drop
    oifname "$BRIDGE" iifname != "$BRIDGE" counter drop
  }
  chain input {
    type filter hook input priority -10; policy accept;
    iifname "$BRIDGE" ip daddr != $NODE_IP counter drop
  }
}
NFT
# Bridged pod traffic goes through iptables' FORWARD (br_netfilter), whose
# policy Docker sets to DROP: accept pod-to-pod on our bridge only.
if iptables -S DOCKER-USER >/dev/null 2>&1; then
  iptables -I DOCKER-USER 1 -i "$BRIDGE" -o "$BRIDGE" -m comment --comment idxk8s -j ACCEPT
fi

# ---- certificates: one CA, the API server's serving cert, one admin client
pki=$IDXK8S_DIR/pki
( cd "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=idxk8s-ca" -keyout ca.key -out ca.crt 2>/dev/null
  cat >apiserver.ext <<X
subjectAltName=IP:$NODE_IP,IP:${SERVICE_CIDR%0/24}1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:$NODE_NAME
X
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr 2>/dev/null
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile apiserver.ext -out apiserver.crt 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=idxk8s-admin" -keyout admin.key -out admin.csr 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out admin.crt 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cat >admin.conf <<X
apiVersion: v1
kind: Config
clusters: [{name: idxk8s, cluster: {server: "https://$NODE_IP:6443", certificate-authority: $pki/ca.crt}}]
users: [{name: admin, user: {client-certificate: $pki/admin.crt, client-key: $pki/admin.key}}]
contexts: [{name: idxk8s, context: {cluster: idxk8s, user: admin}}]
current-context: idxk8s
X
)

# ---- containerd (a second instance: own root, state, socket; CRI on)
cat >"$IDXK8S_DIR/etc/containerd.toml" <<X
version = 2
root = "$IDXK8S_DIR/containerd/root"
state = "$IDXK8S_DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$CTR_SOCK"
[ttrpc]
  address = "$CTR_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$IDXK8S_DIR/cni/net.d"
X
cat >"$IDXK8S_DIR/cni/net.d/10-idxk8s.conflist" <<X
{"cniVersion": "1.0.0", "name": "idxk8s", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
X
run containerd containerd --config "$IDXK8S_DIR/etc/containerd.toml"

# ---- etcd, API server, controller manager, scheduler
run etcd "$ETCD_BIN" --name idxk8s --data-dir "$IDXK8S_DIR/etcd" \
  --listen-client-urls "http://$NODE_IP:2379" --advertise-client-urls "http://$NODE_IP:2379" \
  --listen-peer-urls "http://$NODE_IP:2380" --initial-advertise-peer-urls "http://$NODE_IP:2380" \
  --initial-cluster "idxk8s=http://$NODE_IP:2380" --listen-metrics-urls "" --log-level warn \
  --unsafe-no-fsync
run kube-apiserver "$K8S_BIN/kube-apiserver" --etcd-servers "http://$NODE_IP:2379" \
  --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 \
  --service-cluster-ip-range "$SERVICE_CIDR" --client-ca-file "$pki/ca.crt" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
  --kubelet-preferred-address-types InternalIP \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --authorization-mode Node,RBAC --allow-privileged=false --profiling=false
wait_for "the API server" kubectl get --raw /readyz
run kube-controller-manager "$K8S_BIN/kube-controller-manager" --kubeconfig "$KUBECONFIG" \
  --leader-elect=false --secure-port 0 --service-account-private-key-file "$pki/sa.key" \
  --root-ca-file "$pki/ca.crt" --use-service-account-credentials=false --profiling=false
run kube-scheduler "$K8S_BIN/kube-scheduler" --kubeconfig "$KUBECONFIG" --leader-elect=false \
  --secure-port 0 --profiling=false

# ---- CoreDNS on the bridge address, no upstream
cat >"$IDXK8S_DIR/etc/Corefile" <<X
cluster.local:53 in-addr.arpa:53 {
  bind $NODE_IP
  errors
  kubernetes cluster.local in-addr.arpa {
    kubeconfig $KUBECONFIG
    pods insecure
    ttl 0
  }
}
.:53 {
  bind $NODE_IP
  errors
  health $NODE_IP:18080
  template ANY ANY {
    rcode NXDOMAIN
  }
}
X
run coredns "$COREDNS_BIN" -conf "$IDXK8S_DIR/etc/Corefile"

# ---- images: pause (FROM scratch around a static binary) and ours
wait_for containerd ctr -a "$CTR_SOCK" version
ctx=$(mktemp -d /tmp/idxk8s-pause.XXXXXX)
cp "$PAUSE_BIN" "$ctx/pause"
printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
DOCKER_BUILDKIT=0 docker build -q -t "${PAUSE_IMAGE#docker.io/}" "$ctx" >/dev/null
rm -rf "$ctx"
app_tags=($APP_TAGS)
if [ -z "${IDXK8S_SKIP_APP_IMAGE:-}" ]; then
  make -s -C "$repo" image DEV_TAG="${app_tags[0]}" IMAGE_TAG="${app_tags[0]}" >/dev/null
fi
for t in "${app_tags[@]:1}"; do docker tag "indexify:${app_tags[0]}" "indexify:$t"; done
refs=("${PAUSE_IMAGE#docker.io/}")
for t in "${app_tags[@]}"; do refs+=("indexify:$t"); done
docker save "${refs[@]}" | ctr -a "$CTR_SOCK" -n k8s.io images import - >/dev/null
# The Docker copies were only the way in.
docker image rm "${refs[@]}" >/dev/null 2>&1 || true

# ---- kubelet and kube-proxy
# The budget counts from here: building our image above (make image) is
# bounded by the caller and takes minutes when the build cache is cold.
start=$SECONDS
cat >"$IDXK8S_DIR/etc/kubelet.yaml" <<X
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: $NODE_IP
healthzPort: 10248
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://$CTR_SOCK
makeIPTablesUtilChains: false
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
resolvConf: /dev/null
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
serializeImagePulls: false
failSwapOn: false
enforceNodeAllocatable: []
cgroupsPerQOS: true
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 5s
fileCheckFrequency: 5s
X
run kubelet "$K8S_BIN/kubelet" --config "$IDXK8S_DIR/etc/kubelet.yaml" --kubeconfig "$KUBECONFIG" \
  --root-dir "$IDXK8S_DIR/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
  --cert-dir "$pki/kubelet"
cat >"$IDXK8S_DIR/etc/kube-proxy.yaml" <<X
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: $KUBECONFIG}
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: $NODE_IP:10256
metricsBindAddress: $NODE_IP:10249
clusterCIDR: $POD_CIDR
nodePortAddresses: [$NODE_IP/32]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
X
run kube-proxy "$K8S_BIN/kube-proxy" --config "$IDXK8S_DIR/etc/kube-proxy.yaml"

wait_for "node Ready" kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
restore_sysctls
wait_for "the default service account" kubectl get serviceaccount default
wait_for "CoreDNS" bash -c "exec 3<>/dev/tcp/$NODE_IP/18080"

# ---- storage: a default class and pre-made hostPath volumes, owned by the
# chart's runtime user (hostPath gets no fsGroup change).
PVS=${IDXK8S_PVS:-30}
{
  cat <<X
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: idxk8s-hostpath, annotations: {storageclass.kubernetes.io/is-default-class: "true"}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
reclaimPolicy: Retain
X
  for i in $(seq -w 1 "$PVS"); do
    d=$IDXK8S_DIR/volumes/pv$i
    mkdir -p "$d" && chown 65532:65532 "$d" && chmod 0750 "$d"
    cat <<X
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: idxk8s-pv$i}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce, ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: idxk8s-hostpath
  hostPath: {path: $d, type: Directory}
X
  done
} | kubectl apply -f - >/dev/null
trap - ERR
echo "idxk8s cluster up in $((SECONDS - start))s: KUBECONFIG=$KUBECONFIG"
