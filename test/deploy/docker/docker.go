// Package docker runs the chart's rendered pods as Docker containers: the
// StatefulSet and Deployments come from a real render of
// deploy/helm/indexify (test/deploy/chart), and each pod becomes a
// container of the locally built image with the pod's name as container
// name and host name, on a network the test creates, with network aliases
// that reproduce the chart's Services and with the ConfigMaps mounted where
// the chart mounts them. Only the docker CLI is used; nothing is pulled.
//
// It keeps only what the real single-node Kubernetes of test/k8s cannot
// show: a release whose API servers share S3, Weaviate and PostgreSQL, run
// as containers beside the pods. Pod lifecycles (first start, pod 0
// missing, deletions, rolling updates, scaling) are tested on the real
// cluster, where the StatefulSet controller, the kubelet and CoreDNS do
// what this package could only imitate.
//
// The test process talks to containers only through ports published on
// 127.0.0.1; containers talk to each other on the test's own network.
package docker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Image is the image under test: $INDEXIFY_TEST_IMAGE if set, else a
// private tag built once per test process with `make image` from this tree
// (never indexify:dev, which another checkout may be rebuilding).
func Image() (string, error) {
	imageOnce.Do(func() {
		if img := os.Getenv("INDEXIFY_TEST_IMAGE"); img != "" {
			image = img
			_, imageErr = docker(context.Background(), "image", "inspect", "--format", "{{.Id}}", img)
			return
		}
		tag := fmt.Sprintf("test-%d", os.Getpid())
		cmd := exec.Command("make", "image", "DEV_TAG="+tag, "IMAGE_TAG="+tag)
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("make image: %v\n%s", err, out)
			return
		}
		image, built = "indexify:"+tag, true
	})
	return image, imageErr
}

// RemoveImage deletes the image Image built (call from TestMain).
func RemoveImage() {
	if built {
		_, _ = docker(context.Background(), "image", "rm", "-f", image)
	}
}

var (
	imageOnce sync.Once
	image     string
	built     bool
	imageErr  error
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// docker runs the docker CLI and returns its trimmed stdout.
func docker(ctx context.Context, args ...string) (string, error) {
	return dockerOut(ctx, false, args...)
}

// dockerOut runs the docker CLI; with both, stderr is part of the output
// (docker logs prints the container's stderr there).
func dockerOut(ctx context.Context, both bool, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if both {
		cmd.Stderr = &out
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}
