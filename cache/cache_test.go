package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

func newTestCache(t *testing.T, opt Options) *Cache {
	t.Helper()
	if opt.writeQueueBytes == 0 {
		// The fake backend outruns any disk: without a deep write queue,
		// blocks would be skipped (TestSkippedBlocksCompletedInBackground
		// tests that) and other tests would depend on timing.
		opt.writeQueueBytes = 1 << 30
	}
	c, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func open(t *testing.T, c *Cache, b backends.Backend, info backends.ObjectInfo) Handle {
	t.Helper()
	h, err := c.Open(context.Background(), b, info)
	if err != nil {
		t.Fatalf("open %s: %v", info.Key, err)
	}
	return h
}

// readAll reads h sequentially in chunk-sized reads, as the kernel does.
func readAll(t *testing.T, h Handle, size int64, chunk int) []byte {
	t.Helper()
	out := make([]byte, 0, size)
	buf := make([]byte, chunk)
	for off := int64(0); ; {
		n, err := h.ReadAt(context.Background(), buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	if int64(len(out)) != size {
		t.Fatalf("read %d bytes, want %d", len(out), size)
	}
	return out
}

func readFile(t *testing.T, c *Cache, b backends.Backend, info backends.ObjectInfo) []byte {
	t.Helper()
	h := open(t, c, b, info)
	defer h.Close()
	return readAll(t, h, info.Size, 128<<10)
}

func TestReadsMatchBackend(t *testing.T) {
	b := newFake("fake://a/")
	c := newTestCache(t, Options{Dir: t.TempDir()})
	sizes := []int{1, MiB - 1, MiB, MiB + 1, 5*MiB + 12345, 20 * MiB}
	for i, size := range sizes {
		data := randomData(uint64(i), size)
		info := b.put("obj"+string(rune('a'+i)), data)
		if got := readFile(t, c, b, info); !bytes.Equal(got, data) {
			t.Fatalf("size %d: sequential read differs from the object", size)
		}
		// Random reads of random sizes, across block edges, past the end.
		h := open(t, c, b, info)
		r := rand.New(rand.NewPCG(uint64(size), 1))
		for range 50 {
			off := r.Int64N(int64(size) + 10)
			buf := make([]byte, r.IntN(3*MiB)+1)
			n, err := h.ReadAt(context.Background(), buf, off)
			want := data[min(off, int64(size)):min(off+int64(len(buf)), int64(size))]
			if n != len(want) || !bytes.Equal(buf[:n], want) {
				t.Fatalf("size %d: ReadAt(%d, len %d) = %d bytes, want %d (or data differs)", size, off, len(buf), n, len(want))
			}
			if n < len(buf) && err != io.EOF {
				t.Fatalf("size %d: short read at %d without io.EOF: %v", size, off, err)
			}
			if n == len(buf) && err != nil {
				t.Fatalf("size %d: full read at %d returned %v", size, off, err)
			}
		}
		h.Close()
	}
	// An empty object reads as empty.
	info := b.put("empty", nil)
	h := open(t, c, b, info)
	if n, err := h.ReadAt(context.Background(), make([]byte, 10), 0); n != 0 || err != io.EOF {
		t.Fatalf("empty object: ReadAt = %d, %v; want 0, io.EOF", n, err)
	}
	h.Close()
}

func TestConcurrentReadersFetchOnce(t *testing.T) {
	b := newFake("fake://a/")
	data := randomData(7, 32*MiB)
	info := b.put("big", data)
	gate := make(chan struct{})
	b.gate = gate
	c := newTestCache(t, Options{Dir: t.TempDir()})
	const readers = 16
	off := int64(17*MiB + 4096) // far from 0: a random read, no readahead
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := c.Open(context.Background(), b, info)
			if err != nil {
				errs <- err
				return
			}
			defer h.Close()
			buf := make([]byte, 64<<10)
			if _, err := h.ReadAt(context.Background(), buf, off); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(buf, data[off:off+int64(len(buf))]) {
				errs <- errors.New("wrong data")
			}
		}()
	}
	// Let every reader queue up behind the first fetch, then release it.
	testwait.Eventually(t, func() bool { return len(b.readLog()) > 0 }, "the first fetch")
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rs := b.readLog()
	if len(rs) != 1 || rs[0].off != 17*MiB || rs[0].length != MiB {
		t.Fatalf("%d readers of one block: backend reads %s; want exactly one read of that block", readers, describeReads(rs))
	}
}

func TestSequentialReadaheadGrows(t *testing.T) {
	b := newFake("fake://a/")
	const size = 96 * MiB
	data := randomData(3, size)
	info := b.put("shard", data)
	c := newTestCache(t, Options{Dir: t.TempDir()})
	h := open(t, c, b, info)
	defer h.Close() // after the checks: closing may complete the disk copy
	if got := readAll(t, h, info.Size, 128<<10); !bytes.Equal(got, data) {
		t.Fatal("data differs")
	}
	rs := b.readLog()
	for _, r := range rs {
		if r.off == 0 && r.length > MiB {
			t.Errorf("first request %d+%d; want a small first request (low time to first byte)", r.off, r.length)
		}
	}
	var largest, total int64
	for _, r := range rs {
		largest = max(largest, r.length)
		total += r.length
	}
	if largest != 8*MiB {
		t.Errorf("largest request %d; want the window to grow to 8 MiB requests: %s", largest, describeReads(rs))
	}
	if total != size {
		t.Errorf("fetched %d bytes for a %d-byte object: every byte must be fetched once", total, size)
	}
	if len(rs) > 30 {
		t.Errorf("%d requests for %d MiB: readahead did not batch", len(rs), size/MiB)
	}
}

func TestRandomReadsDoNotPrefetch(t *testing.T) {
	b := newFake("fake://a/")
	const size = 256 * MiB
	info := b.put("table", randomData(4, size))
	c := newTestCache(t, Options{Dir: t.TempDir()})
	h := open(t, c, b, info)
	defer h.Close()
	r := rand.New(rand.NewPCG(9, 9))
	const reads = 40
	buf := make([]byte, 4096)
	for range reads {
		off := r.Int64N(size - 4096)
		if _, err := h.ReadAt(context.Background(), buf, off); err != nil {
			t.Fatal(err)
		}
	}
	rs := b.readLog()
	for _, rr := range rs {
		if rr.length > MiB {
			t.Fatalf("random reads sent a %d-byte request; want only the blocks read: %s", rr.length, describeReads(rs))
		}
	}
	if got := b.fetchedBytes(); got > 2*reads*MiB {
		t.Fatalf("%d random 4 KiB reads fetched %d bytes; want at most one block (two at an edge) each", reads, got)
	}
}

func TestSmallFilesFetchedWhole(t *testing.T) {
	b := newFake("fake://a/")
	c := newTestCache(t, Options{Dir: t.TempDir()})
	var infos []backends.ObjectInfo
	for i := range 50 {
		infos = append(infos, b.put(filepathKey(i), randomData(uint64(100+i), 100<<10+i)))
	}
	for _, info := range infos {
		readFile(t, c, b, info)
	}
	rs := b.readLog()
	if len(rs) != len(infos) {
		t.Fatalf("%d small files took %d requests; want one whole-object read each", len(infos), len(rs))
	}
	for _, r := range rs {
		if r.off != 0 || r.length != b.info(r.key).Size {
			t.Fatalf("small file read %s %d+%d; want the whole object", r.key, r.off, r.length)
		}
	}
}

func filepathKey(i int) string {
	return filepath.Join("imgs", string(rune('a'+i%26)), string(rune('A'+i/26))+".jpg")
}

func TestRestartServesFromDisk(t *testing.T) {
	dir := t.TempDir()
	b := newFake("fake://a/")
	big := randomData(5, 24*MiB+777)
	bigInfo := b.put("big", big)
	small := randomData(6, 300<<10)
	smallInfo := b.put("small", small)
	half := randomData(8, 16*MiB)
	halfInfo := b.put("half", half)

	c1, err := New(Options{Dir: dir, writeQueueBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	readFile(t, c1, b, bigInfo)
	readFile(t, c1, b, smallInfo)
	h := open(t, c1, b, halfInfo)
	buf := make([]byte, 4*MiB)
	if _, err := h.ReadAt(context.Background(), buf, 0); err != nil { // random: only blocks 0-3
		t.Fatal(err)
	}
	h.Close()
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}

	b.resetLog()
	c2 := newTestCache(t, Options{Dir: dir})
	if got := readFile(t, c2, b, bigInfo); !bytes.Equal(got, big) {
		t.Fatal("big: data differs after restart")
	}
	if got := readFile(t, c2, b, smallInfo); !bytes.Equal(got, small) {
		t.Fatal("small: data differs after restart")
	}
	h = open(t, c2, b, halfInfo)
	if _, err := h.ReadAt(context.Background(), buf, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, half[:4*MiB]) {
		t.Fatal("half: cached part differs after restart")
	}
	for _, r := range b.readLog() {
		if r.key != "half" || r.off < 4*MiB {
			// (Readahead past the cached part of "half" is fine.)
			t.Fatalf("after restart, cached data was fetched again: %s", describeReads(b.readLog()))
		}
	}
	// The rest of the partial file is fetched, and only the rest.
	if got := readAll(t, h, halfInfo.Size, MiB); !bytes.Equal(got, half) {
		t.Fatal("half: data differs")
	}
	h.Close()
	for _, r := range b.readLog() {
		if r.off < 4*MiB {
			t.Fatalf("completing a file with its first 4 MiB cached fetched them again: %s", describeReads(b.readLog()))
		}
	}
	if got := b.fetchedBytes(); got > 12*MiB {
		t.Fatalf("completing a 16 MiB file with 4 MiB cached fetched %d bytes; want at most 12 MiB: %s", got, describeReads(b.readLog()))
	}
	if st := c2.Stats(); st.BackendRequests != int64(len(b.readLog())) {
		t.Fatalf("Stats.BackendRequests = %d, backend saw %d", st.BackendRequests, len(b.readLog()))
	}
}

func TestVersionChangeNeverStale(t *testing.T) {
	dir := t.TempDir()
	b := newFake("fake://a/")
	v1 := randomData(10, 3*MiB)
	info1 := b.put("model.bin", v1)
	c := newTestCache(t, Options{Dir: dir})
	readFile(t, c, b, info1)

	// The object changes in the backend. A mount that listed it afresh
	// sees the new version and gets the new bytes, not the cached ones.
	v2 := randomData(11, 3*MiB)
	info2 := b.put("model.bin", v2)
	if got := readFile(t, c, b, info2); !bytes.Equal(got, v2) {
		t.Fatal("new version served stale bytes")
	}
	// The old version's files are gone from the disk tier.
	if _, err := os.Stat(c.completePath(objectID(b.ID(), "model.bin", info1.Version))); !os.IsNotExist(err) {
		t.Fatalf("old version still on disk: %v", err)
	}
	// A handle opened on the old listing, on data not cached, fails with a
	// version mismatch rather than mixing versions.
	big1 := b.put("shard", randomData(12, 8*MiB))
	h := open(t, c, b, big1)
	defer h.Close()
	buf := make([]byte, MiB)
	if _, err := h.ReadAt(context.Background(), buf, 5*MiB); err != nil {
		t.Fatal(err)
	}
	b.put("shard", randomData(13, 8*MiB))
	_, err := h.ReadAt(context.Background(), buf, 2*MiB)
	if !errors.Is(err, backends.ErrVersionMismatch) {
		t.Fatalf("read of a changed object: err = %v; want ErrVersionMismatch", err)
	}
}

// diskUsed sums the real disk usage of the cache's files.
func diskUsed(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += diskUsage(fi)
		}
		return nil
	})
	return n
}

func TestEvictionKeepsDiskBound(t *testing.T) {
	dir := t.TempDir()
	b := newFake("fake://a/")
	const bound = 8 * MiB
	c := newTestCache(t, Options{Dir: dir, DiskBytes: bound, FreeFloorBytes: 1})
	var infos []backends.ObjectInfo
	for i := range 10 {
		infos = append(infos, b.put(filepathKey(i), randomData(uint64(20+i), 2*MiB)))
	}
	for _, info := range infos {
		readFile(t, c, b, info)
		// The file's last blocks may still be in flight to disk when the
		// read returns (the flush runs behind it): measure the tier once
		// they landed. Under CI's load the disk held one 2 MiB file more
		// than the bound while its flush was running.
		c.quiesce()
		if st := c.Stats(); st.DiskBytes > bound {
			t.Fatalf("disk tier accounts %d bytes; bound %d", st.DiskBytes, bound)
		}
		if used := diskUsed(t, dir); used > bound+64<<10 { // + metadata and lock files
			t.Fatalf("disk tier uses %d bytes; bound %d", used, bound)
		}
	}
	if c.Stats().Evictions == 0 {
		t.Fatal("no evictions while reading 20 MiB through an 8 MiB disk tier")
	}
	// The most recently read file is still cached.
	b.resetLog()
	readFile(t, c, b, infos[len(infos)-1])
	if len(b.readLog()) != 0 {
		t.Fatal("the most recently used file was evicted")
	}
}

func TestOpenFilesNotEvicted(t *testing.T) {
	dir := t.TempDir()
	b := newFake("fake://a/")
	c := newTestCache(t, Options{Dir: dir, DiskBytes: 4 * MiB, FreeFloorBytes: 1})
	pinned := b.put("pinned", randomData(30, 3*MiB))
	hp := open(t, c, b, pinned)
	readAll(t, hp, pinned.Size, MiB)
	// Everything else competes for the single MiB left.
	for i := range 6 {
		readFile(t, c, b, b.put(filepathKey(i), randomData(uint64(31+i), 2*MiB)))
	}
	c.quiesce()
	b.resetLog()
	buf := make([]byte, pinned.Size)
	if n, err := hp.ReadAt(context.Background(), buf, 0); n != len(buf) || err != nil {
		t.Fatalf("re-read of the open file: %d, %v", n, err)
	}
	if rs := b.readLog(); len(rs) != 0 {
		t.Fatalf("an open file was evicted and fetched again: %s", describeReads(rs))
	}
	if _, err := os.Stat(c.completePath(objectID(b.ID(), "pinned", pinned.Version))); err != nil {
		t.Fatalf("open file's cache file: %v", err)
	}
	hp.Close()
	// Once closed it may go.
	for i := range 3 {
		readFile(t, c, b, b.put(filepathKey(10+i), randomData(uint64(40+i), 2*MiB)))
	}
	if _, err := os.Stat(c.completePath(objectID(b.ID(), "pinned", pinned.Version))); !os.IsNotExist(err) {
		t.Fatalf("closed file was never evicted: %v", err)
	}
}

func TestFreeSpaceFloor(t *testing.T) {
	// A real small filesystem, so statfs reports real free space.
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs (the test needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	b := newFake("fake://a/")
	const floor = 48 * MiB
	c := newTestCache(t, Options{Dir: dir, FreeFloorBytes: floor})
	for i := range 12 {
		info := b.put(filepathKey(i), randomData(uint64(50+i), 3*MiB))
		if got := readFile(t, c, b, info); !bytes.Equal(got, b.objects[info.Key].data) {
			t.Fatal("data differs")
		}
		free, err := freeBytes(dir)
		if err != nil {
			t.Fatal(err)
		}
		if free < floor-MiB { // one block of slack: statfs is sampled
			t.Fatalf("free space %d below the floor %d", free, floor)
		}
	}
	if c.Stats().Evictions == 0 {
		t.Fatal("no evictions while reading 36 MiB into 16 MiB above the floor")
	}
}

func TestPassthroughFd(t *testing.T) {
	b := newFake("fake://a/")
	data := randomData(60, 5*MiB+3)
	info := b.put("f", data)
	for _, noPT := range []bool{false, true} {
		c := newTestCache(t, Options{Dir: t.TempDir(), NoPassthrough: noPT})
		h := open(t, c, b, info)
		if h.(interface{ OffersPassthrough() bool }).OffersPassthrough() {
			t.Fatal("a file not yet cached says it offers a passthrough fd")
		}
		if _, ok := h.(interface{ PassthroughFd() (int, bool) }).PassthroughFd(); ok {
			t.Fatal("a file not yet cached offered a passthrough fd")
		}
		readAll(t, h, info.Size, MiB)
		h.Close()
		c.quiesce() // the last fetch renames the file complete
		h = open(t, c, b, info)
		offers := h.(interface{ OffersPassthrough() bool }).OffersPassthrough()
		fd, ok := h.(interface{ PassthroughFd() (int, bool) }).PassthroughFd()
		if offers != ok {
			t.Fatalf("NoPassthrough=%v: OffersPassthrough %v, PassthroughFd offered %v", noPT, offers, ok)
		}
		if ok == noPT {
			t.Fatalf("NoPassthrough=%v: complete file offered passthrough = %v", noPT, ok)
		}
		if ok {
			got := make([]byte, len(data)+10)
			n, _ := os.NewFile(uintptr(dupFd(t, fd)), "pt").ReadAt(got, 0)
			if !bytes.Equal(got[:n], data) {
				t.Fatal("passthrough fd does not hold the object's bytes")
			}
		}
		// Without passthrough, the daemon serves the cached copy.
		b.resetLog()
		if got := readAll(t, h, info.Size, MiB); !bytes.Equal(got, data) || len(b.readLog()) != 0 {
			t.Fatal("cached file not served from disk")
		}
		h.Close()
	}
}

func TestUntrustedFilesDropped(t *testing.T) {
	dir := t.TempDir()
	b := newFake("fake://a/")
	info := b.put("p", randomData(70, 16*MiB))
	c1, err := New(Options{Dir: dir, writeQueueBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	h := open(t, c1, b, info)
	if _, err := h.ReadAt(context.Background(), make([]byte, MiB), 10*MiB); err != nil {
		t.Fatal(err)
	}
	h.Close()
	c1.Close()
	id := objectID(b.ID(), "p", info.Version)
	meta := filepath.Join(dir, layoutVersion, id[:2], id+metaSuffix)
	if err := os.WriteFile(meta, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A second Cache on a directory in use is refused.
	c2 := newTestCache(t, Options{Dir: dir})
	if _, err := New(Options{Dir: dir}); !errors.Is(err, ErrDirBusy) {
		t.Fatalf("second cache on one dir: err = %v; want ErrDirBusy", err)
	}
	if _, err := os.Stat(meta); !os.IsNotExist(err) {
		t.Fatal("unreadable metadata kept")
	}
	b.resetLog()
	h = open(t, c2, b, info)
	defer h.Close()
	if _, err := h.ReadAt(context.Background(), make([]byte, MiB), 10*MiB); err != nil {
		t.Fatal(err)
	}
	if len(b.readLog()) != 1 {
		t.Fatal("a block whose metadata was unreadable was trusted")
	}
}

func TestDirectoryWarming(t *testing.T) {
	b := newFake("fake://a/")
	var infos []backends.ObjectInfo
	for i := range 200 {
		infos = append(infos, b.put("ds/"+string(rune('a'+i%26))+string(rune('a'+i/26))+".jpg", randomData(uint64(200+i), 50<<10)))
	}
	b.put("ds/big.bin", randomData(1, 8*MiB)) // not small: never warmed
	b.put("other/x.jpg", randomData(2, 1000)) // another directory
	c := newTestCache(t, Options{Dir: t.TempDir()})
	for _, info := range infos[:4] {
		readFile(t, c, b, info)
	}
	c.quiesce()
	if got := c.Stats().WarmedFiles; got != 196 {
		t.Fatalf("warmed %d files; want the directory's other 196 small files", got)
	}
	for _, r := range b.readLog() {
		if r.key == "ds/big.bin" || r.key == "other/x.jpg" {
			t.Fatalf("warming fetched %s", r.key)
		}
	}
	b.resetLog()
	for _, info := range infos[4:] {
		if got := readFile(t, c, b, info); !bytes.Equal(got, b.objects[info.Key].data) {
			t.Fatal("warmed file differs")
		}
	}
	if rs := b.readLog(); len(rs) != 0 {
		t.Fatalf("reading warmed files fetched again: %s", describeReads(rs))
	}
}

func TestWarmingNeverEvicts(t *testing.T) {
	b := newFake("fake://a/")
	var infos []backends.ObjectInfo
	for i := range 100 {
		infos = append(infos, b.put("ds/"+string(rune('a'+i%26))+string(rune('a'+i/26)), randomData(uint64(300+i), 100<<10)))
	}
	c := newTestCache(t, Options{Dir: t.TempDir(), DiskBytes: 2 * MiB, FreeFloorBytes: 1})
	for _, info := range infos[:4] {
		readFile(t, c, b, info)
	}
	c.quiesce()
	st := c.Stats()
	if st.Evictions != 0 || st.DiskBytes > 2*MiB {
		t.Fatalf("warming a directory larger than the disk tier: %+v; want no eviction, bound kept", st)
	}
	if st.WarmedFiles == 0 || st.WarmedFiles > 20 {
		t.Fatalf("warmed %d files of 100 KiB into 2 MiB; want some, never more than fit", st.WarmedFiles)
	}

	c2 := newTestCache(t, Options{Dir: t.TempDir(), WarmAfter: -1})
	for _, info := range infos[:10] {
		readFile(t, c2, b, info)
	}
	c2.quiesce()
	if got := c2.Stats().WarmedFiles; got != 0 {
		t.Fatalf("WarmAfter -1 still warmed %d files", got)
	}
}

func TestSkippedBlocksCompletedInBackground(t *testing.T) {
	b := newFake("fake://a/")
	data := randomData(80, 40*MiB)
	info := b.put("shard", data)
	// A write queue of one block: a fast stream outruns the disk, and
	// blocks are served without being written.
	c := newTestCache(t, Options{Dir: t.TempDir(), writeQueueBytes: MiB})
	h := open(t, c, b, info)
	if got := readAll(t, h, info.Size, 128<<10); !bytes.Equal(got, data) {
		t.Fatal("data differs")
	}
	h.Close()
	c.quiesce()
	if c.stats.writtenFromMemory.Load() == 0 {
		t.Fatal("no block was skipped (or none was completed from memory): the test proves nothing")
	}
	// The skipped blocks were still in memory: completing the file wrote
	// them from there instead of fetching them again.
	if got := b.fetchedBytes(); got != info.Size {
		t.Fatalf("fetched %d bytes for a %d-byte object whose skipped blocks memory still held", got, info.Size)
	}
	b.resetLog()
	h = open(t, c, b, info)
	defer h.Close()
	if _, ok := h.(interface{ PassthroughFd() (int, bool) }).PassthroughFd(); !ok {
		t.Fatal("a file read to its end was not completed on disk in the background")
	}
	if got := readAll(t, h, info.Size, MiB); !bytes.Equal(got, data) || len(b.readLog()) != 0 {
		t.Fatal("completed file not served from disk")
	}
}

func TestMemoryOnlyReadaheadIsKept(t *testing.T) {
	// Without a disk tier, fetched blocks must stay in memory until read:
	// ristretto's admission policy alone would drop readahead and turn a
	// sequential read into a storm of refetches.
	b := newFake("fake://a/")
	const size = 64 * MiB
	data := randomData(90, size)
	info := b.put("shard", data)
	c := newTestCache(t, Options{MemoryBytes: 64 * MiB})
	h := open(t, c, b, info)
	defer h.Close()
	if got := readAll(t, h, size, 128<<10); !bytes.Equal(got, data) {
		t.Fatal("data differs")
	}
	if got := b.fetchedBytes(); got != size {
		t.Fatalf("memory-only sequential read of %d bytes fetched %d: %s", size, got, describeReads(b.readLog()))
	}
}

// ReadSlices returns what ReadAt returns, with the same EOF rules; blocks
// in memory come back as slices of themselves (not copied into p), and
// blocks only on disk are read into p.
func TestReadSlicesMatchReadAt(t *testing.T) {
	b := newFake("fake://a/")
	data := randomData(11, 5*MiB+777)
	info := b.put("obj", data)
	c := newTestCache(t, Options{Dir: t.TempDir()})
	h := open(t, c, b, info)
	sr := h.(SliceReader)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 200 {
		off := r.Int64N(int64(len(data)) + 10)
		if i < 10 {
			off = int64(i) * MiB // block-aligned, as the kernel's readahead reads
		}
		p := make([]byte, r.IntN(3*MiB)+1)
		vecs, release, err := sr.ReadSlices(context.Background(), p, off)
		got := bytes.Join(vecs, nil)
		release()
		want := data[min(off, int64(len(data))):min(off+int64(len(p)), int64(len(data)))]
		if !bytes.Equal(got, want) {
			t.Fatalf("ReadSlices(%d, len %d) = %d bytes, want %d (or data differs)", off, len(p), len(got), len(want))
		}
		if len(got) < len(p) && err != io.EOF {
			t.Fatalf("short ReadSlices at %d without io.EOF: %v", off, err)
		}
		if len(got) == len(p) && err != nil {
			t.Fatalf("full ReadSlices at %d returned %v", off, err)
		}
	}
	// Fresh from a fetch, a block is in memory: its slice is not in p.
	p := make([]byte, MiB)
	vecs, release, err := sr.ReadSlices(context.Background(), p, 2*MiB)
	release()
	if err != nil || len(vecs) != 1 || &vecs[0][0] == &p[0] {
		t.Fatalf("in-memory block: %d slices, err %v, in p: %v; want one slice of the block", len(vecs), err, len(vecs) == 1 && &vecs[0][0] == &p[0])
	}
	h.Close()

	// A new cache on the same dir has the blocks only on disk: they are
	// read into p.
	c.Close()
	c2 := newTestCache(t, Options{Dir: c.opt.Dir})
	h2 := open(t, c2, b, info)
	defer h2.Close()
	if fd, ok := h2.(interface{ PassthroughFd() (int, bool) }).PassthroughFd(); !ok || fd < 0 {
		t.Fatalf("the object should be complete on disk after a full read")
	}
	vecs, release, err = h2.(SliceReader).ReadSlices(context.Background(), p, MiB+5)
	release()
	if err != nil || len(vecs) != 2 || !bytes.Equal(bytes.Join(vecs, nil), data[MiB+5:2*MiB+5]) {
		t.Fatalf("from disk: %d slices, err %v; want 2 (two blocks) with the object's bytes", len(vecs), err)
	}
	if &vecs[0][0] != &p[0] || &vecs[1][0] != &p[MiB-5] {
		t.Fatalf("from disk: the slices should be parts of p")
	}
}

// TestSharedObjectFetchedOnce: two readers of one object (two jobs reading
// one dataset) with a disk slower than the store (a write queue of one
// block) and little memory. Blocks the first reader gets must wait for the
// disk rather than be dropped, or the second reader fetches them again.
func TestSharedObjectFetchedOnce(t *testing.T) {
	b := newFake("fake://a/")
	const size = 40 * MiB
	data := randomData(81, size)
	info := b.put("shard", data)
	c := newTestCache(t, Options{Dir: t.TempDir(), MemoryBytes: 8 * MiB, writeQueueBytes: MiB})
	h1, h2 := open(t, c, b, info), open(t, c, b, info)
	defer h2.Close()
	if got := readAll(t, h1, size, 128<<10); !bytes.Equal(got, data) {
		t.Fatal("first reader: data differs")
	}
	h1.Close()
	if got := readAll(t, h2, size, 128<<10); !bytes.Equal(got, data) {
		t.Fatal("second reader: data differs")
	}
	if got := b.fetchedBytes(); got != size {
		t.Fatalf("two readers of a %d-byte object fetched %d bytes: %s", int64(size), got, describeReads(b.readLog()))
	}
}

// A directory is warmed once, however many of its files are opened after
// the WarmAfter-th, and every file of it is fetched once: by warming or by
// its reader, never both.
func TestDirectoryWarmedOnce(t *testing.T) {
	b := newFake("fake://a/")
	var infos []backends.ObjectInfo
	for i := range 100 {
		infos = append(infos, b.put("ds/f"+strconv.Itoa(1000+i)+".jpg", randomData(uint64(900+i), 30<<10)))
	}
	c := newTestCache(t, Options{Dir: t.TempDir()})
	for _, info := range infos {
		if got := readFile(t, c, b, info); !bytes.Equal(got, b.objects[info.Key].data) {
			t.Fatalf("%s differs", info.Key)
		}
	}
	c.quiesce()
	if n := b.listCalls(); n != 1 {
		t.Fatalf("directory listed %d times by warming; want once", n)
	}
	per := map[string]int{}
	for _, r := range b.readLog() {
		per[r.key]++
	}
	for _, info := range infos {
		if per[info.Key] != 1 {
			t.Fatalf("%s fetched %d times; want once", info.Key, per[info.Key])
		}
	}
}

// TestScanPrintsProgress: a cache opened on a disk tier an earlier run
// left says how far its index got while it indexes (here at every object,
// the interval being 1 ns), then how many objects it found.
func TestScanPrintsProgress(t *testing.T) {
	dir := t.TempDir()
	b := newFake("fake://a/")
	c1 := newTestCache(t, Options{Dir: dir})
	for i := range 3 {
		readFile(t, c1, b, b.put(fmt.Sprintf("o%d", i), randomData(uint64(500+i), 2*MiB)))
	}
	c1.quiesce()
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	newTestCache(t, Options{Dir: dir, Progress: &out, progressEvery: time.Nanosecond})
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "mlfsd: indexing the disk cache "+dir+": ") {
		t.Fatalf("progress:\n%s", out.String())
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "mlfsd: indexed the disk cache "+dir+": 3 objects in ") {
		t.Errorf("last progress line %q, want the 3 objects found", last)
	}
}
