// Package await waits, in tests, for a condition to hold: the one place a
// test polls, so that no test sleeps a fixed time or writes its own
// deadline loop.
package await

import (
	"testing"
	"time"
)

// Interval is how often a condition is tried again.
const Interval = 20 * time.Millisecond

// Until tries cond until it holds, and fails the test (from the caller's
// line) when it has not held within timeout. what says what was awaited.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	NoError(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// NoError tries f until it returns nil, and fails the test when it has not
// within timeout, with the last error f returned.
func NoError(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	if err := Within(timeout, f); err != nil {
		t.Fatalf("%s: not within %v: %v", what, timeout, err)
	}
}

// Within tries f until it returns nil and returns nil then, or returns the
// last error when f has not succeeded within timeout. It is for callers
// that decide themselves what a timeout means.
func Within(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(Interval)
	}
}

type notYet struct{}

func (notYet) Error() string { return "the condition does not hold yet" }

var errNotYet error = notYet{}
