package e2e

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/indexify-go/indexify/test/harness"
)

// Bad command lines exit non-zero with one line saying why.
func TestCLIBadInputExitsWithOneLine(t *testing.T) {
	bin := harness.Binary(t)
	cases := [][]string{
		{"coordinator", "--bootstrap-expect", "three"},
		{"coordinator", "--data-dir", t.TempDir(), "--advertise", "no-port"},
		{"server", "--coordinator-addr", "dns:missing-port"},
		{"dev", "--config", "/nonexistent/config.yaml"},
		{"cluster", "recover", "--data-dir", t.TempDir(), "--node-id", "a", "--peers", "b=127.0.0.1:1"},
		{"no-such-command"},
	}
	for _, args := range cases {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("%v: exit %v, want non-zero\n%s", args, err, out)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "indexify: ") {
			t.Errorf("%v: want one 'indexify: ...' line, got:\n%s", args, out)
		}
	}
}

func TestCLIVersionAndHelp(t *testing.T) {
	bin := harness.Binary(t)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "indexify ") {
		t.Fatalf("version: %v %s", err, out)
	}
	out, err = exec.Command(bin, "dev", "--help").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--data-dir", "--api-addr", "--coordinator-addr", "--raft-addr", "--coordinator-http-addr"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("dev --help lacks %s", flag)
		}
	}
}
