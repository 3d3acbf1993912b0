package cache

import (
	"container/list"
	"sync"
)

// readyBuf is the front of the memory tier: blocks just fetched, held in
// arrival order until read, so that readahead is never lost to ristretto's
// admission policy (which rightly refuses blocks nobody has read yet). Past
// its limit the oldest blocks move on to ristretto, which may keep them.
// Every block in it holds one reference, which moves with it.
type readyBuf struct {
	limit int64

	mu    sync.Mutex
	items map[string]*list.Element // GUARDED_BY(mu)
	order *list.List               // GUARDED_BY(mu): of *readyItem, oldest first
	bytes int64                    // GUARDED_BY(mu)
}

type readyItem struct {
	key string
	r   blockRef
	// read counts the bytes of the block read so far: it leaves the
	// buffer once they add up to the whole block (see consume).
	read int64
}

func newReadyBuf(limit int64) *readyBuf {
	return &readyBuf{limit: limit, items: map[string]*list.Element{}, order: list.New()}
}

// put adds a block (with the caller's reference) and returns the blocks
// pushed out to make room, with theirs.
func (r *readyBuf) put(key string, ref blockRef) (out []readyItem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.items[key]; ok {
		old := el.Value.(*readyItem)
		r.bytes -= old.r.cost()
		r.order.Remove(el)
		out = append(out, *old)
	}
	r.items[key] = r.order.PushBack(&readyItem{key: key, r: ref})
	r.bytes += ref.cost()
	for r.bytes > r.limit {
		el := r.order.Front()
		it := el.Value.(*readyItem)
		r.order.Remove(el)
		delete(r.items, it.key)
		r.bytes -= it.r.cost()
		out = append(out, *it)
	}
	return out
}

// get returns the block with a new reference for the caller.
func (r *readyBuf) get(key string) (blockRef, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.items[key]; ok {
		return el.Value.(*readyItem).r.ref(), true
	}
	return blockRef{}, false
}

// has reports whether the block is here.
func (r *readyBuf) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.items[key]
	return ok
}

// consume counts n bytes of the block read; once the reads add up to its
// length (full) the block is removed and its reference passes to the
// caller. Not when a read reaches its end: the kernel's readahead sends the
// reads of one block in any order, and a block that left at its last bytes
// was gone (ristretto may refuse it, and applies a Set later) before the
// reads of its first bytes came, and was fetched again when the write
// queue had skipped the disk. Reads of the same bytes twice count twice
// and only make a block leave early, as before.
func (r *readyBuf) consume(key string, n, full int64) (blockRef, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.items[key]
	if !ok {
		return blockRef{}, false
	}
	it := el.Value.(*readyItem)
	it.read += n
	if it.read < full {
		return blockRef{}, false
	}
	r.order.Remove(el)
	delete(r.items, key)
	r.bytes -= it.r.cost()
	return it.r, true
}

// size is the memory held (what the blocks occupy in the arena).
func (r *readyBuf) size() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// clear drops everything (Close).
func (r *readyBuf) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for el := r.order.Front(); el != nil; el = el.Next() {
		el.Value.(*readyItem).r.unref()
	}
	r.items = map[string]*list.Element{}
	r.order.Init()
	r.bytes = 0
}

// each calls f for every block held, under the buffer's lock (f must not
// call back into it).
func (r *readyBuf) each(f func(key string, ref blockRef)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for el := r.order.Front(); el != nil; el = el.Next() {
		it := el.Value.(*readyItem)
		f(it.key, it.r)
	}
}

// remove drops the block of key, if held, and reports the memory it held.
func (r *readyBuf) remove(key string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.items[key]
	if !ok {
		return 0
	}
	it := el.Value.(*readyItem)
	r.order.Remove(el)
	delete(r.items, key)
	n := it.r.cost()
	r.bytes -= n
	it.r.unref()
	return n
}
