package cache

import (
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Block buffers come from a fixed arena, mapped when the cache opens, each
// block backed when first used and recycled for ever after: a fresh page
// costs a page fault on first touch (measured on a cold 512 MiB read with
// a fresh heap block per fetch: 133,000 minor faults and 6 CPU-seconds per
// GiB), and a recycled one costs nothing. Only when every arena block is in
// use does a block come from the heap (counted in Stats.HeapBlocks).
//
// A block is shared: the ready buffer, the ristretto tier, the disk write
// queue, a fetch and every reader using it (a FUSE reply written from it
// included) each hold a reference, and it returns to the arena when the
// last is dropped. Whoever finds a block in a shared place without holding
// a reference (a ristretto Get, a fetch's result) takes one with tryRef,
// which fails if the block was recycled meanwhile: the state word packs a
// generation with the count, and a recycled block has a new generation.

const (
	refBits = 24
	refMask = 1<<refBits - 1
)

// Objects smaller than a block (a dataset of 100 KiB images, the tail of
// every large object) take chunks, not whole blocks: a whole block is split
// into chunks of one power-of-two size (4 KiB up to half a block), handed
// out one by one, and becomes a whole block again when all its chunks are
// back. A 100 KiB object so occupies 128 KiB of the arena, not 1 MiB.
// (Measured before chunks: a cold epoch of 2,000 x 100 KiB files ran the
// 576-block arena dry and took 1.4 GB of fresh heap blocks, the garbage
// collector ~23% of the daemon's CPU and the RSS past its bound.) The
// memory tier counts what a block occupies (blockRef.cost), so what it
// holds fits in the arena.

// minChunk is the smallest chunk: a page, so chunks stay aligned for
// O_DIRECT writes.
const minChunk = 4096

// block is one buffer of the arena: a whole block or a chunk of one (or a
// buffer of the heap, when arena is nil).
type block struct {
	buf   []byte // its capacity is what it occupies
	arena *arena
	state atomic.Uint64 // generation<<refBits | references
	n     int           // bytes of buf in use; set before the block is shared
	// key and dataset name what the block holds (Cache.blockKey, and the
	// backend ID of its object), set with n: what `cache du` counts and
	// `cache clear` drops in the memory tier, whose keys ristretto does
	// not list.
	key, dataset string

	parent *block // the whole block a chunk was cut from; nil for a whole block

	// A whole block split into chunks, GUARDED_BY(arena.mu):
	chunks     []*block // its free chunks
	out        int      // chunks handed out
	class      int      // the chunk size class it is split into
	partialIdx int      // its index in arena.partial[class], -1 if not there
}

// blockRef is a reference to one generation of a block. The zero value
// refers to nothing.
type blockRef struct {
	b   *block
	gen uint64
}

// data is the block's bytes; the caller holds a reference.
func (r blockRef) data() []byte { return r.b.buf[:r.b.n] }

// cost is the memory the block occupies (its chunk or whole block), which
// the memory tier and the write queue count.
func (r blockRef) cost() int64 { return int64(cap(r.b.buf)) }

func (r blockRef) valid() bool { return r.b != nil }

// ref takes one more reference; the caller already holds one (or the place
// it found r in does, and cannot drop it meanwhile).
func (r blockRef) ref() blockRef {
	r.b.state.Add(1)
	return r
}

// tryRef takes a reference unless the block was released or recycled since
// r was taken.
func (r blockRef) tryRef() bool {
	for {
		s := r.b.state.Load()
		if s&refMask == 0 || s>>refBits != r.gen {
			return false
		}
		if r.b.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// unref drops a reference; the last one returns the block to its arena.
func (r blockRef) unref() {
	if r.b == nil {
		return
	}
	s := r.b.state.Add(^uint64(0))
	if s&refMask == 0 && r.b.arena != nil {
		r.b.arena.put(r.b)
	}
}

// arena is a fixed set of blocks, in memory of its own (mmap), outside the
// Go heap: the garbage collector neither scans it nor counts it against
// the heap's growth, so the heap's limit (node.go) bounds only the rest.
//
// Its pages are backed as blocks are first used, not when the cache opens:
// backing 4 GiB (of huge pages) up front held a mount's start for 90-128 s
// on a busy machine (issue 32), and kept an idle daemon at its memory
// bound. A block is backed whole (MADV_POPULATE_WRITE, one system call) by
// whoever first takes it, outside the lock, rather than by a trap per page
// as it is written; and a recycled block is always preferred to a fresh
// one, so the arena's resident memory grows only to the most that reads in
// flight and the memory tier have held at once.
type arena struct {
	blockSize int
	classes   int          // chunk size classes: minChunk<<k for k < classes
	heap      atomic.Int64 // blocks allocated on the heap: the arena was empty
	mem       []byte       // the mapping; blocks [fresh, n) were never handed out
	n         int          // blocks in mem
	populate  bool         // back a fresh block's pages when it is first taken

	mu      sync.Mutex
	free    []*block   // GUARDED_BY(mu): whole blocks, each used before
	partial [][]*block // GUARDED_BY(mu): by class, split blocks with a free chunk
	fresh   int        // GUARDED_BY(mu): index in mem of the first block never used
}

// newArena maps n blocks in one region, backing none of it yet; when
// populate, each block's pages are backed in one call when it is first
// taken (else they fault in as they are touched). The region is unmapped
// once the arena is garbage: every block points to the arena, and every
// user of a block's bytes holds a reference to the block.
func newArena(n int, blockSize int64, populate bool) *arena {
	a := &arena{blockSize: int(blockSize), free: make([]*block, 0, n), populate: populate}
	for minChunk<<a.classes < a.blockSize {
		a.classes++
	}
	a.partial = make([][]*block, a.classes)
	if n == 0 {
		return a
	}
	mem, err := unix.Mmap(-1, 0, n*int(blockSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		// No address space for a mapping: the heap will do (its pages
		// are backed as the garbage collector's allocator touches them).
		mem = make([]byte, n*int(blockSize))
		a.populate = false
	} else {
		runtime.AddCleanup(a, func(m []byte) { unix.Munmap(m) }, mem)
		// No MADV_HUGEPAGE. Huge pages saved the daemon a few percent of
		// CPU in a cold read (387-418 ms -> 360-378 ms per 512 MiB, when
		// the arena was backed up front), but a huge page is backed by
		// compacting memory (transparent_hugepage defrag "madvise"),
		// which on a busy host took 8-25 s per GiB: up front that held
		// the mount's start (issue 32), and on first use it stalls the
		// reads (measured with cachebench --only big, busy machine,
		// three runs each: 1.3-2.8 daemon CPU-seconds per cold GiB with
		// huge pages backed on first use, 0.8-0.9 with small pages).
	}
	a.mem, a.n = mem, n
	return a
}

// freshLocked takes the next block never used, or nil when every block
// was; the caller backs its pages (back) once the lock is released.
func (a *arena) freshLocked() *block {
	if a.fresh == a.n {
		return nil
	}
	off := a.fresh * a.blockSize
	a.fresh++
	return &block{buf: a.mem[off : off+a.blockSize : off+a.blockSize], arena: a, partialIdx: -1}
}

// wholeLocked takes a whole block, a recycled one before a fresh one; it
// returns the block, and the block again as fresh when its pages are still
// to be backed.
func (a *arena) wholeLocked() (b, fresh *block) {
	if m := len(a.free); m > 0 {
		b = a.free[m-1]
		a.free = a.free[:m-1]
		return b, nil
	}
	b = a.freshLocked()
	return b, b
}

// back has the kernel back a fresh block's pages in one call. Others may
// already be writing to the block's chunks: populating never changes a
// page that is already backed. Where the kernel lacks MADV_POPULATE_WRITE
// (before Linux 5.14) the pages fault in as they are first written.
func (a *arena) back(fresh *block) {
	if fresh == nil || !a.populate {
		return
	}
	unix.Madvise(fresh.buf[:cap(fresh.buf)], unix.MADV_POPULATE_WRITE)
}

// classOf is the chunk class for n bytes, or -1 when n needs a whole block.
func (a *arena) classOf(n int) int {
	for k := range a.classes {
		if n <= minChunk<<k {
			return k
		}
	}
	return -1
}

// get returns a block of n bytes (n <= blockSize) holding one reference:
// a chunk when n fits in half a block, else a whole block.
func (a *arena) get(n int) blockRef {
	k := a.classOf(n)
	a.mu.Lock()
	var b, fresh *block
	if k >= 0 {
		b, fresh = a.chunkLocked(k)
	} else {
		b, fresh = a.wholeLocked()
	}
	a.mu.Unlock()
	a.back(fresh)
	if b == nil {
		a.heap.Add(1)
		size := a.blockSize
		if k >= 0 {
			size = minChunk << k
		}
		b = &block{buf: make([]byte, size)}
	}
	b.n = n
	// Nobody holds a reference (tryRef fails on a count of 0), so the
	// new generation can be stored outright.
	gen := b.state.Load()>>refBits + 1
	b.state.Store(gen<<refBits | 1)
	return blockRef{b: b, gen: gen}
}

// chunkLocked takes a free chunk of class k, splitting a whole block when
// no split block has one; nil when the arena has neither. fresh is the
// block split, when its pages are still to be backed.
func (a *arena) chunkLocked(k int) (c, fresh *block) {
	ps := a.partial[k]
	var p *block
	if len(ps) > 0 {
		p = ps[len(ps)-1]
	} else {
		p, fresh = a.wholeLocked()
		if p == nil {
			return nil, nil
		}
		size := minChunk << k
		p.class = k
		p.chunks = make([]*block, 0, a.blockSize/size)
		for off := a.blockSize - size; off >= 0; off -= size {
			p.chunks = append(p.chunks, &block{buf: p.buf[off : off+size : off+size], arena: a, parent: p})
		}
		p.partialIdx = len(a.partial[k])
		a.partial[k] = append(a.partial[k], p)
	}
	c = p.chunks[len(p.chunks)-1]
	p.chunks = p.chunks[:len(p.chunks)-1]
	p.out++
	if len(p.chunks) == 0 {
		a.removePartialLocked(p)
	}
	return c, fresh
}

func (a *arena) removePartialLocked(p *block) {
	ps := a.partial[p.class]
	last := ps[len(ps)-1]
	ps[p.partialIdx] = last
	last.partialIdx = p.partialIdx
	a.partial[p.class] = ps[:len(ps)-1]
	p.partialIdx = -1
}

func (a *arena) put(b *block) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := b.parent
	if p == nil {
		a.free = append(a.free, b)
		return
	}
	p.chunks = append(p.chunks, b)
	p.out--
	if p.out == 0 {
		// Every chunk is back: whole again. (Chunks are cut anew at the
		// next split; a stale reference to one of these fails tryRef, its
		// count being 0 for good.)
		if p.partialIdx >= 0 {
			a.removePartialLocked(p)
		}
		p.chunks = nil
		a.free = append(a.free, p)
		return
	}
	if p.partialIdx < 0 {
		p.partialIdx = len(a.partial[p.class])
		a.partial[p.class] = append(a.partial[p.class], p)
	}
}

// available is the number of whole blocks free, used before or not (a
// split block is whole again once all its chunks are back) (tests).
func (a *arena) available() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.free) + a.n - a.fresh
}

// used is the number of blocks ever handed out: those whose pages are
// backed (tests, and the memory a daemon holds).
func (a *arena) used() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fresh
}
