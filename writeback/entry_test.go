package writeback

import (
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestEntryOperationState: an exclusive operation waits for the reads and
// writes in progress, and a waiting one keeps new ones from starting (so
// writes cannot starve a close); they start once it ends.
func TestEntryOperationState(t *testing.T) {
	nb, _ := newNAS(t)
	s := openStore(t, nb, t.TempDir(), nil)
	s.mu.Lock()
	e := s.entryLocked("k", nil)
	s.beginIOLocked(e)
	s.mu.Unlock()
	state := func(cond func() bool, what string) {
		t.Helper()
		testwait.Eventually(t, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return cond()
		}, "%s", what)
	}
	within := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(2 * time.Minute):
			t.Fatalf("never happened: %s", what)
		}
	}
	opBegun := make(chan struct{})
	go func() {
		s.beginOp(e, opSeal)
		close(opBegun)
	}()
	state(func() bool { return e.opWaiting == 1 }, "the seal waits for the write")
	ioBegun := make(chan struct{})
	go func() {
		s.mu.Lock()
		s.beginIOLocked(e)
		s.mu.Unlock()
		close(ioBegun)
	}()
	select {
	case <-opBegun:
		t.Fatal("the seal began during a write")
	default:
	}
	s.mu.Lock()
	s.endIOLocked(e)
	s.mu.Unlock()
	// Had the second write begun before the waiting seal, the seal would
	// wait for it forever.
	within(opBegun, "the seal begins once the write ends")
	s.mu.Lock()
	if e.op != opSeal || e.io != 0 {
		t.Errorf("during the seal: op %q, io %d; want %q, 0", e.op, e.io, opSeal)
	}
	s.mu.Unlock()
	s.endOp(e)
	within(ioBegun, "the next write begins once the seal ends")
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.op != "" || e.io != 1 {
		t.Errorf("after the seal: op %q, io %d; want idle and one write", e.op, e.io)
	}
}
