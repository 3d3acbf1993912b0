package cache

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// TestOneBlockObjectWrittenWhole: an object of one block lands in the disk
// tier as its complete file in one go (no .part, .meta or temporary left),
// and the next open hands that file to the kernel for passthrough.
func TestOneBlockObjectWrittenWhole(t *testing.T) {
	dir := t.TempDir()
	b := newFake("fake://a/")
	c := newTestCache(t, Options{Dir: dir, WarmAfter: -1})
	for i, size := range []int{1, 100 << 10, MiB} {
		data := randomData(uint64(400+i), size)
		info := b.put("d/obj"+string(rune('a'+i)), data)
		if got := readFile(t, c, b, info); !bytes.Equal(got, data) {
			t.Fatalf("size %d: read differs", size)
		}
		c.quiesce()
		id := objectID(b.ID(), info.Key, info.Version)
		got, err := os.ReadFile(c.completePath(id))
		if err != nil {
			t.Fatalf("size %d: no complete file: %v", size, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("size %d: complete file differs from the object", size)
		}
		h := open(t, c, b, info)
		if _, ok := h.(*handle).PassthroughFd(); !ok {
			t.Fatalf("size %d: written whole, but the next open offers no passthrough", size)
		}
		h.Close()
	}
	var stray []string
	filepath.WalkDir(filepath.Join(dir, layoutVersion), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() &&
			(strings.HasSuffix(p, partSuffix) || strings.HasSuffix(p, metaSuffix) || strings.HasSuffix(p, tmpSuffix)) {
			stray = append(stray, p)
		}
		return nil
	})
	if len(stray) > 0 {
		t.Fatalf("files besides complete objects: %v", stray)
	}
}

// TestUnsyncedObjectsAfterReboot: objects written whole without a sync
// are kept across a restart of the daemon (same boot) and after a clean
// Close, and dropped after an unclean end followed by a reboot (the marker
// holds another boot's ID); objects of several blocks, synced, are kept.
func TestUnsyncedObjectsAfterReboot(t *testing.T) {
	b := newFake("fake://a/")
	small := b.put("d/small", randomData(500, 100<<10))
	big := b.put("d/big", randomData(501, 3*MiB+5))
	// run opens a cache on dir as boot, reads both objects, and ends it
	// cleanly (Close) or not (the process dies: nothing runs but the
	// release of the directory lock). It returns the keys read from the
	// backend.
	run := func(dir, boot string, clean bool) []string {
		t.Helper()
		b.resetLog()
		c, err := New(Options{Dir: dir, bootID: boot, writeQueueBytes: 1 << 30, WarmAfter: -1})
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range []struct {
			key  string
			seed uint64
		}{{small.Key, 500}, {big.Key, 501}} {
			i := b.info(info.key)
			if got := readFile(t, c, b, i); !bytes.Equal(got, randomData(info.seed, int(i.Size))) {
				t.Fatalf("%s differs", info.key)
			}
		}
		c.quiesce()
		if clean {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			c.cancel()
			c.lock.Close()
		}
		var keys []string
		for _, r := range b.readLog() {
			keys = append(keys, r.key)
		}
		return keys
	}
	for _, tc := range []struct {
		name        string
		clean       bool
		nextBoot    string
		wantFetched []string
	}{
		{"daemon crash, same boot", false, "boot-1", nil},
		{"clean close, then reboot", true, "boot-2", nil},
		{"unclean end, then reboot", false, "boot-2", []string{small.Key}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if got := run(dir, "boot-1", tc.clean); len(got) != 2 {
				t.Fatalf("first run fetched %v, want both objects", got)
			}
			got := run(dir, tc.nextBoot, true)
			if strings.Join(got, ",") != strings.Join(tc.wantFetched, ",") {
				t.Fatalf("second run fetched %v, want %v", got, tc.wantFetched)
			}
		})
	}
}

// TestCompleteFilesKeptOpen: the file of a complete object stays open
// after its last handle closes, so the next open does not open it again;
// only the maxKeptOpen most recently released stay open, and an evicted
// object's file is closed.
func TestCompleteFilesKeptOpen(t *testing.T) {
	b := newFake("fake://a/")
	c := newTestCache(t, Options{Dir: t.TempDir(), WarmAfter: -1})
	c.mu.Lock()
	c.maxKeptOpen = 2
	c.mu.Unlock()
	var infos []backends.ObjectInfo
	for i := range 3 {
		info := b.put(fmt.Sprintf("d/f%d", i), randomData(uint64(600+i), 100<<10))
		infos = append(infos, info)
		readFile(t, c, b, info) // fetched and written whole
		c.quiesce()
		readFile(t, c, b, info) // complete: released with its file kept
	}
	entryOf := func(info backends.ObjectInfo) *entry {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.entries[objectID(b.ID(), info.Key, info.Version)]
	}
	fileOf := func(e *entry) *os.File {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.file
	}
	if f := fileOf(entryOf(infos[0])); f != nil {
		t.Fatal("the least recently released file is still open past the limit of 2")
	}
	for _, info := range infos[1:] {
		e := entryOf(info)
		f := fileOf(e)
		if f == nil {
			t.Fatalf("%s: complete file not kept open", info.Key)
		}
		h := open(t, c, b, info)
		if fileOf(e) != f {
			t.Fatalf("%s: opened again instead of reusing the kept file", info.Key)
		}
		if got := readAll(t, h, info.Size, 128<<10); !bytes.Equal(got, randomData(uint64(600+slices.Index(infos, info)), 100<<10)) {
			t.Fatalf("%s: data differs through the kept file", info.Key)
		}
		h.Close()
	}
	// Eviction closes the kept file.
	e := entryOf(infos[1])
	f := fileOf(e)
	c.mu.Lock()
	c.removeLocked(e)
	c.mu.Unlock()
	if fileOf(e) != nil {
		t.Fatal("evicted entry still holds its file")
	}
	if _, err := f.Stat(); err == nil {
		t.Fatal("evicted entry's file still open")
	}
}

// TestScanRemovesLeftoverTemporaries: a bitmap or the unsynced marker a
// crash left as a temporary file (atomicfile's name) is removed when the
// cache opens; a file of that shape that is not the cache's is left.
func TestScanRemovesLeftoverTemporaries(t *testing.T) {
	dir := t.TempDir()
	c, err := New(Options{Dir: dir, WarmAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	id := objectID("fake://a/", "d/k", "v1")
	root := filepath.Join(dir, layoutVersion)
	if err := os.MkdirAll(c.dirOf(id), 0o700); err != nil {
		t.Fatal(err)
	}
	ours := []string{
		filepath.Join(c.dirOf(id), "."+id+metaSuffix+".123456.tmp"),
		filepath.Join(root, "."+unsyncedName+".42.tmp"),
	}
	theirs := filepath.Join(root, ".notes.txt.7.tmp")
	for _, p := range append(ours, theirs) {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	newTestCache(t, Options{Dir: dir, WarmAfter: -1})
	for _, p := range ours {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after the scan (%v)", p, err)
		}
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("a file not the cache's was removed: %v", err)
	}
}
