package cache

import (
	"container/list"
	"sync"
)

// readyBuf is the front of the memory tier: blocks just fetched, held in
// arrival order until read, so that readahead is never lost to ristretto's
// admission policy (which rightly refuses blocks nobody has read yet). Past
// its limit the oldest blocks move on to ristretto, which may keep them.
type readyBuf struct {
	limit int64

	mu    sync.Mutex
	items map[string]*list.Element // GUARDED_BY(mu)
	order *list.List               // GUARDED_BY(mu): of *readyItem, oldest first
	bytes int64                    // GUARDED_BY(mu)
}

type readyItem struct {
	key  string
	data []byte
}

func newReadyBuf(limit int64) *readyBuf {
	return &readyBuf{limit: limit, items: map[string]*list.Element{}, order: list.New()}
}

// put adds a block and returns the blocks pushed out to make room.
func (r *readyBuf) put(key string, data []byte) (out []readyItem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.items[key]; ok {
		r.bytes -= int64(len(el.Value.(*readyItem).data))
		r.order.Remove(el)
	}
	r.items[key] = r.order.PushBack(&readyItem{key: key, data: data})
	r.bytes += int64(len(data))
	for r.bytes > r.limit {
		el := r.order.Front()
		it := el.Value.(*readyItem)
		r.order.Remove(el)
		delete(r.items, it.key)
		r.bytes -= int64(len(it.data))
		out = append(out, *it)
	}
	return out
}

func (r *readyBuf) get(key string) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.items[key]; ok {
		return el.Value.(*readyItem).data, true
	}
	return nil, false
}

// take removes a block (it has been read to its end).
func (r *readyBuf) take(key string) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.items[key]
	if !ok {
		return nil, false
	}
	it := el.Value.(*readyItem)
	r.order.Remove(el)
	delete(r.items, key)
	r.bytes -= int64(len(it.data))
	return it.data, true
}

// size is the bytes held.
func (r *readyBuf) size() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// clear drops everything (Close).
func (r *readyBuf) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = map[string]*list.Element{}
	r.order.Init()
	r.bytes = 0
}
