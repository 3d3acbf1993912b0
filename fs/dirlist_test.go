package fs

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// wideBackend is a store of one directory of n objects, listed 1,000 a
// page, with OSS-like names and versions (a 32-digit ETag).
type wideBackend struct {
	backends.Backend
	n int
}

func (w wideBackend) name(i int) string { return fmt.Sprintf("train/img_%08d.jpg", i) }

func (w wideBackend) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	return backends.ObjectInfo{IsDir: true}, nil
}

func (w wideBackend) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	after := max(opt.StartAfter, opt.Token)
	start := sort.Search(w.n, func(i int) bool { return w.name(i) > after })
	var page backends.ListPage
	for i := start; i < w.n && len(page.Objects) < 1000; i++ {
		page.Objects = append(page.Objects, backends.ObjectInfo{Key: w.name(i), Size: int64(100<<10 + i),
			ModTime: time.Unix(1_700_000_000, int64(i)), Version: fmt.Sprintf("%032X", i), Mode: 0o644})
	}
	if n := len(page.Objects); n > 0 && start+n < w.n {
		page.NextToken = page.Objects[n-1].Key
	}
	return page, nil
}

// TestDirListBytesPerEntry: a listing of 100,000 entries holds at most 200
// bytes per entry (issue 31; the map of ObjectInfo it replaced measured 224), and
// describes every entry as the store listed it.
func TestDirListBytesPerEntry(t *testing.T) {
	const n = 100_000
	b := wideBackend{n: n}
	root, err := NewInputRoot(context.Background(), b, InputOptions{Name: "wide"})
	if err != nil {
		t.Fatal(err)
	}
	dir := &inDir{fsys: root.(*inDir).fsys, info: backends.ObjectInfo{Key: "train", IsDir: true}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	dl, errno := dir.listing(context.Background())
	if errno != 0 {
		t.Fatal(errno)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perEntry := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	t.Logf("%d entries: %.1f bytes each", n, perEntry)
	if perEntry > 200 {
		t.Errorf("a listing of %d entries holds %.1f bytes per entry, want at most 200", n, perEntry)
	}
	if dl.Len() != n {
		t.Fatalf("%d entries listed, want %d", dl.Len(), n)
	}
	for _, i := range []int{0, 1, 54_321, n - 1} {
		name := fmt.Sprintf("img_%08d.jpg", i)
		j := dl.find(name)
		if j != i {
			t.Fatalf("find(%s) = %d, want %d", name, j, i)
		}
		got := dl.info("train", j)
		want := backends.ObjectInfo{Key: "train/" + name, Size: int64(100<<10 + i), ModTime: time.Unix(1_700_000_000, int64(i)),
			Version: fmt.Sprintf("%032X", i), Mode: 0o644}
		if !got.ModTime.Equal(want.ModTime) {
			t.Fatalf("entry %d: mtime %v, want %v", i, got.ModTime, want.ModTime)
		}
		got.ModTime = want.ModTime
		if got != want {
			t.Fatalf("entry %d: %+v, want %+v", i, got, want)
		}
	}
	if dl.find("img_.jpg") >= 0 || dl.find("zzz") >= 0 || dl.find("") >= 0 {
		t.Fatal("find of a name not listed found one")
	}
	runtime.KeepAlive(dl)
}

// TestDirListShadowing: of an object and a directory of one name the
// directory is listed (the old map's rule), the object reported.
func TestDirListShadowing(t *testing.T) {
	var shadowed []string
	dl, err := newDirList(
		[]string{"b", "a", "a", "c", "c", "d"},
		[]backends.ObjectInfo{{Key: "b", Size: 1}, {Key: "a", Size: 2}, {Key: "a", IsDir: true}, {Key: "c", IsDir: true}, {Key: "c", Size: 3}, {Key: "d", Version: "v"}},
		func(info backends.ObjectInfo) { shadowed = append(shadowed, info.Key) })
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range dl.Len() {
		names = append(names, fmt.Sprintf("%s:%v", dl.name(i), dl.isDir(i)))
	}
	if fmt.Sprint(names) != "[a:true b:false c:true d:false]" || fmt.Sprint(shadowed) != "[a c]" {
		t.Fatalf("listed %v, shadowed %v", names, shadowed)
	}
	if m := dl.entries("x"); len(m) != 4 || m["d"].Key != "x/d" || m["d"].Version != "v" || !m["a"].IsDir {
		t.Fatalf("entries: %+v", m)
	}
}
