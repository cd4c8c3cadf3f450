package harness

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The S3-compatible server the tests run: versitygw with its posix backend
// (every bucket a directory, every object a file), built from the Go module
// proxy. It was the first open-source S3 server on the list that builds
// here quickly (about 80 s on 2 cores with a cold module cache).
const (
	VersityGWModule  = "github.com/versity/versitygw/cmd/versitygw"
	VersityGWVersion = "v1.8.0"
	// S3AccessKey and S3SecretKey are the root credentials of test servers.
	S3AccessKey = "indexify-test"
	S3SecretKey = "indexify-test-secret"
)

var (
	vgwOnce sync.Once
	vgwPath string
	vgwErr  error
)

// VersityGWPath is where the versitygw binary is cached:
// $INDEXIFY_TOOLS_DIR (default ~/.cache/indexify-tools)/versitygw-<version>/versitygw.
// .ci/versitygw.sh builds it there before the tests; tests build it themselves when
// it is missing, so a plain `go test` works too (slowly, the first time).
func VersityGWPath() string {
	return filepath.Join(toolsDir(), "versitygw-"+VersityGWVersion, "versitygw")
}

// VersityGW returns the path of a built versitygw, building it if needed.
func VersityGW(t testing.TB) string {
	t.Helper()
	vgwOnce.Do(func() {
		vgwPath = VersityGWPath()
		vgwErr = buildTool(vgwPath, VersityGWModule, VersityGWVersion)
	})
	if vgwErr != nil {
		t.Fatal(vgwErr)
	}
	return vgwPath
}

// toolsDir is $INDEXIFY_TOOLS_DIR, by default ~/.cache/indexify-tools.
func toolsDir() string {
	if dir := os.Getenv("INDEXIFY_TOOLS_DIR"); dir != "" {
		return dir
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "indexify-tools")
}

// buildTool builds module@version (a main package) into path unless a file
// is already there.
func buildTool(path, module, version string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	// Build into a private directory and rename into place, so test
	// binaries building concurrently never see a half-written file.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", module+"@"+version)
	cmd.Dir = tmp // outside this module: go install pkg@version ignores go.mod
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s@%s: %v\n%s", module, version, err, out)
	}
	return os.Rename(filepath.Join(tmp, filepath.Base(module)), path)
}

// S3Server is a versitygw process serving S3 on a loopback port, storing
// objects below Dir/<bucket>/<object>. Stop and Start keep port and data,
// so tests can simulate an outage.
type S3Server struct {
	t        testing.TB
	Addr     string // 127.0.0.1:port
	Dir      string
	CertFile string // non-empty: serve HTTPS with this certificate
	KeyFile  string
	proc     *Proc
}

// StartS3 starts a plain-HTTP S3 server with fresh storage.
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	s := &S3Server{t: t, Dir: t.TempDir(), Addr: "127.0.0.1:" + strconv.Itoa(FreePort(t, "127.0.0.1"))}
	s.Start()
	return s
}

// StartS3TLS starts an HTTPS S3 server with the given certificate.
func StartS3TLS(t testing.TB, certFile, keyFile string) *S3Server {
	t.Helper()
	s := &S3Server{t: t, Dir: t.TempDir(), Addr: "127.0.0.1:" + strconv.Itoa(FreePort(t, "127.0.0.1")),
		CertFile: certFile, KeyFile: keyFile}
	s.Start()
	return s
}

// Endpoint is the URL clients use.
func (s *S3Server) Endpoint() string {
	if s.CertFile != "" {
		return "https://" + s.Addr
	}
	return "http://" + s.Addr
}

// Start (re)starts the server and waits until it accepts requests.
func (s *S3Server) Start() {
	s.t.Helper()
	args := []string{"--access", S3AccessKey, "--secret", S3SecretKey, "--port", s.Addr, "--quiet"}
	if s.CertFile != "" {
		args = append(args, "--cert", s.CertFile, "--key", s.KeyFile)
	}
	args = append(args, "posix", s.Dir)
	s.proc = startExternal(s.t, "versitygw", VersityGW(s.t), args...)
	Eventually(s.t, 30*time.Second, "S3 server accepts connections", func() error {
		if s.proc.Exited() {
			s.t.Fatalf("versitygw exited:\n%s", s.proc.Output())
		}
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// Stop kills the server (SIGKILL: an outage, not a shutdown).
func (s *S3Server) Stop() { s.proc.Kill() }

// ObjectPath is the file holding an object of the posix backend.
func (s *S3Server) ObjectPath(bucket, object string) string {
	return filepath.Join(s.Dir, bucket, filepath.FromSlash(object))
}

// CredentialsFile writes an AWS shared-credentials file with the server's
// keys and returns its path.
func (s *S3Server) CredentialsFile() string {
	s.t.Helper()
	p := filepath.Join(s.t.TempDir(), "credentials")
	body := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", S3AccessKey, S3SecretKey)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// startExternal runs a non-indexify program like Start does.
func startExternal(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	return startExternalEnv(t, name, bin, nil, args...)
}

// startExternalEnv is startExternal with extra environment (KEY=VALUE).
func startExternalEnv(t testing.TB, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	p := &Proc{Name: name, cmd: cmd, log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	w := lockedWriter{mu: p.mu, b: p.log}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("---- output of %s ----\n%s", name, p.Output())
		}
	})
	return p
}

// StartAPIServer runs `indexify server` against coordinators with extra
// flags (e.g. the blob store's) and waits until it answers.
func StartAPIServer(t testing.TB, coordinators, dataDir string, extra ...string) (*Proc, *HTTP) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(FreePort(t, "127.0.0.1"))
	args := append([]string{"server", "--coordinator-addr", coordinators, "--api-addr", addr, "--data-dir", dataDir}, extra...)
	p := Start(t, "api-server-"+addr, args...)
	h := NewHTTP("http://" + addr)
	Eventually(t, 30*time.Second, "API server answers", func() error {
		if p.Exited() {
			t.Fatalf("API server exited:\n%s", p.Output())
		}
		code, _, err := h.Do(context.Background(), http.MethodGet, "/", "", nil)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET / = %d", code)
		}
		return nil
	})
	return p, h
}
