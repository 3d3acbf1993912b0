package cache

import (
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// errClosed fails reads that need a fetch after Close.
var errClosed = errors.New("cache is closed")

// flushEvery is how many newly written blocks trigger a background record of
// the presence bitmap, so a crash loses little of what was fetched.
const flushEvery = 64

// entry is one (backend, key, version) in the cache.
type entry struct {
	c       *Cache
	id      string
	size    int64
	nblocks int64
	sem     *semaphore.Weighted // backend requests in flight for this object
	// readers counts the open handles of this object (over all views):
	// with more than one, a fetched block is kept for the disk tier even
	// when the write queue is full (see finishBlock).
	readers atomic.Int32

	// GUARDED_BY(c.mu):
	// dataset is the backend ID of the object ("" while unknown: loaded
	// from disk without an index line, and not opened since).
	dataset    string
	pins       int
	superseded bool          // another version of the key was opened since
	kept       bool          // unpinned with its complete file left open (Cache.keptOpen)
	keptSeq    uint64        // the release that kept it open
	opened     chan struct{} // closed once the first pinner opened the files
	diskBytes  int64
	atime      time.Time // last pinned or released: the eviction order
	// lruPrev and lruNext link the entry into Cache.lru while unpinned.
	lruPrev, lruNext *entry

	flushMu sync.Mutex // serialises bitmap records and the final rename

	mu          sync.Mutex
	file        *os.File              // GUARDED_BY(mu): open while pinned, when there is a disk tier
	direct      *os.File              // GUARDED_BY(mu): the .part opened O_DIRECT for writes, or nil
	complete    bool                  // GUARDED_BY(mu): every block is in the complete file
	present     bitmap                // GUARDED_BY(mu): blocks in .part (nil when complete)
	npresent    int64                 // GUARDED_BY(mu)
	inflight    map[int64]*blockFetch // GUARDED_BY(mu): the single flight of each block
	writing     map[int64]blockRef    // GUARDED_BY(mu): blocks queued for the disk tier, each with a reference
	dirty       int                   // GUARDED_BY(mu): blocks marked since the last bitmap record
	metaWritten bool                  // GUARDED_BY(mu): a .meta file may exist
	flushing    bool                  // GUARDED_BY(mu): a background record is running
	// whole: a one-block object with no disk file yet, written whole
	// (writeWhole) rather than into a .part. GUARDED_BY(mu)
	whole bool
	// authz lists the principals the store authorized for this version
	// (authz.go); almost always one. GUARDED_BY(mu)
	authz []string
}

// source is what a fetch needs to read an object: the handle supplies it,
// because entries loaded from disk know no backend until opened.
type source struct {
	b       backends.Backend
	key     string
	version string
	// view is the mount whose read or open started the fetch (nil for
	// Cache.Open): its BackendBytes count what the fetch reads.
	view *View
	// warm marks fetches nobody waits for yet: they may use free room in
	// the disk tier but never evict for it.
	warm bool
	// background marks fetches whose point is the disk tier (completing a
	// file): their blocks wait for room in the write queue instead of
	// skipping the disk when it is busy.
	background bool
	// slotHeld: the caller took a request slot (Cache.total) for this
	// fetch already, which the first request ensure starts takes over (and
	// ensure gives back when it starts none). Warming takes its slot
	// before it marks a file in flight, so a reader never waits for a
	// fetch still queued behind other prefetches.
	slotHeld bool
	// diskOnly: the fetch is for the disk tier alone (a warm-up, with
	// background set): its blocks are not kept in the memory tier, where
	// a warm-up of a large dataset would push out the blocks readers
	// fetched ahead and have yet to read.
	diskOnly bool
}

// blockFetch is one block being fetched; readers wait on done, then take
// a reference to data with tryRef (the fetch holds none once done: when
// the block is recycled before a waiter gets to it, the waiter looks
// again), or see err. It is the single flight of that block.
type blockFetch struct {
	done chan struct{}
	data blockRef
	err  error
}

func (c *Cache) newEntry(id string, size int64) *entry {
	n := (size + c.opt.BlockSize - 1) / c.opt.BlockSize
	return &entry{
		c:        c,
		id:       id,
		size:     size,
		nblocks:  n,
		sem:      semaphore.NewWeighted(int64(c.opt.FileRequests)),
		present:  newBitmap(n),
		inflight: map[int64]*blockFetch{},
		writing:  map[int64]blockRef{},
	}
}

func (e *entry) blockLen(i int64) int64 {
	bs := e.c.opt.BlockSize
	return min(bs, e.size-i*bs)
}

func (e *entry) dirtyBlocks() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dirty
}

// ensure starts fetches for the blocks in [first, last] that are neither on
// disk, nor in flight, nor (when checkMem) in memory, in ranged reads of at
// most reqBlocks blocks. It returns the fetches it started. The caller holds
// a pin.
func (e *entry) ensure(src source, first, last, reqBlocks int64, checkMem bool) []*blockFetch {
	last = min(last, e.nblocks-1)
	type run struct {
		first   int64
		fetches []*blockFetch
	}
	var runs []run
	var started []*blockFetch
	e.mu.Lock()
	if e.complete {
		e.mu.Unlock()
		if src.slotHeld {
			e.c.total.release()
		}
		return nil
	}
	for i := first; i <= last; i++ {
		_, writing := e.writing[i]
		skip := e.present.has(i) || e.inflight[i] != nil || writing
		if !skip && checkMem {
			skip = e.c.memHas(e.c.blockKey(e.id, i))
		}
		if skip {
			continue
		}
		f := &blockFetch{done: make(chan struct{})}
		e.inflight[i] = f
		started = append(started, f)
		if n := len(runs); n > 0 && runs[n-1].first+int64(len(runs[n-1].fetches)) == i &&
			int64(len(runs[n-1].fetches)) < reqBlocks {
			runs[n-1].fetches = append(runs[n-1].fetches, f)
		} else {
			runs = append(runs, run{first: i, fetches: []*blockFetch{f}})
		}
	}
	e.mu.Unlock()
	if src.slotHeld && len(runs) == 0 {
		e.c.total.release()
	}
	for _, r := range runs {
		e.startFetch(src, r.first, r.fetches)
		src.slotHeld = false
	}
	return started
}

// startFetch reads blocks first.. (one per fetch) in one ranged read, in the
// background, under the per-object and cache-wide request bounds.
func (e *entry) startFetch(src source, first int64, fetches []*blockFetch) {
	c := e.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		if src.slotHeld {
			c.total.release()
		}
		for i, f := range fetches {
			e.finishBlock(first+int64(i), f, blockRef{}, errClosed, src, nil)
		}
		return
	}
	c.pinLocked(e)
	c.wg.Add(1)
	c.mu.Unlock()
	// Take the object's request permit here when one is free, so requests
	// take them in the order they were sent: taken in the goroutines, the
	// first read's one-block request of a whole-file read waited behind a
	// window of 8 MiB requests sent just after it (its read was answered
	// after 166 ms instead of 40).
	sem := e.sem.TryAcquire(1)
	go func() {
		defer c.wg.Done()
		defer c.release(e)
		var err error
		if !sem {
			err = e.sem.Acquire(c.ctx, 1)
		}
		if err == nil && !src.slotHeld {
			err = c.total.acquire(c.ctx, src.warm)
			if err != nil {
				e.sem.Release(1)
			}
		} else if err != nil && src.slotHeld {
			c.total.release()
		}
		if err != nil {
			for i, f := range fetches {
				e.finishBlock(first+int64(i), f, blockRef{}, err, src, nil)
			}
			return
		}
		e.fetch(src, first, fetches)
		c.total.release()
		e.sem.Release(1)
	}()
}

func (e *entry) fetch(src source, first int64, fetches []*blockFetch) {
	c := e.c
	bs := c.opt.BlockSize
	off := first * bs
	length := min(int64(len(fetches))*bs, e.size-off)
	c.stats.backendRequests.Add(1)
	r, err := src.b.Read(c.ctx, src.key, backends.ReadOptions{Offset: off, Length: length, IfVersion: src.version})
	if r != nil {
		defer r.Close()
	}
	// Consecutive blocks queued for the disk tier are written together
	// (writeBlocks), a run at a time.
	var run []blockRef
	runFirst := int64(0)
	flushRun := func() {
		if len(run) > 0 {
			e.queueWrite(runFirst, run, src)
			run = nil
		}
	}
	defer flushRun()
	for i, f := range fetches {
		bi := first + int64(i)
		var buf blockRef
		if err == nil {
			buf = c.arena.get(int(e.blockLen(bi)))
			buf.b.key, buf.b.dataset = c.blockKey(e.id, bi), src.b.ID()
			var n int
			n, err = io.ReadFull(r, buf.data())
			c.stats.backendBytes.Add(int64(n))
			if src.view != nil {
				src.view.bytes.backend.Add(int64(n))
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				// Shorter than its listing said: it changed under us.
				err = backends.Wrap("read", src.key, backends.ErrVersionMismatch, err)
			}
			if err == nil && i == 0 {
				// The store served this principal that version: it may
				// be served what is cached of it. Recorded before the
				// block is published, so its readers need not ask.
				e.authorize(src.principal())
			}
		}
		if err != nil {
			buf.unref()
			e.finishBlock(bi, f, blockRef{}, err, src, nil)
			continue
		}
		if wq, ok := e.finishBlock(bi, f, buf, nil, src, flushRun); ok {
			if len(run) > 0 && runFirst+int64(len(run)) != bi {
				flushRun()
			}
			if len(run) == 0 {
				runFirst = bi
			}
			run = append(run, wq)
			if len(run) >= maxWriteRun {
				flushRun()
			}
		} else {
			flushRun()
		}
	}
}

// finishBlock publishes a fetched block: it wakes the readers waiting for
// it, keeps it in memory until read, and takes it into the write queue for
// the disk tier: ok reports that it did, and wq is then the write queue's
// reference, for the caller to pass to queueWrite. The disk write happens
// behind the reader: a slow or busy disk never slows a fetch; when the
// write queue is full the block is simply not kept on disk. It consumes
// the fetch's reference to buf. Before it waits for room in the write
// queue it calls flushRun (when not nil), which must start writing the
// blocks its caller holds back in the queue: they are what frees room.
func (e *entry) finishBlock(bi int64, f *blockFetch, buf blockRef, err error, src source, flushRun func()) (wq blockRef, ok bool) {
	c := e.c
	if err != nil {
		e.mu.Lock()
		delete(e.inflight, bi)
		f.err = err
		close(f.done)
		e.mu.Unlock()
		return blockRef{}, false
	}
	defer buf.unref()
	keep := !src.diskOnly
	if !keep {
		e.mu.Lock()
		keep = e.file == nil && !e.whole // no disk tier for it: memory it is
		e.mu.Unlock()
	}
	if keep {
		c.keepInMemory(buf.b.key, buf.ref()) // c.blockKey(e.id, bi), set by fetch
	}
	n := buf.cost() // the write queue bounds the memory its blocks hold
	held := false
	if src.background {
		// Wait for room rather than skip the disk; a run held back
		// goes first, or the wait might be for itself.
		if held = c.writeQueue.TryAcquire(n); !held {
			if flushRun != nil {
				flushRun()
			}
			held = c.writeQueue.Acquire(c.ctx, n) == nil
		}
	}
	e.mu.Lock()
	queue, wait := false, false
	if (e.file != nil || e.whole) && !e.complete {
		switch {
		case held || c.writeQueue.TryAcquire(n):
			queue = true
		case e.readers.Load() > 1:
			// Another reader of this object (another job's mount, or
			// another worker) may be behind this one: dropping the
			// block would fetch it again for that reader. Keep it
			// (readers find it among the blocks being written) and wait
			// for room once the readers waiting now have it. The wait
			// holds this fetch's request permits, so a shared object is
			// fetched no faster than the disk takes it. (Measured: 4 jobs
			// reading one 1 GiB dataset cold made the store send 1.35 GiB
			// with dropped blocks.)
			queue, wait = true, true
		}
	}
	if queue {
		e.writing[bi] = buf.ref()
	}
	delete(e.inflight, bi)
	f.data = buf
	close(f.done)
	e.mu.Unlock()
	if !queue {
		if held {
			c.writeQueue.Release(n)
		}
		return blockRef{}, false
	}
	if wait && flushRun != nil {
		flushRun()
	}
	if wait && c.writeQueue.Acquire(c.ctx, n) != nil {
		e.mu.Lock()
		delete(e.writing, bi)
		e.mu.Unlock()
		buf.unref() // the write queue's
		return blockRef{}, false
	}
	return buf, true
}

// maxWriteRun is the most blocks written to the disk tier in one write.
// Measured (daemon CPU over a cold 512 MiB dd and the file's completion,
// perf stat, busy machine, medians of 3): a write per block 367 ms and
// 5,700 context switches; runs of 4 blocks 340 ms and 3,750; runs of 8
// held so many blocks in the write queue that it skipped 20 MB of them.
const maxWriteRun = 4

// queueWrite writes consecutive blocks first.. (each with the write queue's
// reference and room in it, from finishBlock) to the disk tier in the
// background, in one write.
func (e *entry) queueWrite(first int64, refs []blockRef, src source) {
	c := e.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		e.mu.Lock()
		for i := range refs {
			delete(e.writing, first+int64(i))
		}
		e.mu.Unlock()
		for _, r := range refs {
			n := r.cost()
			r.unref() // the write queue's
			c.writeQueue.Release(n)
		}
		return
	}
	c.pinLocked(e)
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer c.release(e)
		var n int64
		for _, r := range refs {
			n += r.cost()
		}
		e.writeBlocks(first, refs, !src.warm)
		c.writeQueue.Release(n)
	}()
}

// writeBlock stores a block in the disk tier (when the bounds allow) and
// marks it present, then drops the write queue's reference to it; the
// caller holds a pin.
func (e *entry) writeBlock(bi int64, ref blockRef, mayEvict bool) {
	e.writeBlocks(bi, []blockRef{ref}, mayEvict)
}

// writeBlocks stores consecutive blocks first.. in the disk tier (when the
// bounds allow) and marks them present, then drops the write queue's
// references to them; the caller holds a pin. Whole blocks of a file opened
// O_DIRECT go in one pwritev: per write, O_DIRECT pays a syscall that
// blocks its thread until the device is done, a device request and an
// exclusive inode lock (see maxWriteRun).
func (e *entry) writeBlocks(first int64, refs []blockRef, mayEvict bool) {
	c := e.c
	e.mu.Lock()
	file, direct, whole := e.file, e.direct, e.whole
	e.mu.Unlock()
	if whole {
		// A one-block object: never a run of more.
		e.writeWhole(refs[0], mayEvict)
		return
	}
	bufs := make([][]byte, len(refs))
	var n int64
	aligned := 0 // the leading blocks that can go O_DIRECT
	for i, r := range refs {
		bufs[i] = r.data()
		n += int64(len(bufs[i]))
		if direct != nil && aligned == i && directOK(bufs[i]) {
			aligned++
		}
	}
	off := first * c.opt.BlockSize
	wrote := false
	if c.reserve(e, n, mayEvict) {
		var err error
		if aligned > 0 {
			err = c.writeDirect(direct, bufs[:aligned], off)
		}
		for i := aligned; i < len(bufs) && err == nil; i++ {
			// The short last block of an object, or no O_DIRECT.
			_, err = file.WriteAt(bufs[i], off+int64(i)*c.opt.BlockSize)
		}
		if err != nil {
			c.unreserve(e, n)
			c.log.Warn("cache: writing blocks", "id", e.id, "first", first, "blocks", len(refs), "err", err)
		} else {
			wrote = true
		}
	}
	e.mu.Lock()
	for i, r := range refs {
		bi := first + int64(i)
		delete(e.writing, bi)
		r.unref()
		if wrote && !e.complete && !e.present.has(bi) {
			e.present.set(bi)
			e.npresent++
			e.dirty++
		}
	}
	full := !e.complete && e.npresent == e.nblocks
	flush := !full && e.dirty >= flushEvery && !e.flushing
	if flush {
		e.flushing = true
	}
	e.mu.Unlock()
	if full {
		e.maybeComplete()
	}
	if flush {
		if err := e.flush(); err != nil {
			c.log.Warn("cache: recording cached blocks", "id", e.id, "err", err)
		}
		e.mu.Lock()
		e.flushing = false
		e.mu.Unlock()
	}
}

// writeWhole stores a one-block object as its complete file in one go:
// written to <id>.tmp and renamed to <id>, without a .part, a .meta or an
// fdatasync (a cold epoch over 2,000 x 100 KiB files spent a quarter of
// the daemon's CPU creating, syncing and renaming parts). Such a file is
// durable only once the kernel writes it back: the disk tier's unsynced
// marker (see unsyncedName) makes a start after a reboot drop every
// one-block object rather than trust one torn by a crash. It then drops
// the write queue's reference; the caller holds a pin.
func (e *entry) writeWhole(ref blockRef, mayEvict bool) {
	c := e.c
	buf := ref.data()
	n := int64(len(buf))
	var f *os.File
	if c.reserve(e, n, mayEvict) {
		var err error
		if f, err = c.createWhole(e.id, buf); err != nil {
			c.unreserve(e, n)
			c.log.Warn("cache: writing object", "id", e.id, "err", err)
		}
	}
	e.mu.Lock()
	delete(e.writing, 0)
	ref.unref()
	if f != nil {
		e.whole = false
		e.file = f
		e.complete = true
		e.present = nil
		e.npresent = e.nblocks
	}
	e.mu.Unlock()
}

// pwritevFull writes bufs at off in f, in as many pwritev calls as it
// takes.
func pwritevFull(f *os.File, bufs [][]byte, off int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	bufs = slices.Clone(bufs)
	for len(bufs) > 0 && err == nil {
		var n int
		werr := rc.Write(func(fd uintptr) bool {
			// A regular file is never "not ready": retry EINTR here
			// (returning false would wait on the poller, which a
			// regular file is not in).
			for {
				if n, err = unix.Pwritev(int(fd), bufs, off); err != unix.EINTR {
					return true
				}
			}
		})
		if err == nil {
			err = werr
		}
		if err == nil && n == 0 {
			err = io.ErrShortWrite
		}
		off += int64(n)
		bufs = advanceBufs(bufs, n)
	}
	return err
}

// advanceBufs drops the first n bytes of bufs (which it may modify).
func advanceBufs(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		k := min(n, len(bufs[0]))
		bufs[0] = bufs[0][k:]
		n -= k
		if len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return bufs
}

// writeDirect writes bufs at off in f, opened O_DIRECT: through AIO when
// the cache has a context (see aioWriter), and what that did not write (a
// short write, no free slot) with pwritev.
func (c *Cache) writeDirect(f *os.File, bufs [][]byte, off int64) error {
	if c.aio != nil {
		n, err := c.aio.pwritev(int(f.Fd()), bufs, off)
		if err != nil && err != errAIOBusy {
			return err
		}
		bufs = advanceBufs(slices.Clone(bufs), n)
		off += int64(n)
		if len(bufs) == 0 {
			return nil
		}
	}
	return pwritevFull(f, bufs, off)
}

// directOK reports whether buf can be written with O_DIRECT: its address
// and length aligned to 4096 (Go places large allocations, such as our
// blocks, on page boundaries; the last block of an object is usually short).
func directOK(buf []byte) bool {
	return len(buf) > 0 && len(buf)%4096 == 0 && uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%4096 == 0
}

// flush records the presence bitmap: data first (fdatasync), then the
// bitmap (atomically), so it never claims a block that is not durable.
// The caller holds a pin.
func (e *entry) flush() error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	e.mu.Lock()
	if e.complete || e.dirty == 0 || e.file == nil {
		e.mu.Unlock()
		return nil
	}
	bm := append(bitmap(nil), e.present...)
	e.dirty = 0
	file := e.file
	e.mu.Unlock()
	if err := syscall.Fdatasync(int(file.Fd())); err != nil {
		return err
	}
	// FileSync: the bitmap is complete on disk before it replaces the old
	// one; a crash that loses the rename leaves the old bitmap, which
	// claims fewer blocks, never more.
	if err := atomicfile.Write(e.c.metaPath(e.id), encodeMeta(e.size, e.c.opt.BlockSize, bm), 0o600, atomicfile.FileSync); err != nil {
		return err
	}
	e.mu.Lock()
	e.metaWritten = true
	e.mu.Unlock()
	return nil
}

// maybeComplete turns a .part holding every block into the complete file,
// which later opens hand to the kernel for passthrough. The caller holds a
// pin.
func (e *entry) maybeComplete() {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	e.mu.Lock()
	if e.complete || e.npresent < e.nblocks || e.file == nil {
		e.mu.Unlock()
		return
	}
	file := e.file
	e.mu.Unlock()
	c := e.c
	err := syscall.Fdatasync(int(file.Fd()))
	if err == nil {
		err = os.Rename(c.partPath(e.id), c.completePath(e.id))
	}
	if err != nil {
		c.log.Warn("cache: completing file", "id", e.id, "err", err)
		return
	}
	e.mu.Lock()
	hadMeta := e.metaWritten
	e.mu.Unlock()
	if hadMeta {
		os.Remove(c.metaPath(e.id))
	}
	e.mu.Lock()
	e.complete = true
	e.present = nil
	e.dirty = 0
	e.mu.Unlock()
}
