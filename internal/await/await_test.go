package await_test

import (
	"errors"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/internal/await"
)

func TestWithin(t *testing.T) {
	n := 0
	if err := await.Within(time.Minute, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Within = %v after %d tries, want nil after 3", err, n)
	}
	last := errors.New("still failing")
	start := time.Now()
	if err := await.Within(100*time.Millisecond, func() error { return last }); err != last {
		t.Fatalf("Within = %v, want the last error", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("Within gave up after %v, before its timeout", d)
	}
}

type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
}

func TestUntilFails(t *testing.T) {
	r := &recorder{TB: t}
	await.Until(r, 50*time.Millisecond, "never", func() bool { return false })
	if r.failed == "" {
		t.Fatal("Until did not fail the test when the condition never held")
	}
	r = &recorder{TB: t}
	await.Until(r, time.Minute, "at once", func() bool { return true })
	if r.failed != "" {
		t.Fatalf("Until failed a condition that held: %s", r.failed)
	}
}

func ExampleUntil() {
	ready := make(chan struct{})
	go close(ready)
	t := &testing.T{}
	await.Until(t, time.Minute, "ready", func() bool {
		select {
		case <-ready:
			return true
		default:
			return false
		}
	})
	// Output:
}
