// Package retry holds the one way this project waits between attempts:
// Sleep, a pause that ends early when the caller's context does.
package retry

import (
	"context"
	"errors"
	"time"
)

// Sleep waits d or until ctx is done; it reports whether d elapsed (false:
// ctx ended first, stop retrying).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Poll calls cond every interval until it returns nil (Poll returns nil)
// or ctx ends (Poll returns cond's last error, or ctx's error if cond never
// ran). cond runs at once, and once more as ctx ends, so a condition met
// just before the deadline is not missed. It is the one polling loop of
// the project's tests; an interval is a poll rate, never synchronisation.
func Poll(ctx context.Context, interval time.Duration, cond func() error) error {
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !Sleep(ctx, interval) {
			if err = cond(); err == nil {
				return nil
			}
			return err
		}
	}
}

// PollFor is Poll bounded by timeout instead of a context.
func PollFor(timeout, interval time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Poll(ctx, interval, cond)
}

// PollUntil is PollFor for a condition without an error to report: it
// reports whether cond held within timeout.
func PollUntil(timeout, interval time.Duration, cond func() bool) bool {
	return PollFor(timeout, interval, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) == nil
}

var errNotYet = errors.New("condition not met")

// SleepOrWake is Sleep that also ends early, reporting true, when wake is
// closed: a retry loop waits out its backoff unless the condition it waits
// for (a new leader, say) is signalled first.
func SleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-wake:
		return true
	case <-ctx.Done():
		return false
	}
}
