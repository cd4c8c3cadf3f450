package docker

import (
	"context"
	"fmt"
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

// The shared retrieval stores of the multi-replica scenarios, each one
// more container on the test's network, in images built locally from the
// binaries the loopback tests run (nothing is pulled): Weaviate (a static
// Go binary, FROM scratch) and PostgreSQL 15 (Debian's build, copied into
// a scratch image with the shared libraries it links and its share files).

const (
	weaviatePort = 8080
	postgresPort = 5432
)

var (
	storeImagesMu sync.Mutex
	storeImages   = map[string]string{}
)

// buildScratchImage builds (once per process) an image named for kind from
// a context directory that fill prepares.
func buildScratchImage(t testing.TB, kind string, fill func(dir string) (dockerfile string, err error)) string {
	t.Helper()
	storeImagesMu.Lock()
	defer storeImagesMu.Unlock()
	if img, ok := storeImages[kind]; ok {
		return img
	}
	dir, err := os.MkdirTemp("", "ixtest-"+kind+"-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	df, err := fill(dir)
	if err != nil {
		t.Fatalf("%s image: %v", kind, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("indexify-test-%s:%d", kind, os.Getpid())
	cmd := exec.Command("docker", "build", "-q", "-t", tag, dir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0") // no frontend pull
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", kind, err, out)
	}
	storeImages[kind] = tag
	return tag
}

// removeStoreImages deletes the images (from TestMain).
func removeStoreImages() {
	storeImagesMu.Lock()
	defer storeImagesMu.Unlock()
	for _, img := range storeImages {
		_, _ = docker(context.Background(), "image", "rm", "-f", img)
	}
}

func writableDirs(root string, dirs ...string) error {
	for _, d := range dirs {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if d == "tmp" {
			if err := os.Chmod(p, 0o1777); err != nil {
				return err
			}
		}
	}
	return nil
}

// runStore starts a store container and returns its published address.
func (k *Kube) runStore(kind, alias string, port int, args ...string) (name, addr string) {
	k.t.Helper()
	k.mu.Lock()
	ip := k.nextIP
	k.nextIP = ip.Next()
	k.mu.Unlock()
	name = k.Network + "-" + kind
	ctx := context.Background()
	run := append([]string{"run", "-d", "--name", name, "--hostname", alias,
		"--network", k.Network, "--ip", ip.String(), "--network-alias", alias,
		"--label", "indexify-test=" + k.Network, "-p", fmt.Sprintf("127.0.0.1::%d", port)}, args...)
	if _, err := docker(ctx, run...); err != nil {
		k.t.Fatal(err)
	}
	out, err := docker(ctx, "port", name, fmt.Sprintf("%d/tcp", port))
	if err != nil {
		k.t.Fatal(err)
	}
	return name, strings.Fields(out)[0]
}

func (k *Kube) exitedStore(name string) {
	if state, _ := docker(context.Background(), "inspect", "--format", "{{.State.Status}}", name); state == "exited" {
		l, _ := dockerCombined(context.Background(), "logs", name)
		k.t.Fatalf("%s exited:\n%s", name, l)
	}
}

// StartWeaviate runs a single-node Weaviate reachable on the test's
// network as http://alias:8080, and waits until it is ready.
func (k *Kube) StartWeaviate(alias string) {
	k.t.Helper()
	bin := harness.WeaviateBinary(k.t)
	img := buildScratchImage(k.t, "weaviate", func(dir string) (string, error) {
		if err := writableDirs(filepath.Join(dir, "rootfs"), "data", "tmp"); err != nil {
			return "", err
		}
		if err := copyFile(bin, filepath.Join(dir, "weaviate")); err != nil {
			return "", err
		}
		return "FROM scratch\nCOPY --chown=65532:65532 rootfs/ /\nCOPY weaviate /weaviate\nUSER 65532:65532\n" +
			"ENTRYPOINT [\"/weaviate\", \"--host\", \"0.0.0.0\", \"--port\", \"8080\", \"--scheme\", \"http\"]\n", nil
	})
	var env []string
	for _, e := range []string{
		"PERSISTENCE_DATA_PATH=/data", "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED=true",
		"DEFAULT_VECTORIZER_MODULE=none", "DISABLE_TELEMETRY=true", "AUTOSCHEMA_ENABLED=false",
		"CLUSTER_HOSTNAME=node1", "CLUSTER_ADVERTISE_ADDR=127.0.0.1", "RAFT_JOIN=node1",
		"RAFT_BOOTSTRAP_EXPECT=1", "LOG_LEVEL=warning",
	} {
		env = append(env, "-e", e)
	}
	name, addr := k.runStore("weaviate", alias, weaviatePort, append(env, img)...)
	cl := &http.Client{Timeout: 2 * time.Second}
	harness.Eventually(k.t, 90*time.Second, "Weaviate is ready", func() error {
		resp, err := cl.Get("http://" + addr + "/v1/.well-known/ready")
		if err != nil {
			k.exitedStore(name)
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("ready = %d", resp.StatusCode)
		}
		return nil
	})
}

// StartPostgres runs PostgreSQL 15 reachable on the test's network as
// alias:5432 (trust authentication for the "postgres" user, the network
// being the test's own) and returns the DSN the API servers use.
func (k *Kube) StartPostgres(alias string) string {
	k.t.Helper()
	img := buildScratchImage(k.t, "postgres", buildPostgresContext)
	name, addr := k.runStore("postgres", alias, postgresPort, img)
	// Ready once the server answers the startup of a TCP connection
	// (Docker's proxy accepts before the process listens: read its log).
	harness.Eventually(k.t, 60*time.Second, "PostgreSQL is ready", func() error {
		k.exitedStore(name)
		l, _ := dockerCombined(context.Background(), "logs", name)
		if !strings.Contains(l, "database system is ready to accept connections") {
			return fmt.Errorf("not ready (published at %s)", addr)
		}
		return nil
	})
	return fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=disable", alias, postgresPort)
}

// buildPostgresContext copies the host's PostgreSQL 15 server, the shared
// libraries it links, its share files and the time zone data into rootfs,
// and initialises a data directory there (initdb runs on the host).
func buildPostgresContext(dir string) (string, error) {
	pg, err := exec.LookPath("postgres")
	if err != nil {
		pg = "/usr/lib/postgresql/15/bin/postgres"
	}
	if pg, err = filepath.EvalSymlinks(pg); err != nil {
		return "", fmt.Errorf("PostgreSQL 15 is not installed (.ci/postgres.sh): %v", err)
	}
	root := filepath.Join(dir, "rootfs")
	pgRoot := filepath.Dir(filepath.Dir(pg)) // /usr/lib/postgresql/15
	copies := []string{pgRoot, "/usr/share/postgresql/15", "/usr/share/zoneinfo"}
	out, err := exec.Command("ldd", pg).Output()
	if err != nil {
		return "", fmt.Errorf("ldd %s: %v", pg, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				copies = append(copies, f)
			}
		}
	}
	for i, p := range copies {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			return "", err
		}
		flags := "-a" // directories keep their internal symlinks
		if i >= 3 {
			flags = "-L" // a library path may be a symlink: copy its target
		}
		if out, err := exec.Command("cp", flags, p, filepath.Join(root, p)).CombinedOutput(); err != nil {
			return "", fmt.Errorf("cp %s: %v %s", p, err, out)
		}
	}
	if err := writableDirs(root, "tmp", "etc"); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("postgres:x:65532:65532::/tmp:/nonexistent\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "group"), []byte("postgres:x:65532:\n"), 0o644); err != nil {
		return "", err
	}
	// initdb on the host, as the postgres user when root (it refuses root).
	data := filepath.Join(root, "data") // mode 0700, kept by COPY
	initdb := filepath.Join(filepath.Dir(pg), "initdb")
	args := []string{initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions"}
	if os.Geteuid() == 0 {
		for _, d := range []string{dir, root} {
			if err := os.Chmod(d, 0o755); err != nil {
				return "", err
			}
		}
		if err := os.MkdirAll(data, 0o700); err != nil {
			return "", err
		}
		if out, err := exec.Command("chown", "postgres", data).CombinedOutput(); err != nil {
			return "", fmt.Errorf("chown: %v %s", err, out)
		}
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	hba := filepath.Join(data, "pg_hba.conf")
	f, err := os.OpenFile(hba, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString("host all all 0.0.0.0/0 trust\n"); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return fmt.Sprintf("FROM scratch\nCOPY --chown=65532:65532 rootfs/ /\nUSER 65532:65532\n"+
		"ENTRYPOINT [%q, \"-D\", \"/data\", \"-c\", \"listen_addresses=*\", \"-p\", \"%d\", \"-c\", \"unix_socket_directories=/tmp\", \"-c\", \"fsync=off\", \"-c\", \"jit=off\"]\n",
		pg, postgresPort), nil
}
