package cache

import (
	"context"
	"sync"
)

// requestSlots bounds the backend requests in flight cache-wide and hands
// free slots to demand before prefetch: a reader's own fetch never queues
// behind directory warming or background completion. Prefetch may hold at
// most n-reserve slots, so a reader finds a slot free at once while fewer
// than reserve demand fetches are in flight; past that, demand waiters get
// every slot freed before any prefetch waiter does.
type requestSlots struct {
	n, reserve int

	mu       sync.Mutex
	used     int             // GUARDED_BY(mu)
	demand   []chan struct{} // GUARDED_BY(mu): waiters, oldest first
	prefetch []chan struct{} // GUARDED_BY(mu): waiters, oldest first
}

func newRequestSlots(n int) *requestSlots {
	return &requestSlots{n: n, reserve: min(max(n/8, 1), n-1)}
}

// canTakeLocked reports whether a slot is free for this class now.
func (s *requestSlots) canTakeLocked(prefetch bool) bool {
	if !prefetch {
		return s.used < s.n
	}
	return len(s.demand) == 0 && s.used < s.n-s.reserve
}

// acquire takes a slot, waiting for one; prefetch marks fetches nobody
// waits for yet.
func (s *requestSlots) acquire(ctx context.Context, prefetch bool) error {
	s.mu.Lock()
	if s.canTakeLocked(prefetch) {
		s.used++
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	q := &s.demand
	if prefetch {
		q = &s.prefetch
	}
	*q = append(*q, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for i, w := range *q {
			if w == ch {
				*q = append((*q)[:i], (*q)[i+1:]...)
				s.mu.Unlock()
				return ctx.Err()
			}
		}
		s.mu.Unlock()
		// Granted while we gave up: hand it on.
		s.release()
		return ctx.Err()
	}
}

// release frees a slot, to the oldest demand waiter if any.
func (s *requestSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used--
	for len(s.demand) > 0 && s.used < s.n {
		close(s.demand[0])
		s.demand = s.demand[1:]
		s.used++
	}
	for len(s.demand) == 0 && len(s.prefetch) > 0 && s.used < s.n-s.reserve {
		close(s.prefetch[0])
		s.prefetch = s.prefetch[1:]
		s.used++
	}
}
