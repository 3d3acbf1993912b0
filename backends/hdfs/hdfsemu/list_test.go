package hdfsemu_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"

	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// seedWide writes n empty files into root/dir with ordinary file tools.
func seedWide(tb testing.TB, root, dir string, n int) {
	tb.Helper()
	d := filepath.Join(root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%06d", i)), nil, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestListingWideDirChanges: getListing pages (startAfter) through a
// directory wide enough to be indexed see what changes between pages,
// done on the emulator's disk or through the client; names at or before
// startAfter are not listed again, as in HDFS.
func TestListingWideDirChanges(t *testing.T) {
	s, root := start(t, hdfsemu.Options{ListingLimit: 100, Superuser: "tester"})
	seedWide(t, root, "wide", 1000)
	c := client(t, s, "tester")
	f, err := c.Open("/wide")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	// read reads n more names (all that are left when n is 0) a page at
	// a time (the client's Readdir(0) would start over).
	read := func(n int) {
		t.Helper()
		for left := n; n == 0 || left > 0; left -= 100 {
			fis, err := f.Readdir(100)
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, fi := range fis {
				got = append(got, fi.Name())
			}
		}
	}
	read(100)
	read(100) // f000000..f000199 seen
	want := map[string]bool{}
	for i := 0; i < 1000; i++ {
		want[fmt.Sprintf("f%06d", i)] = true
	}
	for _, n := range []string{"f000500x", "f000000a"} {
		if err := os.WriteFile(filepath.Join(root, "wide", n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(root, "wide", "f000400")); err != nil {
		t.Fatal(err)
	}
	want["f000500x"], want["f000400"] = true, false
	read(400) // up to f000600
	if err := c.CreateEmptyFile("/wide/f000700y"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove("/wide/f000800"); err != nil {
		t.Fatal(err)
	}
	want["f000700y"], want["f000800"] = true, false
	read(0)
	var wantNames []string
	for n, ok := range want {
		if ok {
			wantNames = append(wantNames, n)
		}
	}
	slices.Sort(wantNames)
	if !slices.Equal(got, wantNames) {
		for i := range min(len(got), len(wantNames)) {
			if got[i] != wantNames[i] {
				t.Fatalf("listed %d names, want %d; at %d: %q, want %q", len(got), len(wantNames), i, got[i], wantNames[i])
			}
		}
		t.Fatalf("listed %d names, want %d", len(got), len(wantNames))
	}
}

// BenchmarkGetListingWideDir: one full listing of a directory of 10,000
// and of 100,000 files through the colinmarc/hdfs client, which pages
// with startAfter (1,000 a page). With the directory index a page costs
// O(page): the ns/file of the two sizes are alike.
func BenchmarkGetListingWideDir(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			root := b.TempDir()
			seedWide(b, root, "wide", n)
			s, err := hdfsemu.New(hdfsemu.Options{Root: root})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			c, err := hdfs.NewClient(hdfs.ClientOptions{Addresses: []string{s.Addr()}, User: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			// The directory's index is not trusted within a second of
			// its last change: not what is measured.
			waitSettled(b, filepath.Join(root, "wide"))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				fis, err := c.ReadDir("/wide")
				if err != nil || len(fis) != n {
					b.Fatalf("listed %d files (%v), want %d", len(fis), err, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/file")
		})
	}
}

// waitSettled polls (no event signals the passing of time) until dir's
// last change is 1.5 s old: an index of it built from then on is trusted.
func waitSettled(tb testing.TB, dir string) {
	tb.Helper()
	testwait.Eventually(tb, func() bool {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			tb.Fatal(err)
		}
		return time.Since(time.Unix(0, st.Ctim.Nano())) > 1500*time.Millisecond
	}, "%s to stop changing", dir)
}
