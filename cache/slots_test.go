package cache

import (
	"context"
	"testing"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

// Demand fetches get free slots before prefetches, and prefetch never takes
// the slots kept for demand.
func TestRequestSlotsDemandFirst(t *testing.T) {
	ctx := context.Background()
	s := newRequestSlots(4) // one slot kept for demand
	for range 3 {
		if err := s.acquire(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	granted := make(chan string, 4)
	go func() {
		if err := s.acquire(ctx, true); err == nil {
			granted <- "prefetch"
		}
	}()
	// The kept slot goes to demand at once, with a prefetch waiting.
	if err := s.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	// Wait until the prefetch is queued before the next demand queues.
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.prefetch) == 1 })
	go func() {
		if err := s.acquire(ctx, false); err == nil {
			granted <- "demand"
		}
	}()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.demand) == 1 })
	s.release()
	if got := <-granted; got != "demand" {
		t.Fatalf("first freed slot went to %s; want the demand waiter", got)
	}
	select {
	case got := <-granted:
		t.Fatalf("%s granted with no slot free", got)
	default:
	}
	s.release() // used 3 of 4: no room for prefetch (one kept)
	select {
	case got := <-granted:
		t.Fatalf("%s granted into the slot kept for demand", got)
	default:
	}
	s.release()
	if got := <-granted; got != "prefetch" {
		t.Fatalf("got %s; want the prefetch waiter", got)
	}

	// A waiter that gives up leaves no slot taken.
	cctx, cancel := context.WithCancel(ctx)
	s2 := newRequestSlots(2)
	for range 2 {
		if err := s2.acquire(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error)
	go func() { errc <- s2.acquire(cctx, false) }()
	waitFor(t, func() bool { s2.mu.Lock(); defer s2.mu.Unlock(); return len(s2.demand) == 1 })
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled acquire succeeded")
	}
	s2.release()
	s2.release()
	s2.mu.Lock()
	defer s2.mu.Unlock()
	if s2.used != 0 || len(s2.demand) != 0 {
		t.Fatalf("after release: used %d, %d waiters; want 0, 0", s2.used, len(s2.demand))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, cond, "the condition")
}
