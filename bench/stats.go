package bench

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sample is what one run of one workload measured.
type sample struct {
	bytes, files, ops int64
	elapsed           time.Duration
	lat               []time.Duration // one per op
	extra             map[string]float64
	partial           bool // stopped by --duration before the end
}

// latencies collects per-op latencies from many goroutines; each goroutine
// appends to its own slice and merges once at the end.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) merge(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

// percentile returns the q-quantile (0..1) of d by the nearest-rank method;
// it sorts d.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	if !slices.IsSorted(d) {
		slices.Sort(d)
	}
	i := int(q*float64(len(d))+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

// median returns the median of v (the mean of the middle two for even n).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// counter is an atomic counter shared by a run's goroutines.
type counter struct{ v atomic.Int64 }

func (c *counter) add(n int64) { c.v.Add(n) }
func (c *counter) get() int64  { return c.v.Load() }

// next returns 0, 1, 2, ... across calls: a work queue over indices.
func (c *counter) next() int { return int(c.v.Add(1) - 1) }
