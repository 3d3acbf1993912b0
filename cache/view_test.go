package cache

import (
	"bytes"
	"context"
	"testing"
)

// TestViewsShareOneCopy reads one object through two views of one cache
// (two mounts): the second is served from the cache, and each view counts
// its own bytes by tier.
func TestViewsShareOneCopy(t *testing.T) {
	b := newFake("fake://a/")
	data := randomData(90, 6*MiB+7)
	info := b.put("shared", data)
	c := newTestCache(t, Options{Dir: t.TempDir()})
	v1, v2 := c.View(), c.View()

	h1, err := v1.Open(context.Background(), b, info)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, h1, info.Size, 128<<10); !bytes.Equal(got, data) {
		t.Fatal("view 1 read differs from the object")
	}
	h1.Close()
	c.quiesce() // the file becomes complete on disk
	s1 := v1.Stats()
	if s1.BytesServed != info.Size || s1.BackendBytes < info.Size {
		t.Fatalf("view 1: served %d, fetched %d; want served %d, fetched all of it", s1.BytesServed, s1.BackendBytes, info.Size)
	}

	b.resetLog()
	h2, err := v2.Open(context.Background(), b, info)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if got := readAll(t, h2, info.Size, 128<<10); !bytes.Equal(got, data) {
		t.Fatal("view 2 read differs from the object")
	}
	if rs := b.readLog(); len(rs) != 0 {
		t.Fatalf("view 2 fetched again: %s", describeReads(rs))
	}
	s2 := v2.Stats()
	if s2.BackendBytes != 0 || s2.BytesServed != info.Size || s2.MemoryHitBytes+s2.DiskHitBytes != info.Size {
		t.Fatalf("view 2 stats %+v: want everything from the cache tiers", s2)
	}
	if _, ok := h2.(interface{ PassthroughFd() (int, bool) }).PassthroughFd(); !ok {
		t.Fatal("complete file offered no passthrough")
	}
	if got := v2.Stats().PassthroughBytes; got != info.Size {
		t.Fatalf("view 2 passthrough bytes %d, want the file size %d", got, info.Size)
	}
	if got := v1.Stats(); got != s1 {
		t.Fatalf("view 1 counters moved with view 2's reads: %+v, then %+v", s1, got)
	}

	st := c.Stats()
	if st.BytesServed != 2*info.Size || st.PassthroughBytes != info.Size ||
		st.MemoryHitBytes != s1.MemoryHitBytes+s2.MemoryHitBytes || st.DiskHitBytes != s1.DiskHitBytes+s2.DiskHitBytes {
		t.Fatalf("cache stats %+v are not the sum of the views' %+v and %+v", st, s1, v2.Stats())
	}
	if st.DiskBytes < info.Size {
		t.Fatalf("disk tier holds %d bytes, want at least the object's %d", st.DiskBytes, info.Size)
	}
}

// TestMemoryBytesCounted sees blocks held in memory in Stats.MemoryBytes.
func TestMemoryBytesCounted(t *testing.T) {
	b := newFake("fake://a/")
	data := randomData(91, 8*MiB)
	info := b.put("m", data)
	c := newTestCache(t, Options{MemoryBytes: 64 * MiB})
	if got := c.Stats().MemoryBytes; got != 0 {
		t.Fatalf("empty cache holds %d bytes in memory", got)
	}
	h := open(t, c, b, info)
	defer h.Close()
	// Read the first block only: readahead fetches more, which waits in
	// memory for its reader.
	p := make([]byte, 4096)
	if _, err := h.ReadAt(context.Background(), p, 0); err != nil {
		t.Fatal(err)
	}
	c.quiesce()
	if got := c.Stats().MemoryBytes; got < MiB || got > 64*MiB {
		t.Fatalf("memory tier holds %d bytes after readahead, want between 1 MiB and the 64 MiB bound", got)
	}
}
