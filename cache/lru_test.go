package cache

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// cached reports whether the cache still indexes the object.
func cached(c *Cache, b backends.Backend, info backends.ObjectInfo) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[objectID(b.ID(), info.Key, info.Version)] != nil
}

// TestEvictionIsLeastRecentlyUsed: with room for three objects, a fourth
// evicts the one used longest ago, counting a re-open as a use.
func TestEvictionIsLeastRecentlyUsed(t *testing.T) {
	b := newFake("fake://a/")
	c := newTestCache(t, Options{Dir: t.TempDir(), DiskBytes: 3 * MiB, FreeFloorBytes: 1})
	var infos []backends.ObjectInfo
	for i := range 5 {
		infos = append(infos, b.put(fmt.Sprintf("o%d", i), randomData(uint64(100+i), MiB)))
	}
	use := func(i int) {
		readFile(t, c, b, infos[i])
		c.quiesce() // its background writes release their pins now, in order
	}
	use(0)
	use(1)
	use(2)
	use(0) // 0 is now more recent than 1 and 2
	use(3) // evicts 1
	if cached(c, b, infos[1]) || !cached(c, b, infos[0]) || !cached(c, b, infos[2]) || !cached(c, b, infos[3]) {
		t.Fatalf("after using 0 1 2 0 3 with room for three: cached %v %v %v %v, want 0, 2, 3",
			cached(c, b, infos[0]), cached(c, b, infos[1]), cached(c, b, infos[2]), cached(c, b, infos[3]))
	}
	use(4) // evicts 2
	if cached(c, b, infos[2]) || !cached(c, b, infos[0]) || !cached(c, b, infos[3]) || !cached(c, b, infos[4]) {
		t.Fatal("the next eviction did not take the least recently used object (2)")
	}
	if got := c.Stats().Evictions; got != 2 {
		t.Fatalf("%d evictions, want 2", got)
	}
}

// TestPinnedNeverEvicted: open objects are never evicted, whatever their
// age; when everything is open, new blocks are served but not kept.
func TestPinnedNeverEvicted(t *testing.T) {
	b := newFake("fake://a/")
	c := newTestCache(t, Options{Dir: t.TempDir(), DiskBytes: 2 * MiB, FreeFloorBytes: 1})
	old := b.put("old", randomData(110, MiB))
	h := open(t, c, b, old) // the oldest use, and pinned throughout
	readAll(t, h, old.Size, MiB)
	c.quiesce()
	for i := range 4 {
		use := b.put(fmt.Sprintf("n%d", i), randomData(uint64(111+i), MiB))
		readFile(t, c, b, use)
		c.quiesce()
		if !cached(c, b, old) {
			t.Fatalf("the open object was evicted by object %d", i)
		}
	}
	// Pin the other slot too: nothing is evictable any more.
	other := b.put("other", randomData(120, MiB))
	h2 := open(t, c, b, other)
	readAll(t, h2, other.Size, MiB)
	c.quiesce()
	before := c.Stats().Evictions
	extra := b.put("extra", randomData(121, MiB))
	if got := readFile(t, c, b, extra); len(got) != MiB {
		t.Fatal("a read with no evictable room failed")
	}
	c.quiesce()
	if c.Stats().Evictions != before || !cached(c, b, old) || !cached(c, b, other) {
		t.Fatal("an open object was evicted to make room")
	}
	if st := c.Stats(); st.DiskBytes > 2*MiB {
		t.Fatalf("disk tier holds %d bytes over its 2 MiB bound", st.DiskBytes)
	}
	h.Close()
	h2.Close()
}

// TestRestartEvictionOrder: after a restart the order comes from the
// files' mtimes, oldest evicted first.
func TestRestartEvictionOrder(t *testing.T) {
	dir := t.TempDir()
	b := newFake("fake://a/")
	c, err := New(Options{Dir: dir, FreeFloorBytes: 1, writeQueueBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var infos []backends.ObjectInfo
	for i := range 4 {
		info := b.put(fmt.Sprintf("r%d", i), randomData(uint64(130+i), MiB))
		infos = append(infos, info)
		readFile(t, c, b, info)
	}
	c.quiesce()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Ages unlike the read order: r2 oldest, then r0, r3, r1.
	base := time.Now().Add(-time.Hour)
	for rank, i := range []int{2, 0, 3, 1} {
		p := c.completePath(objectID(b.ID(), infos[i].Key, infos[i].Version))
		mt := base.Add(time.Duration(rank) * time.Minute)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	// Reopened with room for two: the two oldest go at once.
	c2 := newTestCache(t, Options{Dir: dir, DiskBytes: 2 * MiB, FreeFloorBytes: 1})
	want := []bool{false, true, false, true}
	for i, w := range want {
		if got := cached(c2, b, infos[i]); got != w {
			t.Fatalf("after restart with room for two, r%d cached = %v, want %v", i, got, w)
		}
	}
	// And the next eviction takes the older survivor, r3.
	readFile(t, c2, b, b.put("r4", randomData(134, MiB)))
	c2.quiesce()
	if cached(c2, b, infos[3]) || !cached(c2, b, infos[1]) {
		t.Fatal("the next eviction after restart did not take the oldest survivor")
	}
}
