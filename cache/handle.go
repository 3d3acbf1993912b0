package cache

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// handle is one open object. It implements Handle and, for a file
// complete on disk at open, PassthroughFd.
type handle struct {
	c   *Cache
	e   *entry
	src source
	// ptFd is the complete file's fd (the entry's, open while we hold our
	// pin), offered for passthrough; -1 otherwise.
	ptFd int
	// authorized: the store authorized src's principal for this version
	// (authz.go), so reads need not look again.
	authorized atomic.Bool

	mu     sync.Mutex
	next   int64 // GUARDED_BY(mu): where a sequential stream reads next
	window int64 // GUARDED_BY(mu): readahead window; 0 = random access
	ahead  int64 // GUARDED_BY(mu): readahead has been sent for blocks below this
	misses int   // GUARDED_BY(mu): reads in a row outside the stream
	// fromStart: the stream began with a read at offset 0 (a whole-file
	// read), so its window jumps to the maximum once it is established.
	fromStart bool // GUARDED_BY(mu)
	closed    bool // GUARDED_BY(mu)
}

// OffersPassthrough reports whether PassthroughFd would offer a file,
// without counting an offer: a caller that may not take it asks first.
func (h *handle) OffersPassthrough() bool { return h.ptFd >= 0 }

// PassthroughFd offers the kernel the complete cache file, so reads of it
// never enter the daemon. The fd stays open until Close.
func (h *handle) PassthroughFd() (int, bool) {
	if h.ptFd < 0 {
		return -1, false
	}
	h.c.stats.passthroughOpens.Add(1)
	h.c.account(h.src.view, tierPassthrough, h.e.size)
	return h.ptFd, true
}

// ReadAt implements Handle.
func (h *handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n := 0
	err := h.read(ctx, p, off, func(v []byte, r blockRef) {
		if &v[0] != &p[n] { // a block in memory, not read into p already
			copy(p[n:], v)
		}
		n += len(v)
		r.unref()
	})
	return n, err
}

// ReadSlices implements SliceReader: blocks in memory are answered with
// slices of themselves, so the FUSE reply is written from them without a
// copy; what comes from disk is read into p. The blocks stay referenced
// (never recycled, never modified) until release is called.
func (h *handle) ReadSlices(ctx context.Context, p []byte, off int64) ([][]byte, func(), error) {
	var vecs [][]byte
	var refs []blockRef
	err := h.read(ctx, p, off, func(v []byte, r blockRef) {
		vecs = append(vecs, v)
		if r.valid() {
			refs = append(refs, r)
		}
	})
	release := func() {
		for _, r := range refs {
			r.unref()
		}
		refs = nil
	}
	return vecs, release, err
}

// read reads len(p) bytes at off, block by block, handing each piece to
// emit in order: a slice of a block in memory, with a reference to the
// block that emit must drop when done with it, or the part of p it was read
// into (and a zero blockRef). It ends with io.EOF where the object ends.
func (h *handle) read(ctx context.Context, p []byte, off int64, emit func([]byte, blockRef)) error {
	h.c.stats.reads.Add(1)
	size := h.e.size
	if off < 0 {
		return fmt.Errorf("read at negative offset %d", off)
	}
	if off >= size {
		return io.EOF
	}
	end := min(off+int64(len(p)), size)
	h.readahead(off, end)
	bs := h.c.opt.BlockSize
	n := 0
	for pos := off; pos < end; {
		bi := pos / bs
		boff := pos - bi*bs
		lim := min(end-pos, bs-boff)
		v, r, t, err := h.readBlock(ctx, bi, p[n:n+int(lim)], boff)
		if len(v) > 0 && !h.authorized.Load() {
			// After the block is in: when this handle's own fetch
			// brought it, that fetch authorized it and costs no more.
			if aerr := h.authorize(ctx); aerr != nil {
				if r.valid() {
					r.unref()
				} else {
					clear(v) // read from disk into p: none of it goes out
				}
				return aerr
			}
		}
		if len(v) > 0 {
			h.c.account(h.src.view, t, int64(len(v)))
			emit(v, r)
		} else {
			r.unref()
		}
		n += len(v)
		pos += int64(len(v))
		if err != nil {
			return err
		}
	}
	if n < len(p) {
		return io.EOF
	}
	return nil
}

// streamSlack is how far behind a stream's end a read may land and still be
// part of it: twice the input mounts' kernel readahead (fs.inputReadAheadKB).
const streamSlack = 32 * MiB

// readahead classifies the read as sequential (close to where the last one
// ended) or random, grows or resets the window, and starts the fetches the
// read and its window need.
func (h *handle) readahead(off, end int64) {
	o := &h.c.opt
	// The kernel's asynchronous readahead sends several reads at once (up
	// to its readahead, 16 MiB on input mounts, past the reader), which
	// arrive out of order, ahead of and behind where the stream is: a
	// stream tolerates that much, and its window's worth. (A tolerance of
	// 8 MiB counted 17..21 random reads in a plain dd of 512 MiB and
	// refetched 18 MB.)
	// So a read belongs to the stream when it lands near the stream's end,
	// or, once the stream is established (three sequential reads in a
	// row grew its window), anywhere from a little behind its end to where
	// its readahead has been sent. Random reads hardly ever land near
	// three times in a row, so only the first test applies to them.
	h.mu.Lock()
	tol := max(8*o.BlockSize, 8*MiB)
	near := off <= h.next+tol && off+tol >= h.next
	inWindow := h.window >= 4*o.MinWindow && off+streamSlack >= h.next && off <= max(h.ahead*o.BlockSize, h.next)+tol
	if near || inWindow {
		h.misses = 0
		if h.window == 0 {
			h.c.streams.Add(1)
			h.fromStart = off == 0
		}
		h.window = min(max(2*h.window, o.MinWindow), o.MaxWindow)
		h.next = max(h.next, end)
		if h.fromStart && h.next >= 2*o.BlockSize {
			// Two blocks read from offset 0 on: a whole-file read. Its
			// window goes to the maximum now. The kernel sends only two
			// reads before the first is answered (a time to first byte
			// later), so doubling per read kept 4 one-block requests in
			// flight for that long, where the ideal reader has 16 full
			// ones, and then ramped through small requests that each
			// paid a time to first byte. The first read stays small.
			h.window = o.MaxWindow
		}
	} else {
		h.c.stats.randomReads.Add(1)
		// One stray read (a header, an index at the end) does not end a
		// stream; two in a row do.
		h.misses++
		if h.misses >= 2 {
			if h.window > 0 {
				h.c.streams.Add(-1)
			}
			h.window, h.ahead, h.next, h.fromStart = 0, 0, end, false
		}
		h.mu.Unlock()
		bs := o.BlockSize
		h.e.ensure(h.src, off/bs, (end-1)/bs, 1, false)
		return
	}
	win := h.streamWindow()
	h.mu.Unlock()

	bs := o.BlockSize
	first, last := off/bs, (end-1)/bs
	// Small requests while the window is small (a low time to first byte),
	// larger ones as it grows (fewer round trips). New requests are only
	// sent a whole request at a time, so the window's edge creeping forward
	// by one kernel read does not become a stream of one-block requests.
	req := min(max(win/4, bs), o.MaxRequestBytes) / bs
	edge := min((end-1+win)/bs, h.e.nblocks-1)
	h.mu.Lock()
	from := max(h.ahead, first)
	issue := edge-from+1 >= req || edge == h.e.nblocks-1 && from <= edge
	if issue && edge < h.e.nblocks-1 {
		// Whole requests only: the rest of the window goes with the next
		// read, in a full request, rather than now as a short one that
		// pays a time to first byte for a block or two.
		edge = from + (edge-from+1)/req*req - 1
	}
	if issue {
		h.ahead = edge + 1
	}
	h.mu.Unlock()
	// The blocks this read needs come first, whatever the window does.
	h.e.ensure(h.src, first, last, req, true)
	if issue {
		h.e.ensure(h.src, from, edge, req, true)
	}
}

// streamWindow is the window's share of the memory: streams read at once
// share it, so that their windows (fetched and not yet read) fit in it
// twice over rather than evict each other's blocks before they are read.
// Measured with cachebench --only big4 (4 x 256 MiB read at once, busy
// machine, medians of 3): MaxWindow 128 MiB each in --cache-memory 512MiB
// reached 0.33-0.44 of the ideal reader at 0.95-1.05 daemon CPU-s per GiB,
// 0.54 with 1 GiB of memory; shared, 0.40 and 0.52 against 0.38 and 0.35
// in the same sessions, at 0.78-0.83 CPU-s per GiB. Never below 4
// requests' worth, so each stream keeps some requests in flight.
// One stream alone keeps MaxWindow as long as memory holds it twice.
func (h *handle) streamWindow() int64 {
	o := &h.c.opt
	share := o.MemoryBytes / (2 * max(h.c.streams.Load(), 1))
	return min(h.window, max(share, 4*o.MaxRequestBytes))
}

// readBlock returns len(p) bytes (p is no longer than what the block holds
// from boff) of block bi from offset boff: a slice of the block when it is
// in memory or arrives by a fetch, with a reference to the block for the
// caller to drop, else p filled from disk (and a zero blockRef).
func (h *handle) readBlock(ctx context.Context, bi int64, p []byte, boff int64) ([]byte, blockRef, tier, error) {
	c, e := h.c, h.e
	end := boff + int64(len(p))
	for attempt := 0; attempt < 16; attempt++ {
		key := c.blockKey(e.id, bi)
		if r, ok := c.memGet(key); ok {
			data := r.data()
			if int64(len(data)) == e.blockLen(bi) {
				c.stats.memoryHits.Add(1)
				h.consumed(bi, key, end-boff, int64(len(data)))
				return data[boff:end], r, tierMemory, nil
			}
			r.unref()
		}
		e.mu.Lock()
		if (e.complete || e.present.has(bi)) && e.file != nil {
			file := e.file
			e.mu.Unlock()
			// The file stays open: we hold a pin.
			n, err := file.ReadAt(p, bi*c.opt.BlockSize+boff)
			if err == io.EOF && n == len(p) {
				err = nil
			}
			if err != nil {
				return p[:n], blockRef{}, tierDisk, fmt.Errorf("cache file %s: %w", e.id, err)
			}
			c.stats.diskHits.Add(1)
			h.consumed(bi, key, end-boff, e.blockLen(bi))
			return p, blockRef{}, tierDisk, nil
		}
		if w, ok := e.writing[bi]; ok {
			// The write queue's reference cannot go while we hold e.mu.
			r := w.ref()
			e.mu.Unlock()
			c.stats.memoryHits.Add(1)
			h.consumed(bi, key, end-boff, e.blockLen(bi))
			return r.data()[boff:end], r, tierMemory, nil
		}
		f := e.inflight[bi]
		e.mu.Unlock()
		if f == nil {
			// Neither kept nor in flight (the memory tier dropped it, the
			// disk tier had no room, or its fetch failed): fetch this
			// block alone, and wait for that fetch (its error is ours).
			fs := e.ensure(h.src, bi, bi, 1, false)
			if len(fs) == 0 {
				continue // someone else is fetching it, or it just arrived
			}
			f = fs[0]
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, blockRef{}, tierFetch, ctx.Err()
		}
		if f.err != nil {
			return nil, blockRef{}, tierFetch, f.err
		}
		if !f.data.tryRef() {
			continue // recycled before we got to it: look again
		}
		c.stats.fetchWaits.Add(1)
		h.consumed(bi, key, end-boff, e.blockLen(bi))
		return f.data.data()[boff:end], f.data, tierFetch, nil
	}
	return nil, blockRef{}, tierFetch, fmt.Errorf("cache: block %d of %s could not be kept long enough to read", bi, e.id)
}

// consumed counts n bytes of block bi read, however they were served: once
// its bytes have all been read it leaves the ready buffer for the ristretto
// tier, which keeps it if it is worth keeping. A block whose disk write was
// skipped when it arrived (the write queue was full: a whole window of
// requests delivers at once) is queued for the disk now, if there is room:
// ristretto may refuse it, and the background completion of the disk copy
// would fetch it again.
func (h *handle) consumed(bi int64, key string, n, full int64) {
	c, e := h.c, h.e
	d, ok := c.ready.consume(key, n, full)
	if !ok {
		return
	}
	e.mu.Lock()
	_, writing := e.writing[bi]
	write := e.file != nil && !e.whole && !e.complete && !writing && !e.present.has(bi) &&
		c.writeQueue.TryAcquire(d.cost())
	var wq blockRef
	if write {
		wq = d.ref() // the write queue's, shared with e.writing as finishBlock does
		e.writing[bi] = wq
	}
	e.mu.Unlock()
	if write {
		c.stats.writtenFromMemory.Add(1)
		e.queueWrite(bi, []blockRef{wq}, h.src)
	}
	c.memSet(key, d)
}

// Close implements Handle: it unpins the entry (so it may be evicted
// again), or hands the pin to a background completion of the disk copy.
func (h *handle) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	if h.window > 0 {
		h.c.streams.Add(-1)
	}
	h.mu.Unlock()
	h.e.readers.Add(-1)
	h.e.mu.Lock()
	complete := h.e.complete
	h.e.mu.Unlock()
	h.mu.Lock()
	readToEnd := h.next >= h.e.size && h.window > 0
	h.mu.Unlock()
	if readToEnd && !complete && h.c.opt.Dir != "" {
		// Read through to the end but not all on disk: complete it in the
		// background (our pin passes to that work).
		h.c.completeLater(h.e, h.src)
	} else {
		h.c.release(h.e)
	}
	return nil
}

// emptyHandle reads an empty object; there is nothing to cache.
type emptyHandle struct{}

func (emptyHandle) ReadAt(context.Context, []byte, int64) (int, error) { return 0, io.EOF }
func (emptyHandle) Close() error                                       { return nil }
