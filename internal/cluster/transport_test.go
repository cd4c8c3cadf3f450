package cluster

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/freeport"
)

// A Raft dial to an address that never answers gives up on the connect
// instead of waiting the transport's whole I/O timeout (10 s in the node,
// an hour here), so the next attempt resolves the peer's name again.
func TestDialGivesUpOnAnAddressThatNeverAnswers(t *testing.T) {
	addr := freeport.Unanswered(t)
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
