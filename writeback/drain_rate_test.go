package writeback

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestDrainRateCountsOnlyTheWindow: a file already sent when the drain
// begins (its commit held) must not count toward the drain's rate; a file
// sent wholly inside the window must. The clock is injected, so the rate
// is exact whatever the machine's load.
func TestDrainRateCountsOnlyTheWindow(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	s := openStore(t, f, t.TempDir(), func(o *Options) { o.StreamThreshold = 0 })
	a, b := randBytes(1, 6<<20), randBytes(2, 1<<20)

	// a: every byte sent, the commit held.
	f.hold("a")
	writeFile(t, s, "a", a)
	testwait.Eventually(t, func() bool { return s.sent.Load() >= int64(len(a)) }, "every byte of a to be sent") // a counter that has no signal
	// b: its upload may not start before the drain's window opens.
	startB := make(chan struct{})
	f.mu.Lock()
	f.startGate = startB
	f.mu.Unlock()
	writeFile(t, s, "b", b)

	// The first reading opens the window at t0; every later one says 8s
	// have passed, and lets both uploads go.
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var once sync.Once
	var mu sync.Mutex
	calls := 0
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return t0
		}
		once.Do(func() {
			close(startB)
			f.release()
		})
		return t0.Add(8 * time.Second)
	}
	var reports []Progress
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.drain(ctx, func(p Progress) { reports = append(reports, p) }, now); err != nil {
		t.Fatal(err)
	}
	wantFile(t, dir, "a", a)
	wantFile(t, dir, "b", b)
	if len(reports) == 0 {
		t.Fatal("no progress reported")
	}
	last := reports[len(reports)-1]
	if last.FilesDone != 2 || last.BytesTotal != int64(len(a)+len(b)) || last.BytesDone != last.BytesTotal {
		t.Fatalf("final progress = %+v, want 2 files and %d bytes done", last, len(a)+len(b))
	}
	if last.Sent != int64(len(b)) || last.Elapsed != 8*time.Second {
		t.Fatalf("final progress = %+v, want %d bytes sent in an 8s window", last, len(b))
	}
	if got, want := last.Rate(), float64(len(b))/8; got != want {
		t.Fatalf("rate = %.0f B/s, want %.0f (b's 1 MiB over 8s; a was sent before the drain)", got, want)
	}
	if got := last.String(); got != "2/2 files, 7.0 MiB/7.0 MiB, 128 KiB/s" {
		t.Fatalf("progress line %q", got)
	}
}

// TestProgressRateEmptyWindow: no time elapsed means no rate, not a
// division by zero.
func TestProgressRateEmptyWindow(t *testing.T) {
	if r := (Progress{Sent: 10}).Rate(); r != 0 {
		t.Fatalf("rate of a zero-length window = %v, want 0", r)
	}
}
