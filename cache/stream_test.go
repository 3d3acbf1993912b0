package cache

import (
	"bytes"
	"context"
	"math/rand/v2"
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
		t.Errorf("fetched %d bytes for a %d-byte object: every byte must be fetched once", f, size)
	}
}
