package cache

import (
	"fmt"
	"testing"
)

// evictEntries is the population of the eviction benchmarks: a node
// caching a million small objects.
const evictEntries = 1_000_000

// BenchmarkEvict1M measures an insert that must evict, with 1,000,000
// small objects cached: ns/op is the cost of one eviction-causing insert
// under Cache.mu (including the removal of the victim's files).
func BenchmarkEvict1M(b *testing.B) { benchEvict(b, (*Cache).makeRoomLocked) }

// BenchmarkEvict1MScan is the same with the eviction this package used
// before the LRU list (a scan of every entry per victim), kept as the
// reference the LRU list is measured against.
func BenchmarkEvict1MScan(b *testing.B) { benchEvict(b, (*Cache).makeRoomScanLocked) }

func benchEvict(b *testing.B, makeRoom func(*Cache, int64) bool) {
	const size = 4096
	c, err := New(Options{Dir: b.TempDir(), DiskBytes: evictEntries * size, FreeFloorBytes: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	id := func(i int) string { return fmt.Sprintf("%032x-%016x", i, 0) }
	c.mu.Lock()
	for i := range evictEntries {
		e := c.newEntry(id(i), size)
		e.diskBytes = size
		c.addLocked(e)
		c.used += size
	}
	c.mu.Unlock()
	b.ResetTimer()
	for i := range b.N {
		e := c.newEntry(id(evictEntries+i), size)
		c.mu.Lock()
		c.addLocked(e)
		c.pinLocked(e)
		if !makeRoom(c, size) {
			c.mu.Unlock()
			b.Fatal("no room made")
		}
		c.used += size
		e.diskBytes = size
		e.pins--
		c.lru.pushBack(e)
		c.mu.Unlock()
	}
	b.StopTimer()
	if got := c.Stats().Evictions; got != int64(b.N) {
		b.Fatalf("%d evictions for %d inserts", got, b.N)
	}
}

// makeRoomScanLocked is the eviction of before the LRU list: a scan of
// every entry for the oldest unpinned one, per victim.
func (c *Cache) makeRoomScanLocked(n int64) bool {
	for !c.fitsLocked(n) {
		var victim *entry
		for _, e := range c.entries {
			if e.pins == 0 && (victim == nil || e.atime.Before(victim.atime)) {
				victim = e
			}
		}
		if victim == nil {
			return false
		}
		c.removeLocked(victim)
		c.stats.evictions.Add(1)
	}
	return true
}
