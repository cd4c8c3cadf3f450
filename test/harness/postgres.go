package harness

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Postgres is a throwaway PostgreSQL 15 server for one test: its own data
// directory in a temporary directory, listening on 127.0.0.1 at an ephemeral
// port (and a unix socket in that directory only), trust authentication for
// the superuser "postgres". It is stopped and removed when the test ends.
type Postgres struct {
	Dir  string
	Port int
	// DSN connects as the superuser to the "postgres" database.
	DSN string
	run func(args ...string) *exec.Cmd
	// pgctl, data and opts start the same server again (Start).
	pgctl, data, opts string
}

// pgBin finds a PostgreSQL 15 program on the PATH or in Debian's directory,
// running .ci/postgres.sh (which installs postgresql-15) once if missing.
func pgBin(t testing.TB, name string) string {
	t.Helper()
	find := func() string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		p := filepath.Join("/usr/lib/postgresql/15/bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", filepath.Join(root, ".ci", "postgres.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("%s is missing and .ci/postgres.sh failed: %v\n%s", name, err, out)
	}
	if p := find(); p != "" {
		return p
	}
	t.Fatalf("%s not found after .ci/postgres.sh", name)
	return ""
}

// StartPostgres starts a server for this test.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	initdb, pgctl := pgBin(t, "initdb"), pgBin(t, "pg_ctl")
	dir, err := os.MkdirTemp("", "indexify-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &Postgres{Dir: dir}
	// PostgreSQL refuses to run as root: run it as the postgres user then.
	p.run = func(args ...string) *exec.Cmd { return exec.Command(args[0], args[1:]...) }
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.run = func(args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := p.run(initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	var lastErr error
	var lastOut []byte
	for attempt := 0; attempt < 3; attempt++ {
		port := FreePort(t, "127.0.0.1")
		opts := strings.Join([]string{
			"-c listen_addresses=127.0.0.1",
			"-p " + strconv.Itoa(port),
			"-c unix_socket_directories=" + dir,
			"-c fsync=off", "-c full_page_writes=off", "-c max_connections=50",
		}, " ")
		out, err := p.run(pgctl, "-D", data, "-l", filepath.Join(dir, "log"), "-o", opts, "-w", "-t", "60", "start").CombinedOutput()
		if err == nil {
			p.Port = port
			p.pgctl, p.data, p.opts = pgctl, data, opts
			p.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			t.Cleanup(func() {
				if out, err := p.run(pgctl, "-D", data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
					t.Logf("pg_ctl stop: %v\n%s", err, out)
				}
			})
			return p
		}
		lastErr, lastOut = err, out
	}
	logText, _ := os.ReadFile(filepath.Join(dir, "log"))
	t.Fatalf("pg_ctl start: %v\n%s\n%s", lastErr, lastOut, logText)
	return nil
}

// Stop kills the server (immediate shutdown: an outage, not a clean stop);
// its data and port are kept for Start.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	if out, err := p.run(p.pgctl, "-D", p.data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

// Start starts a stopped server again on the same port with the same data.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	out, err := p.run(p.pgctl, "-D", p.data, "-l", filepath.Join(p.Dir, "log"), "-o", p.opts, "-w", "-t", "60", "start").CombinedOutput()
	if err != nil {
		logText, _ := os.ReadFile(filepath.Join(p.Dir, "log"))
		t.Fatalf("pg_ctl start again: %v\n%s\n%s", err, out, logText)
	}
}
