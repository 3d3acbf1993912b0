package cache

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// usageOf returns the usage of dataset ds in us (zero if absent).
func usageOf(us []DatasetUsage, ds string) DatasetUsage {
	for _, u := range us {
		if u.Dataset == ds {
			return u
		}
	}
	return DatasetUsage{Dataset: ds}
}

// complete reports whether the cache holds info of b whole on disk.
func (c *Cache) completeOnDisk(b backends.Backend, info backends.ObjectInfo) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[objectID(b.ID(), info.Key, info.Version)]
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.complete
}

// TestUsageByDataset: du counts each dataset's objects, disk and memory
// bytes, live and offline (DiskUsage, from the index on disk), and the
// datasets are still known after a restart.
func TestUsageByDataset(t *testing.T) {
	dir := t.TempDir()
	a, b := newFake("fake://a/"), newFake("fake://b/")
	var aInfos, bInfos []backends.ObjectInfo
	for i := range 3 {
		aInfos = append(aInfos, a.put(fmt.Sprintf("a%d", i), randomData(uint64(i), 3*MiB)))
	}
	bInfos = append(bInfos, b.put("b0", randomData(9, 100<<10)))
	c, err := New(Options{Dir: dir, writeQueueBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range aInfos {
		readFile(t, c, a, info)
	}
	readFile(t, c, b, bInfos[0])
	c.quiesce()
	live := c.Usage()
	ua, ub := usageOf(live, "fake://a/"), usageOf(live, "fake://b/")
	if ua.Objects != 3 || ua.Complete != 3 || ua.DiskBytes < 9*MiB || ua.MemoryBytes == 0 {
		t.Errorf("dataset a: %+v; want 3 complete objects, >= 9 MiB on disk, some in memory", ua)
	}
	if ub.Objects != 1 || ub.DiskBytes < 100<<10 || ub.DiskBytes >= MiB {
		t.Errorf("dataset b: %+v; want 1 object of about 100 KiB on disk", ub)
	}
	if u := usageOf(live, ""); u.Objects != 0 {
		t.Errorf("objects of an unknown dataset: %+v", u)
	}
	if _, err := DiskUsage(dir); err == nil {
		t.Error("DiskUsage of a directory the cache holds: no error")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	off, err := DiskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []DatasetUsage{ua, ub} {
		got := usageOf(off, want.Dataset)
		if got.Objects != want.Objects || got.Complete != want.Complete || got.DiskBytes != want.DiskBytes {
			t.Errorf("offline %s: %+v; live it was %+v", want.Dataset, got, want)
		}
	}
	c2 := newTestCache(t, Options{Dir: dir})
	if got := usageOf(c2.Usage(), "fake://a/"); got.Objects != 3 || got.DiskBytes != ua.DiskBytes {
		t.Errorf("after a restart, dataset a: %+v; want %+v on disk", got, ua)
	}
}

// TestClearDatasetWhileReading: clearing a dataset drops its objects from
// memory and disk but not another dataset's, and a file being read during
// the clear still reads right; it goes once closed.
func TestClearDatasetWhileReading(t *testing.T) {
	a, b := newFake("fake://a/"), newFake("fake://b/")
	big := randomData(1, 24*MiB)
	bigInfo := a.put("big", big)
	small := a.put("small", randomData(2, 2*MiB))
	other := b.put("other", randomData(3, 2*MiB))
	c := newTestCache(t, Options{Dir: t.TempDir(), NoPassthrough: true})
	readFile(t, c, a, small)
	readFile(t, c, b, other)
	readFile(t, c, a, bigInfo)
	c.quiesce()

	// A reader half way through big, then the clear, then the rest.
	h := open(t, c, a, bigInfo)
	got := make([]byte, 0, len(big))
	buf := make([]byte, 128<<10)
	read := func(upTo int) {
		for len(got) < upTo {
			n, err := h.ReadAt(context.Background(), buf[:min(len(buf), upTo-len(got))], int64(len(got)))
			if n == 0 {
				t.Fatalf("read at %d: %v", len(got), err)
			}
			got = append(got, buf[:n]...)
		}
	}
	read(len(big) / 2)
	var wg sync.WaitGroup
	var res ClearResult
	wg.Add(1)
	go func() { // clears while the reader goes on
		defer wg.Done()
		res = c.Clear(func(ds string) bool { return ds == "fake://a/" })
	}()
	read(len(big))
	wg.Wait()
	if !bytes.Equal(got, big) {
		t.Fatal("a file read across a clear of its dataset: bytes differ")
	}
	if res.Objects != 1 || res.Deferred != 1 || res.DiskBytes < 2*MiB || res.MemoryBytes == 0 {
		t.Errorf("clear: %+v; want the small object removed (>= 2 MiB), the open one deferred, memory dropped", res)
	}
	if u := usageOf(c.Usage(), "fake://b/"); u.Objects != 1 || u.MemoryBytes == 0 {
		t.Errorf("another dataset after the clear: %+v; want it untouched", u)
	}
	h.Close()
	c.quiesce()
	if u := usageOf(c.Usage(), "fake://a/"); u.Objects != 0 || u.MemoryBytes != 0 || u.DiskBytes != 0 {
		t.Errorf("cleared dataset once its reader closed: %+v; want nothing", u)
	}
	a.resetLog()
	if !bytes.Equal(readFile(t, c, a, bigInfo), big) || a.fetchedBytes() != int64(len(big)) {
		t.Errorf("reading the cleared file again: fetched %d bytes, want all %d", a.fetchedBytes(), len(big))
	}
	res = c.Clear(nil)
	if u := c.Usage(); len(u) != 0 {
		t.Errorf("after clearing everything: %+v", u)
	}
}

// TestWarmResumes: a warm-up interrupted half way, run again, makes no
// store request for the objects complete on disk, and fetches the rest;
// a third run asks nothing at all, and the warmed files then read
// without a request.
func TestWarmResumes(t *testing.T) {
	b := newFake("fake://a/")
	var infos []backends.ObjectInfo
	data := map[string][]byte{}
	for i := range 12 {
		size := 300 << 10
		if i%3 == 0 {
			size = 5*MiB + 7
		}
		d := randomData(uint64(i), size)
		infos = append(infos, b.put(fmt.Sprintf("f%02d", i), d))
		data[infos[i].Key] = d
	}
	c := newTestCache(t, Options{Dir: t.TempDir(), WarmAfter: -1})
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	done := 0
	err := c.Warm(ctx, nil, b, infos, 2, func(o WarmOutcome) {
		mu.Lock()
		defer mu.Unlock()
		if o.Err != nil {
			t.Errorf("%s: %v", o.Object.Key, o.Err)
		}
		if done++; done == 4 {
			cancel() // interrupted
		}
	})
	if err == nil {
		t.Fatal("an interrupted warm-up returned no error")
	}
	c.quiesce()
	if u := usageOf(c.Usage(), "fake://a/"); u.MemoryBytes != 0 {
		t.Errorf("a warm-up left %d bytes in the memory tier; it fetches for the disk alone", u.MemoryBytes)
	}
	complete := map[string]bool{}
	for _, info := range infos {
		complete[info.Key] = c.completeOnDisk(b, info)
	}
	n := 0
	for _, ok := range complete {
		if ok {
			n++
		}
	}
	if n < 4 || n == len(infos) {
		t.Fatalf("%d of %d objects complete after the interrupted run; want at least the 4 reported, not all", n, len(infos))
	}

	b.resetLog()
	var outcomes []WarmOutcome
	if err := c.Warm(context.Background(), nil, b, infos, 4, func(o WarmOutcome) {
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	c.quiesce()
	for _, r := range b.readLog() {
		if complete[r.key] {
			t.Errorf("the second run read %s (%d bytes at %d), complete on disk already", r.key, r.length, r.off)
		}
	}
	if len(outcomes) != len(infos) {
		t.Fatalf("%d outcomes for %d objects", len(outcomes), len(infos))
	}
	for _, o := range outcomes {
		if o.Err != nil || o.Cached != complete[o.Object.Key] || !o.Cached && o.Fetched != o.Object.Size {
			t.Errorf("%s: %+v (complete before: %v)", o.Object.Key, o, complete[o.Object.Key])
		}
	}
	b.resetLog()
	if err := c.Warm(context.Background(), nil, b, infos, 4, nil); err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if !bytes.Equal(readFile(t, c, b, info), data[info.Key]) {
			t.Fatalf("%s: warmed bytes differ", info.Key)
		}
	}
	if rs := b.readLog(); len(rs) != 0 {
		t.Errorf("a third run and reads of warmed files made %d store reads: %s", len(rs), describeReads(rs))
	}
}

// TestDatasetIndexStaysBounded: a running cache that evicts keys as it
// caches new ones compacts its dataset index, which so stays within a
// few times the keys it holds, and still labels every object.
func TestDatasetIndexStaysBounded(t *testing.T) {
	dir := t.TempDir()
	b := newFake("fake://a/")
	c, err := New(Options{Dir: dir, DiskBytes: 8 * 300 << 10, indexCompactAfter: 10, WarmAfter: -1, writeQueueBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 120 {
		readFile(t, c, b, b.put(fmt.Sprintf("k%03d", i), randomData(uint64(i), 300<<10)))
	}
	c.quiesce()
	held := usageOf(c.Usage(), "fake://a/").Objects
	if held == 0 || held > 8 {
		t.Fatalf("%d objects held under a bound of 8", held)
	}
	lines := 0
	ents, err := os.ReadDir(filepath.Join(dir, layoutVersion, datasetsDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, layoutVersion, datasetsDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(data), "\n") - 1 // less the header
	}
	if lines > 3*10+int(held) {
		t.Errorf("the index holds %d key lines for %d objects cached (120 ever)", lines, held)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	off, err := DiskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(off) != 1 || off[0].Dataset != "fake://a/" || off[0].Objects != held {
		t.Errorf("offline after compactions: %+v; want %d objects of fake://a/", off, held)
	}
}
