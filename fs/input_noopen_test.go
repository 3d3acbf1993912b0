package fs_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/cache"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/fs/fstest"
)

// opCounter counts the FUSE requests a mount answers, by operation.
type opCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *opCounter) observe(op string, _ time.Duration) {
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
}

func (c *opCounter) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// cachedMount is an input mount of files written to a fresh NAS
// directory, read through a fresh cache (64 MiB of memory and a disk
// tier) and counting the FUSE requests it answers.
type cachedMount struct {
	mnt   string
	c     *cache.Cache
	b     backends.Backend
	v     *cache.View // the mount's view of c
	ops   *opCounter
	files map[string][]byte
}

// newCachedMount writes files (name: bytes; a name may hold directories)
// and mounts them with opt, whose Source it sets.
func newCachedMount(t *testing.T, files map[string][]byte, opt mfs.InputOptions) *cachedMount {
	t.Helper()
	src := t.TempDir()
	for name, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := cache.New(cache.Options{Dir: t.TempDir(), MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := &cachedMount{mnt: t.TempDir(), c: c, b: newNAS(t, src), v: c.View(), ops: &opCounter{n: map[string]int{}}, files: files}
	opt.Source = m.v
	srv, err := mfs.MountInput(m.mnt, m.b, opt, mfs.MountOptions{Observe: m.ops.observe})
	if err != nil {
		t.Fatalf("FUSE mount failed (tests need /dev/fuse and root): %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	// Another test's drop_caches (cmd/mlfsd's takeover test runs alongside
	// in `go test ./...`) must not evict a file and its page cache from
	// under a test that counts the READs of warm reads. Released before the
	// unmount (cleanups run last first).
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	fstest.HoldNodes(t, m.mnt, names)
	return m
}

// check reads name whole through the mount and compares it with what was
// written.
func (m *cachedMount) check(t *testing.T, name string) {
	t.Helper()
	if got, err := os.ReadFile(filepath.Join(m.mnt, name)); err != nil || !bytes.Equal(got, m.files[name]) {
		t.Fatalf("read %s: %v (or data differs)", name, err)
	}
}

// TestWarmReopenNeedsNoOpen: reopening 16 distinct small files the kernel
// holds whole (not one file read twice) turns the mount to no-open mode
// (OPEN answered ENOSYS): later opens of
// any of its files reach the daemon with neither OPEN nor RELEASE, warm
// reads of it with no READ either, and files opened that way, small or
// large, read cold or in pieces, still read right.
func TestWarmReopenNeedsNoOpen(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	files := map[string][]byte{"img": make([]byte, 96<<10), "other": make([]byte, 80<<10), "shard": make([]byte, 9<<20+123)}
	small := []string{"img"}
	for i := 1; i < 16; i++ {
		// One directory each: four misses in one directory would fetch
		// the rest ahead, complete on disk, opened with passthrough.
		name := fmt.Sprintf("d%02d/s%02d", i, i)
		files[name] = make([]byte, 64<<10+i)
		small = append(small, name)
	}
	for _, data := range files {
		rng.Read(data)
	}
	m := newCachedMount(t, files, mfs.InputOptions{})
	mnt, ops, check := m.mnt, m.ops, func(name string) { t.Helper(); m.check(t, name) }
	for _, name := range small {
		check(name) // cold: OPEN, READ, RELEASE
	}
	check("img") // one file read again is no epoch: it is opened as usual
	check("img")
	if n := ops.get("open"); n != len(small)+2 {
		t.Fatalf("%d OPEN requests for %d opens, want all of them", n, len(small)+2)
	}
	for _, name := range small[1:] {
		check(name) // the 16th distinct warm reopen: OPEN answered ENOSYS
	}
	opens := ops.get("open")
	if opens != 2*len(small)+1 {
		t.Fatalf("%d OPEN requests for %d opens, want all of them", opens, 2*len(small)+1)
	}
	reads, releases := ops.get("read"), ops.get("release")
	// The kernel sends RELEASE after close(2) returned: those of the
	// opens above not in yet may come in below, and no other.
	late := max(0, opens-1-releases)
	for range 5 {
		check("img")
	}
	if n := ops.get("open"); n != opens {
		t.Fatalf("warm reopens sent %d OPEN requests, want none", n-opens)
	}
	if n := ops.get("read"); n != reads {
		t.Fatalf("warm reopens sent %d READ requests, want the page cache to answer", n-reads)
	}
	if n := ops.get("release"); n-releases > late {
		t.Fatalf("warm reopens sent %d RELEASE requests (%d of earlier opens were due), want none", n-releases, late)
	}

	// Files first opened in no-open mode: read with no file handle.
	check("other")
	check("shard")
	f, err := os.Open(filepath.Join(mnt, "shard"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range []int64{5 << 20, 123, int64(len(files["shard"])) - 4096} {
		buf := make([]byte, 4096)
		if _, err := f.ReadAt(buf, off); err != nil || !bytes.Equal(buf, files["shard"][off:off+4096]) {
			t.Fatalf("pread shard at %d: %v (or data differs)", off, err)
		}
	}
	if n := ops.get("open"); n != opens {
		t.Fatalf("opens in no-open mode sent %d OPEN requests, want none", n-opens)
	}
	if n := ops.get("read"); n == reads {
		t.Fatal("files read cold in no-open mode sent no READ: the test proves nothing")
	}
}

// TestKeepOpensNeverNoOpen: with InputOptions.KeepOpens the mount never
// turns no-open: after the reopens of small files that would have turned
// it (TestWarmReopenNeedsNoOpen), every open still sends an OPEN, and a
// large file complete in the cache, whose pages the kernel no longer
// holds, is opened by passthrough.
func TestKeepOpensNeverNoOpen(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	files := map[string][]byte{"shard": make([]byte, 9<<20+123)}
	var small []string
	for i := range 2 * 16 {
		name := fmt.Sprintf("d%02d/s%02d", i, i) // one directory each (no directory warming)
		files[name] = make([]byte, 64<<10+i)
		small = append(small, name)
	}
	for _, data := range files {
		rng.Read(data)
	}
	m := newCachedMount(t, files, mfs.InputOptions{KeepOpens: true})
	c, b, v, mnt, ops := m.c, m.b, m.v, m.mnt, m.ops
	check := func(name string) { t.Helper(); m.check(t, name) }
	check("shard")
	for range 2 {
		for _, name := range small {
			check(name)
		}
	}
	if n, want := ops.get("open"), 1+2*len(small); n != want {
		t.Fatalf("%d OPEN requests for %d opens, want all of them", n, want)
	}
	for _, name := range small {
		check(name)
	}
	if n, want := ops.get("open"), 1+3*len(small); n != want {
		t.Fatalf("%d OPEN requests for %d opens after a third epoch, want all of them: the mount turned no-open", n, want)
	}

	waitComplete(t, c, b, "shard")
	reads := ops.get("read")
	reopenByPassthrough(t, mnt, "shard", v, ops)
	check("shard")
	if n := ops.get("read"); n != reads {
		t.Fatalf("reads of shard by passthrough sent %d READ requests, want none", n-reads)
	}
}
