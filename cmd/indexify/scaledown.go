package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Scale-down versus restart. A StatefulSet pod gets the same SIGTERM when it
// is restarted (rolling update, node drain, eviction) and when the
// StatefulSet shrinks. A restart must never leave the Raft configuration
// (members that remove themselves on every stop churn the quorum); a pod
// that is scaled away must leave, or dead voters pile up and break the
// quorum arithmetic. The pod can tell the two apart: the StatefulSet removes
// the highest ordinals, so an ordinal at or above the desired replica count
// means scale-down. The Helm chart keeps that count in the shared ConfigMap
// (key `replicas`) and passes the mounted file as --replicas-file; we read it
// at SIGTERM time, not at start, because it changes while the pod runs.
//
// Kubelet refreshes mounted ConfigMaps lazily (sync period plus cache TTL,
// up to a minute or more), so a pod terminated right after `helm upgrade`
// may still read the old count and only shut down. The autopilot's
// dead-server cleanup removes such a member later; that is the backstop.

// registerScaleDownFlag adds --replicas-file to fs and returns its value.
func registerScaleDownFlag(fs *pflag.FlagSet) *string {
	return fs.String("replicas-file", "", "file holding the desired number of coordinator replicas, read at SIGTERM: a node whose id ends in -N with N >= that number leaves the cluster instead of only stopping (the Helm chart mounts it from its ConfigMap)")
}

// scaleDownLeave reports whether the node should leave the cluster on stop,
// with the reason for the log. Any doubt (no file, unreadable, no ordinal in
// the id) means "restart": staying a member is recoverable, leaving on a
// restart is not free.
func scaleDownLeave(nodeID, replicasFile string) (bool, string) {
	if replicasFile == "" {
		return false, "no --replicas-file"
	}
	ordinal, ok := nodeOrdinal(nodeID)
	if !ok {
		return false, fmt.Sprintf("node id %q has no -N ordinal suffix", nodeID)
	}
	b, err := os.ReadFile(replicasFile)
	if err != nil {
		return false, fmt.Sprintf("replicas file unreadable: %v", err)
	}
	want, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || want < 1 {
		return false, fmt.Sprintf("replicas file %s holds %q, not a positive count", replicasFile, strings.TrimSpace(string(b)))
	}
	if ordinal >= want {
		return true, fmt.Sprintf("ordinal %d >= desired replicas %d: scale-down", ordinal, want)
	}
	return false, fmt.Sprintf("ordinal %d < desired replicas %d: restart", ordinal, want)
}

// nodeOrdinal returns N of a StatefulSet pod name NAME-N.
func nodeOrdinal(nodeID string) (int, bool) {
	i := strings.LastIndexByte(nodeID, '-')
	if i < 0 || i == len(nodeID)-1 {
		return 0, false
	}
	n, err := strconv.Atoi(nodeID[i+1:])
	if err != nil || n < 0 || strconv.Itoa(n) != nodeID[i+1:] {
		return 0, false
	}
	return n, true
}
