package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestSleepElapses(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep with a live context reported a cancelled wait")
	}
}

// A cancelled context ends the wait at once: an hour-long pause returns.
func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep with a cancelled context reported that the pause elapsed")
	}
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	if <-done {
		t.Fatal("Sleep cancelled midway reported that the pause elapsed")
	}
}

// A closed wake channel ends an hour-long pause as elapsed; a cancelled
// context still wins over an open one.
func TestSleepOrWakeEndsOnTheSignal(t *testing.T) {
	wake := make(chan struct{})
	close(wake)
	if !SleepOrWake(context.Background(), time.Hour, wake) {
		t.Fatal("a signalled wait reported a cancelled context")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if SleepOrWake(ctx, time.Hour, make(chan struct{})) {
		t.Fatal("a cancelled wait reported that the pause elapsed")
	}
	if !SleepOrWake(context.Background(), time.Millisecond, nil) {
		t.Fatal("a short pause without a signal did not elapse")
	}
}

func TestPollReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	err := PollFor(time.Minute, time.Millisecond, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d calls, want nil after 3", err, n)
	}
}

// At the deadline Poll gives cond's last error, never a silent success.
func TestPollGivesTheLastErrorAtTheDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := Poll(ctx, time.Millisecond, func() error {
		if n++; n == 2 {
			cancel()
		}
		return fmt.Errorf("attempt %d", n)
	})
	if err == nil || err.Error() != fmt.Sprintf("attempt %d", n) || n < 2 {
		t.Fatalf("Poll = %v after %d calls", err, n)
	}
}

func TestPollUntil(t *testing.T) {
	n := 0
	if !PollUntil(time.Minute, time.Millisecond, func() bool { n++; return n == 2 }) || n != 2 {
		t.Fatalf("PollUntil missed a condition that held at call %d", n)
	}
	if PollUntil(10*time.Millisecond, time.Millisecond, func() bool { return false }) {
		t.Fatal("PollUntil reported a condition that never held")
	}
}
