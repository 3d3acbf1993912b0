package cache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// smallArenaCache is a cache whose arena is a dozen blocks, so that a few
// MiB of reads recycle every block many times.
func smallArenaCache(t *testing.T, dir string) *Cache {
	return newTestCache(t, Options{Dir: dir, MemoryBytes: 8 * MiB, TotalRequests: 4, FileRequests: 2,
		MinWindow: MiB, MaxWindow: 2 * MiB, MaxRequestBytes: 2 * MiB, SmallFileBytes: 1})
}

// TestHeldSlicesSurviveRecycling holds the slices of a read (as a FUSE
// reply not yet written does) while other reads churn every block of the
// arena: the held bytes must not change, and once released and the cache
// closed, every block is back in the arena exactly once.
func TestHeldSlicesSurviveRecycling(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		t.Run(fmt.Sprintf("disk=%v", dir != ""), func(t *testing.T) {
			b := newFake("fake://a/")
			a := randomData(200, 3*MiB)
			ia := b.put("a", a)
			ib := b.put("b", randomData(201, 48*MiB))
			c := smallArenaCache(t, dir)
			total := c.arena.available()

			ha := open(t, c, b, ia)
			p := make([]byte, 2*MiB)
			vecs, release, err := ha.(SliceReader).ReadSlices(context.Background(), p, MiB/2)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(bytes.Join(vecs, nil), a[MiB/2:MiB/2+2*MiB]) {
				t.Fatal("first read differs")
			}
			inMemory := 0
			for _, v := range vecs {
				if &v[0] != &p[0] && &v[0] != &p[len(p)-len(v)] {
					inMemory++
				}
			}
			if inMemory == 0 {
				t.Fatal("no slice of a block in memory: the test proves nothing")
			}
			readFile(t, c, b, ib) // 48 blocks through an arena of 12
			c.quiesce()
			if !bytes.Equal(bytes.Join(vecs, nil), a[MiB/2:MiB/2+2*MiB]) {
				t.Fatal("held slices changed while other reads recycled the arena")
			}
			release()
			ha.Close()
			c.quiesce()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if got := c.arena.available(); got != total {
				t.Fatalf("after close, %d of %d arena blocks are free: references leaked or a block was freed twice", got, total)
			}
		})
	}
}

// TestConcurrentSliceReadsRecycleSafely: many readers, slices held across
// other readers' progress, an arena recycled all the time; run with -race.
func TestConcurrentSliceReadsRecycleSafely(t *testing.T) {
	b := newFake("fake://a/")
	var infos []backends.ObjectInfo
	var datas [][]byte
	for i := range 4 {
		d := randomData(uint64(210+i), 6*MiB+i*4099)
		datas = append(datas, d)
		infos = append(infos, b.put(fmt.Sprintf("c%d", i), d))
	}
	c := smallArenaCache(t, t.TempDir())
	total := c.arena.available()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 40 {
				i := r.IntN(len(infos))
				h, err := c.Open(context.Background(), b, infos[i])
				if err != nil {
					errs <- err
					return
				}
				off := r.Int64N(infos[i].Size)
				p := make([]byte, r.IntN(3*MiB)+1)
				vecs, release, err := h.(SliceReader).ReadSlices(context.Background(), p, off)
				if err != nil && err != io.EOF {
					release()
					h.Close()
					errs <- err
					return
				}
				want := datas[i][off:min(off+int64(len(p)), infos[i].Size)]
				runtime.Gosched() // others read and recycle meanwhile
				got := bytes.Join(vecs, nil)
				release()
				h.Close()
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("object %d at %d: slices differ from the object (recycled under the reader?)", i, off)
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
	c.quiesce()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := c.arena.available(); got != total {
		t.Fatalf("after close, %d of %d arena blocks are free", got, total)
	}
	if st := c.Stats(); st.BackendBytes <= int64(total)*MiB {
		t.Fatalf("fetched %d bytes through an arena of %d blocks: nothing was recycled, the test proves nothing", st.BackendBytes, total)
	}
}

// TestArenaChunks: objects under half a block take power-of-two chunks cut
// from whole blocks, which are whole again once every chunk is back; the
// arena never falls back to the heap while chunks fit.
func TestArenaChunks(t *testing.T) {
	a := newArena(4, MiB, false)
	var refs []blockRef
	for range 32 { // 4 blocks of 8 chunks of 128 KiB
		r := a.get(100 << 10)
		if got := r.cost(); got != 128<<10 {
			t.Fatalf("a 100 KiB buffer costs %d, want 128 KiB", got)
		}
		if len(r.data()) != 100<<10 {
			t.Fatalf("data is %d bytes, want 100 KiB", len(r.data()))
		}
		if !directOK(r.b.buf[:cap(r.b.buf)]) {
			t.Fatal("chunk not page aligned")
		}
		refs = append(refs, r)
	}
	if h := a.heap.Load(); h != 0 {
		t.Fatalf("%d heap blocks for 32 chunks that fit the arena", h)
	}
	if n := a.available(); n != 0 {
		t.Fatalf("%d whole blocks free, want 0", n)
	}
	// Chunks do not overlap.
	for i, r := range refs {
		d := r.data()
		for j := range d {
			d[j] = byte(i)
		}
	}
	for i, r := range refs {
		for _, v := range r.data() {
			if v != byte(i) {
				t.Fatalf("chunk %d overwritten", i)
			}
		}
	}
	// A stale reference to a returned chunk cannot be revived.
	stale := refs[0]
	for _, r := range refs {
		r.unref()
	}
	if stale.tryRef() {
		t.Fatal("tryRef revived a returned chunk")
	}
	if n := a.available(); n != 4 {
		t.Fatalf("%d whole blocks free after every chunk came back, want 4", n)
	}
	// Mixed sizes: whole blocks and chunks of two classes.
	w := a.get(MiB)
	s1 := a.get(4096)
	s2 := a.get(300 << 10)
	if w.cost() != MiB || s1.cost() != 4096 || s2.cost() != 512<<10 {
		t.Fatalf("costs %d, %d, %d", w.cost(), s1.cost(), s2.cost())
	}
	if n := a.available(); n != 1 {
		t.Fatalf("%d whole blocks free, want 1 (one whole, two split)", n)
	}
	w.unref()
	s1.unref()
	s2.unref()
	if n := a.available(); n != 4 {
		t.Fatalf("%d whole blocks free at the end, want 4", n)
	}
}

// TestSmallObjectsStayInArena reads many small objects through a cache
// whose arena could hold only a dozen whole blocks: with chunks, no block
// comes from the heap.
func TestSmallObjectsStayInArena(t *testing.T) {
	b := newFake("fake://a/")
	c := newTestCache(t, Options{Dir: t.TempDir(), MemoryBytes: 8 * MiB, TotalRequests: 4, FileRequests: 2, WarmAfter: -1})
	for i := range 200 {
		data := randomData(uint64(300+i), 100<<10)
		info := b.put(fmt.Sprintf("d/f%03d", i), data)
		if got := readFile(t, c, b, info); !bytes.Equal(got, data) {
			t.Fatalf("object %d differs", i)
		}
	}
	c.quiesce()
	if h := c.Stats().HeapBlocks; h != 0 {
		t.Fatalf("%d heap blocks reading 200 x 100 KiB through an 8 MiB cache", h)
	}
}

// TestArenaBackedOnFirstUse opens a cache with a 4 GiB memory bound: it
// must hold none of that until reads need blocks (issue 32: the arena was
// backed up front, and a mount took 90-128 s to start and held the whole
// bound idle), and a read then backs only the blocks it uses, serving the
// right bytes from them.
func TestArenaBackedOnFirstUse(t *testing.T) {
	before := residentBytes(t)
	c := newTestCache(t, Options{MemoryBytes: 4 << 30})
	if grew := residentBytes(t) - before; grew > 256*MiB {
		t.Fatalf("opening a cache with a 4 GiB memory bound made the process %d MiB larger: the arena was backed up front", grew/MiB)
	}
	if got := c.Stats().ArenaBytes; got != 0 {
		t.Fatalf("ArenaBytes %d before any read, want 0", got)
	}
	b := newFake("fake://a/")
	data := randomData(400, 3*MiB+12345)
	info := b.put("a", data)
	if got := readFile(t, c, b, info); !bytes.Equal(got, data) {
		t.Fatal("data read through a fresh arena differs")
	}
	got := c.Stats().ArenaBytes
	if got < 4*MiB || got > 64*MiB {
		t.Fatalf("ArenaBytes %d MiB after reading 3 MiB, want at least the 4 blocks read and far below the 4 GiB bound", got/MiB)
	}
}

// residentBytes is the process's resident memory (VmRSS).
func residentBytes(t *testing.T) int64 {
	t.Helper()
	s, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
