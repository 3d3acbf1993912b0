package parlist_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/backends/parlist"
)

const bucket = "bkt"

// wideNames returns about n names of the kinds datasets hold, and names
// placed where split points fall: sequential numbers (padded and not),
// hashes, unicode, one long common prefix, names a character apart around
// the points img_001, img_01 and the like, and characters that sort below
// '/' (so a directory "x" sorts apart from "x/" in an object store).
func wideNames(n int) (files, dirs []string) {
	rng := rand.New(rand.NewPCG(1, 2))
	add := func(format string, count int) {
		for i := range count {
			files = append(files, fmt.Sprintf(format, i))
		}
	}
	add("img_%06d.jpg", n*40/100)
	add("%d", n*19/100)
	for range n * 20 / 100 {
		files = append(files, fmt.Sprintf("%016x", rng.Uint64()))
	}
	add("日本語_%05d.png", n*5/100)
	add("é%d", n*3/100)
	add("🙂-%d", n*2/100)
	add("shard-of-a-rather-long-dataset-name-%05d.tar", n*10/100)
	for _, base := range []string{"img_001", "img_01", "img_0", "img_1", "img_00", "0", "1", "a", "日本語_1", "é1"} {
		for _, suffix := range []string{"", " ", "!", "-", ".", "0", "00", "9", "~", "\u00a0", "é", "\U0010FFFF"} {
			files = append(files, base+suffix)
		}
	}
	for i := range n * 1 / 100 {
		dirs = append(dirs, fmt.Sprintf("d%04d", i))
	}
	// Directories named like split points and like files beside them.
	dirs = append(dirs, "img_002", "img_02", "img_001--", "日本語_2", "f")
	files = append(files, "f-", "f.", "f0", "f!")
	slices.Sort(files)
	files = slices.Compact(files)
	slices.Sort(dirs)
	return files, dirs
}

// writeTree creates files and directories (each holding one file) under
// dir on disk.
func writeTree(t testing.TB, dir string, files, dirs []string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "x"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func startOSS(t testing.TB, root string) backends.Backend {
	t.Helper()
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	t.Setenv("OSS_SESSION_TOKEN", "")
	t.Setenv("OSS_ENDPOINT", "")
	_, endpoint := ossemutest.Start(t, root, ossemu.Options{})
	u, err := backends.ParseURI("oss://" + bucket + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := oss.New(context.Background(), u, oss.Options{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// sequential lists page after page, as a caller without parlist does, in
// parlist's order.
func sequential(t testing.TB, b backends.Backend, opt backends.ListOptions) backends.ListPage {
	t.Helper()
	var all backends.ListPage
	for {
		page, err := b.List(context.Background(), opt)
		if err != nil {
			t.Fatal(err)
		}
		all.Objects = append(all.Objects, page.Objects...)
		all.Prefixes = append(all.Prefixes, page.Prefixes...)
		if page.NextToken == "" {
			break
		}
		opt.Token = page.NextToken
	}
	slices.SortStableFunc(all.Objects, func(a, b backends.ObjectInfo) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		if a.IsDir == b.IsDir {
			return 0
		}
		if b.IsDir {
			return -1
		}
		return 1
	})
	slices.Sort(all.Prefixes)
	return all
}

// same fails unless two listings hold exactly the same entries.
func same(t *testing.T, what string, got, want backends.ListPage) {
	t.Helper()
	if got.NextToken != "" {
		t.Errorf("%s: NextToken %q, want none", what, got.NextToken)
	}
	if !slices.Equal(got.Prefixes, want.Prefixes) {
		t.Errorf("%s: %d prefixes, want %d: %s", what, len(got.Prefixes), len(want.Prefixes), firstDiff(got.Prefixes, want.Prefixes))
	}
	if !slices.EqualFunc(got.Objects, want.Objects, func(a, b backends.ObjectInfo) bool {
		return a.Key == b.Key && a.IsDir == b.IsDir && a.Size == b.Size && a.Version == b.Version && a.ModTime.Equal(b.ModTime)
	}) {
		keys := func(l []backends.ObjectInfo) []string {
			var k []string
			for _, o := range l {
				k = append(k, fmt.Sprintf("%s dir=%v size=%d", o.Key, o.IsDir, o.Size))
			}
			return k
		}
		t.Errorf("%s: %d objects, want %d: %s", what, len(got.Objects), len(want.Objects), firstDiff(keys(got.Objects), keys(want.Objects)))
	}
}

func firstDiff(got, want []string) string {
	for i := 0; i < len(got) || i < len(want); i++ {
		g, w := "<none>", "<none>"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Sprintf("first difference at #%d: %q, want %q", i, g, w)
		}
	}
	return "same"
}

// TestWideDirectoryOSS lists a wide directory (100 pages) of varied
// names through the OSS emulator in parallel, and finds exactly what a
// listing page after page finds.
func TestWideDirectoryOSS(t *testing.T) {
	root := t.TempDir()
	// 25,000 entries in pages of 250 are the 100 pages of a 100,000-entry
	// directory in pages of 1,000, at a quarter of the files to create
	// (the race detector makes that the test's cost).
	files, dirs := wideNames(25_000)
	writeTree(t, filepath.Join(root, bucket, "wide"), files, dirs)
	b := startOSS(t, root)

	opt := backends.ListOptions{Prefix: "wide/", MaxKeys: 250}
	want := sequential(t, b, opt)
	if len(want.Objects) != len(files) || len(want.Prefixes) != len(dirs) {
		t.Fatalf("sequential listing: %d objects and %d prefixes, want %d and %d", len(want.Objects), len(want.Prefixes), len(files), len(dirs))
	}
	var st parlist.Stats
	got, err := parlist.List(t.Context(), b, opt, parlist.Options{Stats: &st})
	if err != nil {
		t.Fatal(err)
	}
	same(t, "parallel listing of wide/", got, want)
	t.Logf("%d entries: %d pages, %d probes, %d ranges", len(files)+len(dirs), st.Pages, st.Probes, st.Ranges)
	if st.Ranges < 8 {
		t.Errorf("%d ranges: the listing was not split", st.Ranges)
	}
	// 100 pages hold the listing: splitting may read past range ends,
	// not read it all twice.
	if st.Pages > 150 {
		t.Errorf("%d pages for %d entries", st.Pages, len(files)+len(dirs))
	}

}

// TestOptionsOSS: a listing after a key, a recursive one and a prefix
// inside names, in parallel, find what listings page after page find.
func TestOptionsOSS(t *testing.T) {
	root := t.TempDir()
	files, dirs := wideNames(10_000)
	writeTree(t, filepath.Join(root, bucket, "wide"), files, dirs)
	b := startOSS(t, root)
	for _, o := range []backends.ListOptions{
		{Prefix: "wide/", MaxKeys: 100},
		{Prefix: "wide/", StartAfter: "wide/img_000500.jpg", MaxKeys: 100},
		{Prefix: "wide/", Recursive: true, MaxKeys: 100},
		{Prefix: "wide/img_0", MaxKeys: 33},
	} {
		what := fmt.Sprintf("parallel listing %+v", o)
		var st parlist.Stats
		got, err := parlist.List(t.Context(), b, o, parlist.Options{Stats: &st})
		if err != nil {
			t.Fatal(err)
		}
		same(t, what, got, sequential(t, b, o))
		t.Logf("%s: %d entries: %d pages, %d probes, %d ranges", what, len(got.Objects)+len(got.Prefixes), st.Pages, st.Probes, st.Ranges)
	}
}

// TestSmallPagesManyRanges: tiny pages split the listing into as many
// ranges as allowed, on OSS and NAS (where a directory sorts by its name,
// not its name and '/'), and the result is still exact.
func TestSmallPagesManyRanges(t *testing.T) {
	root := t.TempDir()
	files, dirs := wideNames(2000)
	writeTree(t, filepath.Join(root, bucket, "w"), files, dirs)
	u, err := backends.ParseURI("nas://" + filepath.Join(root, bucket) + "/")
	if err != nil {
		t.Fatal(err)
	}
	n, err := nas.New(context.Background(), u, nas.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	for name, b := range map[string]backends.Backend{"oss": startOSS(t, root), "nas": n} {
		for _, rec := range []bool{false, true} {
			for _, max := range []int{7, 100} {
				opt := backends.ListOptions{Prefix: "w/", Recursive: rec, MaxKeys: max}
				var st parlist.Stats
				got, err := parlist.List(t.Context(), b, opt, parlist.Options{Requests: 4, MaxRanges: 64, Stats: &st})
				if err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("%s %+v", name, opt)
				same(t, what, got, sequential(t, b, opt))
				if st.Ranges < 2 || st.Ranges > 64 {
					t.Errorf("%s: %d ranges, want 2..64", what, st.Ranges)
				}
			}
		}
	}
}

// ignoreStartAfter is a store that does not know StartAfter: every range
// then starts at the beginning.
type ignoreStartAfter struct{ backends.Backend }

func (s ignoreStartAfter) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	opt.StartAfter = ""
	return s.Backend.List(ctx, opt)
}

// failAfter fails every List call after the first n.
type failAfter struct {
	backends.Backend
	n     int32
	calls atomic.Int32
}

var errBroken = errors.New("broken store")

func (s *failAfter) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	if s.calls.Add(1) > s.n {
		return backends.ListPage{}, errBroken
	}
	return s.Backend.List(ctx, opt)
}

// TestStoreWithoutStartAfter: a store that ignores StartAfter is listed
// exactly, page after page, with no range split off.
func TestStoreWithoutStartAfter(t *testing.T) {
	root := t.TempDir()
	files, dirs := wideNames(2000)
	writeTree(t, filepath.Join(root, bucket, "w"), files, dirs)
	b := ignoreStartAfter{startOSS(t, root)}
	opt := backends.ListOptions{Prefix: "w/", MaxKeys: 100}
	var st parlist.Stats
	got, err := parlist.List(t.Context(), b, opt, parlist.Options{Stats: &st})
	if err != nil {
		t.Fatal(err)
	}
	same(t, "listing of a store without StartAfter", got, sequential(t, b, opt))
	if st.Ranges != 1 {
		t.Errorf("%d ranges, want 1", st.Ranges)
	}
}

// TestErrorStopsListing: a failed page fails the whole listing.
func TestErrorStopsListing(t *testing.T) {
	root := t.TempDir()
	files, dirs := wideNames(2000)
	writeTree(t, filepath.Join(root, bucket, "w"), files, dirs)
	b := &failAfter{Backend: startOSS(t, root), n: 3}
	_, err := parlist.List(t.Context(), b, backends.ListOptions{Prefix: "w/", MaxKeys: 100}, parlist.Options{})
	if !errors.Is(err, errBroken) {
		t.Fatalf("List over a failing store: %v, want %v", err, errBroken)
	}
}

// emptyFirstPage answers every listing's first page (probes included)
// with no entries and a token, as a store may that stops at a time limit.
type emptyFirstPage struct{ backends.Backend }

const emptyToken = "\x00again"

func (s emptyFirstPage) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	switch opt.Token {
	case "":
		return backends.ListPage{NextToken: emptyToken}, nil
	case emptyToken:
		opt.Token = ""
	}
	return s.Backend.List(ctx, opt)
}

// TestEmptyPagesWithToken: an empty page that carries a token proves
// nothing ends there, for ranges and probes alike.
func TestEmptyPagesWithToken(t *testing.T) {
	root := t.TempDir()
	files, dirs := wideNames(3000)
	writeTree(t, filepath.Join(root, bucket, "w"), files, dirs)
	b := emptyFirstPage{startOSS(t, root)}
	opt := backends.ListOptions{Prefix: "w/", MaxKeys: 100}
	var st parlist.Stats
	got, err := parlist.List(t.Context(), b, opt, parlist.Options{Stats: &st})
	if err != nil {
		t.Fatal(err)
	}
	same(t, "listing of a store with empty first pages", got, sequential(t, b, opt))
	if st.Ranges < 2 {
		t.Errorf("%d ranges: the listing was not split", st.Ranges)
	}
}
