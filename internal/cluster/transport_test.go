package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// blackHole returns a loopback address whose connects neither succeed nor
// fail: a listener with a backlog of 0 that never accepts, its queue filled
// by one connection, drops every further SYN, as the network does for the
// old IP of a pod that restarted elsewhere.
func blackHole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "black hole")
	t.Cleanup(func() { f.Close() })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	filler, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	return addr
}

// A Raft dial to an address that never answers gives up on the connect
// instead of waiting the transport's whole I/O timeout (10 s in the node,
// an hour here), so the next attempt resolves the peer's name again.
func TestDialGivesUpOnAnAddressThatNeverAnswers(t *testing.T) {
	addr := blackHole(t)
	sl, err := newStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	done := make(chan error, 1)
	go func() {
		c, err := sl.Dial(raft.ServerAddress(addr), time.Hour)
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("dial to a black hole: %v, want a connect timeout", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a dial to an address that never answers was still waiting after a minute")
	}
}
