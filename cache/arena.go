package cache

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Block buffers come from a fixed arena, allocated and touched once when the
// cache opens and recycled for ever after: a fresh page costs a page fault
// on first touch (measured on a cold 512 MiB read with a fresh heap block
// per fetch: 133,000 minor faults and 6 CPU-seconds per GiB), and a
// recycled one costs nothing. Only when every arena block is in use does a
// block come from the heap (counted in Stats.HeapBlocks).
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

// block is one buffer of the arena (or of the heap, when arena is nil).
type block struct {
	buf   []byte // BlockSize long
	arena *arena
	state atomic.Uint64 // generation<<refBits | references
	n     int           // bytes of buf in use; set before the block is shared
}

// blockRef is a reference to one generation of a block. The zero value
// refers to nothing.
type blockRef struct {
	b   *block
	gen uint64
}

// data is the block's bytes; the caller holds a reference.
func (r blockRef) data() []byte { return r.b.buf[:r.b.n] }

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

// arena is a fixed set of blocks.
type arena struct {
	blockSize int
	heap      atomic.Int64 // blocks allocated on the heap: the arena was empty

	mu   sync.Mutex
	free []*block // GUARDED_BY(mu)
}

// newArena allocates n blocks in one allocation and, when prefault, has the
// kernel back every page now (MADV_POPULATE_WRITE, else a write per page).
func newArena(n int, blockSize int64, prefault bool) *arena {
	a := &arena{blockSize: int(blockSize), free: make([]*block, 0, n)}
	mem := make([]byte, n*int(blockSize)) // page-aligned: a large allocation
	if prefault && len(mem) > 0 {
		if err := unix.Madvise(mem, unix.MADV_POPULATE_WRITE); err != nil {
			for i := 0; i < len(mem); i += 4096 {
				mem[i] = 0
			}
		}
	}
	for i := range n {
		off := i * int(blockSize)
		a.free = append(a.free, &block{buf: mem[off : off+int(blockSize) : off+int(blockSize)], arena: a})
	}
	return a
}

// get returns a block of n bytes (n <= blockSize) holding one reference.
func (a *arena) get(n int) blockRef {
	a.mu.Lock()
	var b *block
	if k := len(a.free); k > 0 {
		b = a.free[k-1]
		a.free = a.free[:k-1]
	}
	a.mu.Unlock()
	if b == nil {
		a.heap.Add(1)
		b = &block{buf: make([]byte, a.blockSize)}
	}
	b.n = n
	// Nobody holds a reference (tryRef fails on a count of 0), so the
	// new generation can be stored outright.
	gen := b.state.Load()>>refBits + 1
	b.state.Store(gen<<refBits | 1)
	return blockRef{b: b, gen: gen}
}

func (a *arena) put(b *block) {
	a.mu.Lock()
	a.free = append(a.free, b)
	a.mu.Unlock()
}

// available is the number of free blocks (tests).
func (a *arena) available() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.free)
}
