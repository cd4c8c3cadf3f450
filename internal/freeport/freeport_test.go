package freeport

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestTakeAvoidsEphemeralRangeAndRepeats(t *testing.T) {
	lo, hi := portRange()
	seen := map[int]bool{}
	for range 200 {
		p := Take(t)
		if p < lo || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, lo, hi)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice while reserved", p)
		}
		seen[p] = true
	}
}

func TestTakeSkipsBoundPort(t *testing.T) {
	lo, _ := portRange()
	for start := 0; start < 50; start++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+start)))
		if err != nil {
			continue // taken by someone else: try the next
		}
		defer l.Close()
		p, release, err := takeFrom(nil, start)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		if p == lo+start {
			t.Fatalf("port %d is bound, yet it was handed out", p)
		}
		return
	}
	t.Fatal("could not bind any of the first 50 ports of the range")
}

func TestReservationIsExclusiveAcrossHolders(t *testing.T) {
	p, release, err := take(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	// A second holder (a second open file, as another process would have)
	// cannot lock the same port while the first holds it.
	for range 100 {
		q, rel, err := take(nil)
		if err != nil {
			t.Fatal(err)
		}
		rel()
		if q == p {
			t.Fatalf("port %d reserved twice", p)
		}
	}
}

// A connect to an Unanswered address times out (neither connects nor is
// refused).
func TestUnansweredNeverConnects(t *testing.T) {
	addr := Unanswered(t)
	_, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("connect to %s: %v, want a timeout", addr, err)
	}
}
