package fs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// syntheticOSS serves syn from an OSS emulator and opens a backend on its
// bucket.
func syntheticOSS(t *testing.T, syn ossemu.Synthetic) (*ossemu.Server, backends.Backend) {
	t.Helper()
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	t.Setenv("OSS_SESSION_TOKEN", "")
	srv, endpoint := ossemutest.Start(t, t.TempDir(), ossemu.Options{Synthetic: &syn})
	u, err := backends.ParseURI("oss://" + ossemu.SyntheticBucket + "/")
	must(t, err)
	b, err := oss.New(context.Background(), u, oss.Options{Endpoint: endpoint}, nil)
	must(t, err)
	t.Cleanup(func() { b.Close() })
	return srv, b
}

// TestInputLookupWithoutListing: in a directory of 100,000 objects whose
// listing was never read, a lookup asks the store for that name only: at
// most 2 requests for a present name, a missing one, and a missing one
// that begins many names, never a page of the directory's listing (100
// of them); the file then reads its bytes. The kernel keeps the missing
// name: a second lookup costs nothing.
func TestInputLookupWithoutListing(t *testing.T) {
	const n = 100_000
	syn := ossemu.Synthetic{N: n, Size: 5000}
	srv, b := syntheticOSS(t, syn)
	mnt := testMount(t, b, mfs.InputOptions{})
	requests := func() int64 { return srv.Stats()["requests"] }
	for _, tc := range []struct {
		name   string
		exists bool
	}{
		{"f54321", true},
		{"f00000", true},
		{"f99999", true},
		{"missing", false},
		{"f5432", false}, // the start of 10 names: a second, short LIST
		{"f100000", false},
	} {
		before := requests()
		fi, err := os.Stat(filepath.Join(mnt, tc.name))
		cost := requests() - before
		switch {
		case tc.exists && (err != nil || fi.Size() != syn.Size || !fi.Mode().IsRegular()):
			t.Fatalf("stat %s: %v, %v; want a file of %d bytes", tc.name, fi, err, syn.Size)
		case !tc.exists && !errors.Is(err, syscall.ENOENT):
			t.Fatalf("stat %s: %v; want ENOENT", tc.name, err)
		}
		if cost > 2 {
			t.Errorf("lookup of %s cost %d store requests, want at most 2", tc.name, cost)
		}
		t.Logf("lookup of %s: %d requests", tc.name, cost)
		if !tc.exists {
			// The kernel keeps the negative entry: the stat again costs
			// nothing. A drop_caches by a test of another package
			// running alongside may drop it once in a while, so it gets
			// three chances.
			cost := int64(-1)
			for try := 0; try < 3 && cost != 0; try++ {
				before = requests()
				if _, err := os.Stat(filepath.Join(mnt, tc.name)); !errors.Is(err, syscall.ENOENT) {
					t.Fatalf("second stat of %s: %v", tc.name, err)
				}
				cost = requests() - before
			}
			if cost != 0 {
				t.Errorf("lookups of missing %s again cost %d requests; the kernel should keep the negative entry", tc.name, cost)
			}
		}
	}
	if lists := srv.Stats()["ListObjectsV2"] + srv.Stats()["ListObjects"]; lists > 8 {
		t.Fatalf("%d LIST requests for 6 lookups: the directory was listed", lists)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "f54321"))
	want := make([]byte, syn.Size)
	ossemu.SyntheticData(54321, want, 0)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read f54321: %d bytes, %v; want its %d bytes", len(got), err, len(want))
	}
}

// TestInputForgetFreesNodes: once the kernel forgets the nodes of a
// directory (drop_caches), the input tree holds neither their nodes nor
// the directory's listing, nor those listed ahead for its subdirectories;
// and the directory reads the same when looked up again.
func TestInputForgetFreesNodes(t *testing.T) {
	const n, fan = 3000, 500
	syn := ossemu.Synthetic{N: n, FanOut: fan, Size: 100}
	_, b := syntheticOSS(t, syn)
	mnt, count := mountCounted(t, b)
	walk := func() int {
		files := 0
		top, err := os.ReadDir(mnt)
		must(t, err)
		for _, d := range top {
			ents, err := os.ReadDir(filepath.Join(mnt, d.Name()))
			must(t, err)
			for _, e := range ents {
				if _, err := os.Stat(filepath.Join(mnt, d.Name(), e.Name())); err != nil {
					t.Fatal(err)
				}
				files++
			}
		}
		return files
	}
	if files := walk(); files != n {
		t.Fatalf("walk found %d files, want %d", files, n)
	}
	nodes, listings := count()
	if nodes < n {
		t.Fatalf("%d nodes after a walk of %d files", nodes, n)
	}
	t.Logf("after the walk: %d nodes, %d listings", nodes, listings)
	// The drop runs in another process: this one serves the FORGETs.
	testwait.Eventually(t, func() bool {
		out, err := exec.Command("sh", "-c", "echo 2 > /proc/sys/vm/drop_caches").CombinedOutput()
		if err != nil {
			t.Fatalf("drop_caches: %v: %s", err, out)
		}
		nodes, listings = count()
		return nodes == 0 && listings == 1
	}, "the kernel forgetting the tree: nodes and listings left, want none but the root's listing")
	if files := walk(); files != n {
		t.Fatalf("walk after the forget found %d files, want %d", files, n)
	}
}

// TestInputReaddirPlusBounded: a walk that reads names only (find,
// os.walk) makes the mount hold at most PlusNodesMax nodes however many
// entries it lists; every name is still listed, and a name stat'ed after
// the budget ran out is looked up with its attributes.
func TestInputReaddirPlusBounded(t *testing.T) {
	const fan = 4000
	n := int64(mfs.PlusNodesMax + 3*fan)
	syn := ossemu.Synthetic{N: n, FanOut: fan, Size: 77}
	_, b := syntheticOSS(t, syn)
	mnt, count := mountCounted(t, b)
	// find reads each directory in one READDIRPLUS of up to 1 MiB (the
	// kernel's directory cache), where os.ReadDir's first small read
	// would leave the rest to plain READDIRs (READDIRPLUS_AUTO).
	out, err := exec.Command("find", mnt, "-type", "f").Output()
	must(t, err)
	names := strings.Fields(string(out))
	listed := int64(len(names))
	sort.Strings(names)
	last, _ := filepath.Rel(mnt, names[len(names)-1])
	if listed != n {
		t.Fatalf("find listed %d files, want %d", listed, n)
	}
	top, err := os.ReadDir(mnt)
	must(t, err)
	nodes, _ := count()
	t.Logf("%d entries listed, %d nodes held", n, nodes)
	if nodes > mfs.PlusNodesMax+len(top) {
		t.Fatalf("%d nodes after a names-only walk of %d entries, want at most %d", nodes, n, mfs.PlusNodesMax+len(top))
	}
	if last != ossemu.SyntheticKey(syn, n-1) {
		t.Fatalf("the last name listed is %s, want %s", last, ossemu.SyntheticKey(syn, n-1))
	}
	fi, err := os.Stat(filepath.Join(mnt, last))
	if err != nil || fi.Size() != syn.Size || !fi.Mode().IsRegular() {
		t.Fatalf("stat %s after the walk: %v, %v; want a file of %d bytes", last, fi, err, syn.Size)
	}
}

// TestInputManyLookupsListTheDirectory: a program opening file after file
// of a directory it never listed pays a request per name only for the
// first names: then the directory's listing is fetched in the background,
// and later names cost no request at all.
func TestInputManyLookupsListTheDirectory(t *testing.T) {
	const n = 5000
	syn := ossemu.Synthetic{N: n, Size: 10}
	srv, b := syntheticOSS(t, syn)
	mnt := testMount(t, b, mfs.InputOptions{})
	requests := func() int64 { return srv.Stats()["requests"] }
	for i := range 40 {
		fi, err := os.Stat(filepath.Join(mnt, ossemu.SyntheticKey(syn, int64(i*100))))
		if err != nil || fi.Size() != syn.Size {
			t.Fatalf("stat of object %d: %v, %v", i*100, fi, err)
		}
	}
	// The listing: 5 pages of 1,000, in ranges.
	probe := int64(n)
	testwait.Eventually(t, func() bool {
		probe-- // a name the kernel has not seen yet
		before := requests()
		_, err := os.Stat(filepath.Join(mnt, ossemu.SyntheticKey(syn, probe)))
		must(t, err)
		return requests() == before
	}, "a lookup answered from the directory's listing, fetched in the background")
	before := requests()
	for i := range 200 {
		if _, err := os.Stat(filepath.Join(mnt, ossemu.SyntheticKey(syn, int64(i*23+1)))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, "f99999")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of a missing name: %v", err)
	}
	if cost := requests() - before; cost != 0 {
		t.Fatalf("200 lookups after the listing cost %d requests, want none", cost)
	}
}

// mountCounted mounts b as an input on a temporary directory, unmounted at
// the test's end, with the counter of the tree's nodes and listings.
func mountCounted(t *testing.T, b backends.Backend) (string, func() (nodes, listings int)) {
	t.Helper()
	mnt := t.TempDir()
	srv, count, err := mfs.MountInputCounted(mnt, b, mfs.InputOptions{})
	if err != nil {
		t.Fatalf("FUSE mount failed (tests need /dev/fuse and root): %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return mnt, count
}
