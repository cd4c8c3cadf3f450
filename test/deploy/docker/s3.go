package docker

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// The object store of the S3 scenarios: versitygw (the same binary the
// blob tests run on loopback, see test/harness/s3.go) in a FROM scratch
// image of its own, as one more container on the test's network. It is
// built locally like the indexify image: nothing is pulled.

// s3Port is versitygw's listen port inside its container.
const s3Port = 7070

var (
	s3ImageOnce sync.Once
	s3Image     string
	s3ImageErr  error
)

// versityImage builds the versitygw image once per test process.
func versityImage(t testing.TB) string {
	t.Helper()
	bin := harness.VersityGW(t) // built by .ci/run, or now
	s3ImageOnce.Do(func() { s3Image, s3ImageErr = buildVersityImage(bin) })
	if s3ImageErr != nil {
		t.Fatal(s3ImageErr)
	}
	return s3Image
}

func buildVersityImage(bin string) (string, error) {
	// A scratch image has no dynamic loader: refuse a binary that needs one
	// with a clear message instead of an opaque "no such file" at start.
	f, err := elf.Open(bin)
	if err != nil {
		return "", fmt.Errorf("versitygw %s: %v", bin, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			return "", fmt.Errorf("versitygw %s is dynamically linked; build it with CGO_ENABLED=0 (see test/harness/s3.go)", bin)
		}
	}
	f.Close()
	ctx, err := os.MkdirTemp("", "ixtest-versitygw-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(ctx)
	// /data is where the posix backend keeps buckets; owned by the runtime
	// user so a fresh Docker volume mounted there inherits the owner.
	if err := os.MkdirAll(filepath.Join(ctx, "rootfs", "data"), 0o755); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(ctx, "rootfs", "tmp"), 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Join(ctx, "rootfs", "tmp"), 0o1777); err != nil {
		return "", err
	}
	if err := copyFile(bin, filepath.Join(ctx, "versitygw")); err != nil {
		return "", err
	}
	dockerfile := "FROM scratch\nCOPY --chown=65532:65532 rootfs/ /\nCOPY versitygw /versitygw\nUSER 65532:65532\nENTRYPOINT [\"/versitygw\"]\n"
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return "", err
	}
	tag := fmt.Sprintf("indexify-test-versitygw:%d", os.Getpid())
	// The classic builder, like `make image`: BuildKit may want to pull its
	// frontend, and nothing here may be pulled.
	cmd := exec.Command("docker", "build", "-q", "-t", tag, ctx)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker build versitygw: %v\n%s", err, out)
	}
	return tag, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// removeVersityImage deletes the image (from TestMain).
func removeVersityImage() {
	if s3Image != "" {
		_, _ = docker(context.Background(), "image", "rm", "-f", s3Image)
	}
}

// StartS3 runs versitygw with the posix backend on a Docker volume, reachable
// on the test's network as alias:7070 and from the test on a port published
// on 127.0.0.1. It returns once the gateway answers HTTP.
func (k *Kube) StartS3(alias, accessKey, secretKey string) {
	k.t.Helper()
	img := versityImage(k.t)
	k.mu.Lock()
	ip := k.nextIP
	k.nextIP = ip.Next()
	k.mu.Unlock()
	name := k.Network + "-s3"
	vol := name + "-data"
	k.mu.Lock()
	k.volumes[vol] = true
	k.mu.Unlock()
	ctx := context.Background()
	if _, err := docker(ctx, "run", "-d", "--name", name, "--hostname", alias,
		"--network", k.Network, "--ip", ip.String(), "--network-alias", alias,
		"--label", "indexify-test="+k.Network, "-v", vol+":/data",
		"-p", fmt.Sprintf("127.0.0.1::%d", s3Port), img,
		"--access", accessKey, "--secret", secretKey, "--port", fmt.Sprintf(":%d", s3Port), "--quiet",
		"posix", "/data"); err != nil {
		k.t.Fatal(err)
	}
	out, err := docker(ctx, "port", name, fmt.Sprintf("%d/tcp", s3Port))
	if err != nil {
		k.t.Fatal(err)
	}
	addr := strings.Fields(out)[0]
	// Docker's proxy accepts connections before the process listens, so
	// wait for an HTTP answer (any status: unauthenticated requests are
	// refused with an S3 error document).
	cl := &http.Client{Timeout: 2 * time.Second}
	harness.Eventually(k.t, 30*time.Second, "versitygw answers", func() error {
		resp, err := cl.Get("http://" + addr + "/")
		if err != nil {
			if state, _ := docker(ctx, "inspect", "--format", "{{.State.Status}}", name); state == "exited" {
				l, _ := dockerCombined(ctx, "logs", name)
				k.t.Fatalf("versitygw exited:\n%s", l)
			}
			return err
		}
		resp.Body.Close()
		return nil
	})
}
