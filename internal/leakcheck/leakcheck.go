// Package leakcheck is how tests prove that closing what they opened
// releases it: they count the process's open descriptors and goroutines
// before and after cycles of open and close, and wait for the counts to
// come back.
package leakcheck

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

// Guard bounds the wait for the counts to come back. It is shorter than
// the HTTP transports' 120 s idle timeout on purpose: connections a Close
// forgot would be released by that timeout, and a longer wait would let
// the leak heal instead of failing the test.
const Guard = 60 * time.Second

// slack is what the runtime and the test itself may add between two
// counts (a worker, a timer goroutine).
const slack = 2

// Counts are a process's open descriptors and goroutines.
type Counts struct {
	FDs, Goroutines int
}

// now counts, after a GC so that what is unreachable is finalised.
func now(tb testing.TB) Counts {
	tb.Helper()
	runtime.GC()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	return Counts{FDs: len(ents), Goroutines: runtime.NumGoroutine()}
}

// Baseline waits until the counts stop changing and returns them.
func Baseline(tb testing.TB) Counts {
	tb.Helper()
	prev, c := Counts{-1, -1}, Counts{-1, -1}
	if testwait.Until(Guard, func() bool {
		prev, c = c, now(tb)
		return c == prev
	}) != nil {
		tb.Fatalf("the process's descriptors and goroutines did not settle (last %d and %d)", c.FDs, c.Goroutines)
	}
	return c
}

// Back waits until the counts are back to base (give or take a little for
// the runtime), failing the test after Guard; what says after what
// ("after closing every backend").
func Back(tb testing.TB, base Counts, what string) {
	tb.Helper()
	var c Counts
	if testwait.Until(Guard, func() bool {
		c = now(tb)
		return c.FDs <= base.FDs+slack && c.Goroutines <= base.Goroutines+slack
	}) != nil {
		tb.Fatalf("%s: %d descriptors and %d goroutines, against %d and %d before", what, c.FDs, c.Goroutines, base.FDs, base.Goroutines)
	}
}
