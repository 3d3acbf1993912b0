// Package testwait is how tests wait for state they cannot be told about:
// they poll a condition until it holds. The deadline is a hang guard, not a
// speed limit: on a busy 2-core machine a step that takes milliseconds when
// quiet can take seconds, so every wait gives minutes before it fails.
package testwait

import (
	"fmt"
	"testing"
	"time"
)

// Guard is the default deadline of a wait: long enough that only a hang
// reaches it.
const Guard = 3 * time.Minute

// poll is the first pause between two looks at a condition; it doubles up
// to maxPoll, so a quick condition is seen quickly and a slow one costs
// few looks.
const (
	poll    = time.Millisecond
	maxPoll = 100 * time.Millisecond
)

// Eventually polls cond until it returns true, failing the test (with what,
// formatted as by fmt.Sprintf) if that has not happened within Guard.
func Eventually(tb testing.TB, cond func() bool, what string, args ...any) {
	tb.Helper()
	EventuallyWithin(tb, Guard, cond, what, args...)
}

// EventuallyWithin is Eventually with its own deadline.
func EventuallyWithin(tb testing.TB, d time.Duration, cond func() bool, what string, args ...any) {
	tb.Helper()
	if err := Until(d, cond); err != nil {
		tb.Fatalf("waited %v for %s", d, fmt.Sprintf(what, args...))
	}
}

// EventuallyNoError polls f until it returns nil, failing the test with the
// last error if that has not happened within Guard.
func EventuallyNoError(tb testing.TB, f func() error, what string, args ...any) {
	tb.Helper()
	var last error
	if err := Until(Guard, func() bool { last = f(); return last == nil }); err != nil {
		tb.Fatalf("waited %v for %s: last error: %v", Guard, fmt.Sprintf(what, args...), last)
	}
}

// ErrTimeout is what Until returns when its condition never held.
var ErrTimeout = fmt.Errorf("testwait: condition did not hold in time")

// Until polls cond until it returns true or d has passed; it is for code
// that is not a test (helpers run in subprocesses) and for tests that must
// handle the timeout themselves.
func Until(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	pause := poll
	for {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return ErrTimeout
		}
		time.Sleep(pause)
		if pause < maxPoll {
			pause *= 2
		}
	}
}
