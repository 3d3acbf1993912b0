package cache

import (
	"bytes"
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// TestKernelReadaheadStaysSequential reads a file as the kernel's
// asynchronous readahead does for a plain dd on an input mount: 128 KiB
// requests, several in flight at once over the readahead span (which
// starts small and doubles up to 16 MiB), in no particular order. The stream must be seen as one (no random reads)
// and every byte fetched once.
func TestKernelReadaheadStaysSequential(t *testing.T) {
	b := newFake("fake://a/")
	const size = 96 * MiB
	data := randomData(5, size)
	info := b.put("dd", data)
	c := newTestCache(t, Options{Dir: t.TempDir(), MemoryBytes: 256 * MiB})
	h := open(t, c, b, info)
	defer h.Close()
	const req = 128 << 10
	got := make([]byte, size)
	r := rand.New(rand.NewPCG(5, 5))
	span := int64(256 << 10)
	for base := int64(0); base < size; base, span = base+span, min(2*span, 16*MiB) {
		offs := make([]int64, 0, span/req)
		for off := base; off < min(base+span, size); off += req {
			offs = append(offs, off)
		}
		r.Shuffle(len(offs), func(i, j int) { offs[i], offs[j] = offs[j], offs[i] })
		var wg sync.WaitGroup
		errs := make(chan error, len(offs))
		for w := range 4 { // four requests in flight, as the kernel sends them
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(offs); i += 4 {
					off := offs[i]
					if _, err := h.ReadAt(context.Background(), got[off:off+req], off); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data differs")
	}
	st := c.Stats()
	if st.RandomReads != 0 {
		t.Errorf("%d of %d reads counted random in one sequential pass", st.RandomReads, st.Reads)
	}
	if f := b.fetchedBytes(); f != size {
		t.Errorf("fetched %d bytes for a %d-byte object: every byte must be fetched once; %s\nstats %+v",
			f, size, b.refetched(c.opt.BlockSize), st)
	}
}

// TestStreamsShareMemory: streams read at once share the memory: each
// window is capped at its share (never below four requests' worth), one
// stream alone keeps its whole window, and a stream that ends (closed)
// gives its share back.
func TestStreamsShareMemory(t *testing.T) {
	b := newFake("fake://a/")
	const size = 24 * MiB
	c := newTestCache(t, Options{Dir: t.TempDir(), MemoryBytes: 512 * MiB})
	var hs []*handle
	var datas [][]byte
	for i := range 4 {
		data := randomData(uint64(10+i), size)
		info := b.put(string(rune('a'+i)), data)
		hs = append(hs, open(t, c, b, info).(*handle))
		datas = append(datas, data)
	}
	// Each stream reads 8 MiB sequentially, all four in turn.
	buf := make([]byte, MiB)
	for off := int64(0); off < 8*MiB; off += MiB {
		for i, h := range hs {
			if _, err := h.ReadAt(context.Background(), buf, off); err != nil || !bytes.Equal(buf, datas[i][off:off+MiB]) {
				t.Fatalf("stream %d at %d: %v (or data differs)", i, off, err)
			}
		}
	}
	if n := c.streams.Load(); n != 4 {
		t.Fatalf("%d streams counted, want 4", n)
	}
	share := max(c.opt.MemoryBytes/8, 4*c.opt.MaxRequestBytes)
	for i, h := range hs {
		h.mu.Lock()
		h.window = c.opt.MaxWindow // as after a long stream
		w := h.streamWindow()
		h.mu.Unlock()
		if w != min(share, c.opt.MaxWindow) {
			t.Errorf("stream %d: window %d with 4 streams in %d bytes of memory, want %d", i, w, c.opt.MemoryBytes, share)
		}
	}
	for _, h := range hs[:3] {
		h.Close()
	}
	if n := c.streams.Load(); n != 1 {
		t.Fatalf("%d streams counted after three closed, want 1", n)
	}
	h := hs[3]
	h.mu.Lock()
	h.window = c.opt.MaxWindow
	w := h.streamWindow()
	h.mu.Unlock()
	if w != c.opt.MaxWindow {
		t.Errorf("one stream alone: window %d, want MaxWindow %d", w, c.opt.MaxWindow)
	}
	h.Close()
	if n := c.streams.Load(); n != 0 {
		t.Fatalf("%d streams counted after every handle closed, want 0", n)
	}
}

// TestBlockReadOutOfOrderStaysUntilRead: a block the disk tier skipped (no
// room in the write queue) is held in memory until every byte of it has been
// read, whatever order its parts are read in, so a read of its first bytes
// after its last never fetches it again.
func TestBlockReadOutOfOrderStaysUntilRead(t *testing.T) {
	b := newFake("fake://a/")
	const size = 2 * MiB
	data := randomData(7, size)
	info := b.put("o", data)
	// A write queue smaller than a block: every block skips the disk.
	c := newTestCache(t, Options{Dir: t.TempDir(), MemoryBytes: 64 * MiB, writeQueueBytes: 1})
	h := open(t, c, b, info)
	defer h.Close()
	const req = 128 << 10
	key := c.blockKey(h.(*handle).e.id, 0)
	got := make([]byte, size)
	for i, off := range []int64{MiB - req, 0, 3 * req, req, 2 * req, 4 * req, 5 * req, MiB - 2*req} {
		if !c.ready.has(key) && i > 0 {
			t.Fatalf("block 0 left the ready buffer after %d of its 8 parts were read", i)
		}
		if _, err := h.ReadAt(context.Background(), got[off:off+req], off); err != nil {
			t.Fatal(err)
		}
	}
	if c.ready.has(key) {
		t.Error("block 0 still in the ready buffer after all of it was read")
	}
	if _, err := h.ReadAt(context.Background(), got[MiB:], MiB); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data differs")
	}
	if f := b.fetchedBytes(); f != size {
		t.Errorf("fetched %d bytes for a %d-byte object; %s", f, size, b.refetched(c.opt.BlockSize))
	}
}

// TestWholeFileReadFillsWindowAtOnce: a read from offset 0 continued by a
// second sequential read is a whole-file read; the second read already
// sends the whole window (16 requests of 8 MiB, the ideal reader's shape),
// not a doubling ramp of small requests that waits on the reads the kernel
// sends only after the first is answered. Every byte is still fetched
// once, and a stream that starts elsewhere keeps the doubling ramp.
func TestWholeFileReadFillsWindowAtOnce(t *testing.T) {
	b := newFake("fake://a/")
	const size = 256 * MiB
	data := randomData(21, size)
	info := b.put("whole", data)
	c := newTestCache(t, Options{Dir: t.TempDir(), MemoryBytes: 512 * MiB})
	h := open(t, c, b, info).(*handle)
	buf := make([]byte, MiB)
	for i := range int64(2) {
		if _, err := h.ReadAt(context.Background(), buf, i*MiB); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	ahead, window := h.ahead, h.window
	h.mu.Unlock()
	o := c.opt
	if window != o.MaxWindow {
		t.Errorf("window %d after two reads from offset 0; want the maximum %d", window, o.MaxWindow)
	}
	// Requests are sent whole: the window's 128 MiB less what is not a
	// whole 8 MiB request yet.
	if sent := ahead * o.BlockSize; sent < 2*MiB+o.MaxWindow-o.MaxRequestBytes {
		t.Errorf("after two reads from offset 0 readahead was sent up to %d; want at least %d", sent, 2*MiB+o.MaxWindow-o.MaxRequestBytes)
	}
	got := readAll(t, h, size, MiB)
	h.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("data differs")
	}
	rs := b.readLog()
	short := 0
	for _, r := range rs {
		if r.length < o.MaxRequestBytes && r.off+r.length != size {
			short++
		}
	}
	// The first two reads' blocks alone; no short stragglers after.
	if short > 2 {
		t.Errorf("%d requests shorter than %d: %s", short, o.MaxRequestBytes, describeReads(rs))
	}
	if f := b.fetchedBytes(); f != size {
		t.Errorf("fetched %d bytes for a %d-byte object; want each byte once", f, size)
	}

	// A stream that starts at 64 MiB ramps up from one block: its first
	// two reads are random (no stream yet), the next two double.
	h2 := open(t, c, b, b.put("mid", data)).(*handle)
	defer h2.Close()
	for i := range int64(4) {
		if _, err := h2.ReadAt(context.Background(), buf, 64*MiB+i*MiB); err != nil {
			t.Fatal(err)
		}
	}
	h2.mu.Lock()
	defer h2.mu.Unlock()
	if h2.window != 2*o.MinWindow {
		t.Errorf("window %d after two reads from 64 MiB; want %d (doubling)", h2.window, 2*o.MinWindow)
	}
}

// TestFirstBlockNotQueuedBehindWindow: the requests of a whole-file read
// take the object's request permits in the order they were sent, so the
// first read's one-block request is among those in flight, not queued
// behind the window's 8 MiB requests sent just after it.
func TestFirstBlockNotQueuedBehindWindow(t *testing.T) {
	b := newFake("fake://a/")
	const size = 256 * MiB
	info := b.put("whole", randomData(22, size))
	gate := make(chan struct{})
	b.mu.Lock()
	b.gate = gate
	b.mu.Unlock()
	c := newTestCache(t, Options{Dir: t.TempDir(), MemoryBytes: 512 * MiB})
	h := open(t, c, b, info).(*handle)
	defer h.Close()
	// The kernel's first two reads, as they arrive: the second before the
	// first is answered.
	h.readahead(0, MiB)
	h.readahead(MiB, 2*MiB)
	perObject := int(c.opt.FileRequests)
	for len(b.readLog()) < perObject {
		runtime.Gosched()
	}
	rs := b.readLog()
	first := false
	for _, r := range rs {
		first = first || r.off == 0
	}
	close(gate)
	if len(rs) != perObject {
		t.Errorf("%d requests in flight; want the object's bound %d", len(rs), perObject)
	}
	if !first {
		t.Errorf("the first block's request is not among the %d in flight: %s", len(rs), describeReads(rs))
	}
	buf := make([]byte, MiB)
	if _, err := h.ReadAt(context.Background(), buf, 0); err != nil {
		t.Fatal(err)
	}
}
