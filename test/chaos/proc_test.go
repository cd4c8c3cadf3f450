package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// proc is one process running inside a network namespace. `ip netns exec`
// execs the program after entering the namespace, so the pid we hold is
// the program's own and signals (SIGKILL, SIGSTOP) reach it directly.
// Output is appended to a log file that survives restarts; the checks read
// those files afterwards.
type proc struct {
	name    string
	ns      string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// startIn runs bin with args in namespace ns; env entries are added to the
// test's environment. The process is killed when the test ends.
func startIn(t testing.TB, name, ns, logPath string, env []string, bin string, args ...string) *proc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "#### chaos: start %s at %s\n", name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(append(os.Environ(), "INDEXIFY_LOG_FORMAT=text"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, ns: ns, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(p.kill)
	return p
}

// kill sends SIGKILL to the process group and waits for the exit.
func (p *proc) kill() {
	if p == nil || p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return fmt.Errorf("%s already exited", p.name)
	}
	return syscall.Kill(p.cmd.Process.Pid, sig)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to d for the exit and reports whether it happened.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}
