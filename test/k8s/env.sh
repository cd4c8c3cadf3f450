# Shared settings of cluster-up.sh and cluster-down.sh (sourced).
# Every address is inside 198.18.0.0/15 (reserved for network tests); every
# name starts with idxk8s.
IDXK8S_DIR=${IDXK8S_DIR:-/var/tmp/idxk8s}
TOOLS=${INDEXIFY_TOOLS_DIR:-$HOME/.cache/indexify-tools}
K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.4}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
K8S_BIN=$TOOLS/kubernetes-$K8S_VERSION
ETCD_BIN=$TOOLS/etcd-$ETCD_VERSION/etcd
COREDNS_BIN=$TOOLS/coredns-$COREDNS_VERSION/coredns
PAUSE_BIN=$TOOLS/idxk8s-pause-1/pause
BRIDGE=idxk8s0
NODE_IP=198.18.217.1           # the bridge's address: every control-plane port binds here
POD_CIDR=198.18.217.0/24
SERVICE_CIDR=198.19.217.0/24
NODE_NAME=idxk8s-node
CTR_SOCK=$IDXK8S_DIR/containerd/containerd.sock
PAUSE_IMAGE=docker.io/idxk8s/pause:1
APP_TAGS=${IDXK8S_APP_TAGS:-"idxk8s-a idxk8s-b"}   # one image, two tags (helm upgrade changes the tag)
NFT_GUARD=idxk8s_guard
# Kernel settings kubelet and kube-proxy may change; saved at bring-up,
# restored once the node is Ready and again at teardown.
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables"
export KUBECONFIG=$IDXK8S_DIR/pki/admin.conf
kubectl() { "$K8S_BIN/kubectl" "$@"; }
