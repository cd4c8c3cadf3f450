package dirlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestOneHolderAtATime(t *testing.T) {
	dir := t.TempDir()
	a, err := TryAcquire(dir, "x.lock")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TryAcquire(dir, "x.lock"); !errors.Is(err, ErrHeld) {
		t.Fatalf("second TryAcquire: %v, want ErrHeld", err)
	}
	// Another name in the same directory is another lock.
	other, err := TryAcquire(dir, "y.lock")
	if err != nil {
		t.Fatal(err)
	}
	other.Release()
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	b, err := TryAcquire(dir, "x.lock")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	b.Release()
}

// Wait opens once the holder lets go, telling once that it waits; an error
// other than ErrHeld ends it at once; a context that ends stops it.
func TestWait(t *testing.T) {
	dir := t.TempDir()
	held, err := TryAcquire(dir, "x.lock")
	if err != nil {
		t.Fatal(err)
	}
	waited := 0
	tries := 0
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := Wait(ctx, func() (*Lock, error) {
		tries++
		if tries == 3 {
			held.Release() // the old process exits
		}
		return TryAcquire(dir, "x.lock")
	}, func(error) { waited++ })
	if err != nil || l == nil {
		t.Fatalf("Wait: %v", err)
	}
	l.Release()
	if waited != 1 || tries < 3 {
		t.Fatalf("waiting told %d times over %d tries; want once", waited, tries)
	}

	boom := errors.New("boom")
	if _, err := Wait(ctx, func() (int, error) { return 0, boom }, nil); !errors.Is(err, boom) {
		t.Fatalf("Wait with a failing open: %v", err)
	}

	held, _ = TryAcquire(dir, "x.lock")
	defer held.Release()
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	if _, err := Wait(short, func() (*Lock, error) { return TryAcquire(dir, "x.lock") }, nil); !errors.Is(err, ErrHeld) {
		t.Fatalf("Wait past its context: %v, want ErrHeld", err)
	}
}
