package fs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/fs/fstest"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// newNAS opens a NAS backend on dir.
func newNAS(t *testing.T, dir string) backends.Backend {
	t.Helper()
	u, err := backends.ParseURI("nas://" + dir + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nas.New(context.Background(), u, nas.Options{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// testMount mounts an input tree over b and unmounts it when the test ends.
// FUSE is required: a machine without it fails here, loudly.
func testMount(t *testing.T, b backends.Backend, opt mfs.InputOptions) string {
	t.Helper()
	mnt := t.TempDir()
	srv, err := mfs.MountInput(mnt, b, opt, mfs.MountOptions{})
	if err != nil {
		t.Fatalf("FUSE mount failed (tests need /dev/fuse and root): %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return mnt
}

// writeTree fills dir with n files spread over nested directories, with
// sizes from 0 to 64 KiB and names that need care.
func writeTree(t *testing.T, dir string, n int) {
	t.Helper()
	rng := rand.New(rand.NewSource(1))
	names := []string{"plain", "with space", "per%cent", "plus+sign", "hash#", "q?mark", "ünï©ødé", "数据"}
	for i := 0; i < n; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%d", i%7), fmt.Sprintf("e%d", i%13))
		if i%5 == 0 {
			sub = filepath.Join(sub, "deep", names[i%len(names)])
		}
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, rng.Intn(64<<10))
		rng.Read(data)
		name := fmt.Sprintf("%s-%05d.bin", names[i%len(names)], i)
		if err := os.WriteFile(filepath.Join(sub, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestInputTreeMatchesSource(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, 1200)
	mnt := testMount(t, newNAS(t, src), mfs.InputOptions{})
	fstest.TreeMatchesSource(t, mnt, src)
}

func TestInputPOSIXReadOnly(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, 50)
	mnt := testMount(t, newNAS(t, src), mfs.InputOptions{})
	fstest.RunReadOnly(t, mnt, src)
}

func TestInputLargeFileReads(t *testing.T) {
	src := t.TempDir()
	data := make([]byte, 64<<20+12345)
	rand.New(rand.NewSource(2)).Read(data)
	if err := os.WriteFile(filepath.Join(src, "big.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := testMount(t, newNAS(t, src), mfs.InputOptions{})
	f, err := os.Open(filepath.Join(mnt, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	// Sequential, 1 MiB at a time.
	buf := make([]byte, 1<<20)
	var got bytes.Buffer
	for {
		n, err := f.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("sequential read differs (got %d bytes, want %d)", got.Len(), len(data))
	}

	// Odd offsets and sizes, including across the end.
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < 300; i++ {
		off := rng.Int63n(int64(len(data)))
		size := 1 + rng.Intn(3<<20)
		if i%10 == 0 {
			off = int64(len(data)) - int64(rng.Intn(100)) - 1
		}
		p := make([]byte, size)
		n, err := f.ReadAt(p, off)
		want := data[off:min(off+int64(size), int64(len(data)))]
		if n != len(want) || !bytes.Equal(p[:n], want) {
			t.Fatalf("ReadAt(off=%d, size=%d) = %d bytes, %v; want %d bytes", off, size, n, err, len(want))
		}
		if n < size && err != io.EOF {
			t.Fatalf("short ReadAt at %d: err %v, want EOF", off, err)
		}
	}
}

func TestInputReadAhead(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644)
	srv, err := mfs.MountInput(t.TempDir(), newNAS(t, src), mfs.InputOptions{}, mfs.MountOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Unmount()
	kb, err := srv.ReadAheadKB()
	if err != nil || kb != 16<<10 {
		t.Fatalf("input mount readahead = %d KiB, %v; want 16384", kb, err)
	}
}

func TestInputSingleObject(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "train.csv"), []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "other.csv"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := testMount(t, newNAS(t, src), mfs.InputOptions{Key: "train.csv"})
	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "train.csv" {
		t.Fatalf("single-object mount lists %v, want just train.csv", ents)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "train.csv"))
	if err != nil || string(got) != "a,b\n1,2\n" {
		t.Fatalf("read = %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "other.csv")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("sibling object visible: %v", err)
	}
}

func TestInputMissingChannel(t *testing.T) {
	src := t.TempDir()
	b := newNAS(t, src)
	_, err := mfs.MountInput(t.TempDir(), b, mfs.InputOptions{Key: "nope.csv"}, mfs.MountOptions{})
	if !errors.Is(err, backends.ErrNotExist) || !strings.Contains(err.Error(), "nope.csv") {
		t.Fatalf("mount of a missing object: %v", err)
	}
	os.Mkdir(filepath.Join(src, "dir"), 0o755)
	_, err = mfs.MountInput(t.TempDir(), b, mfs.InputOptions{Key: "dir"}, mfs.MountOptions{})
	if err == nil || !strings.Contains(err.Error(), "end the URI with '/'") {
		t.Fatalf("single-object mount of a directory: %v", err)
	}
}

// countingBackend counts List and Stat calls and can fail reads with a
// chosen error.
type countingBackend struct {
	backends.Backend
	lists atomic.Int64
	// listings counts listings begun: List calls with neither a token nor
	// StartAfter (a wide directory is listed in ranges, many calls each).
	listings atomic.Int64
	stats    atomic.Int64
	readErr  error
}

func (c *countingBackend) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	c.lists.Add(1)
	if opt.Token == "" && opt.StartAfter == "" {
		c.listings.Add(1)
	}
	return c.Backend.List(ctx, opt)
}

func (c *countingBackend) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	c.stats.Add(1)
	return c.Backend.Stat(ctx, key)
}

func (c *countingBackend) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	if c.readErr != nil {
		return nil, c.readErr
	}
	return c.Backend.Read(ctx, key, opt)
}

func TestInputListingFetchedOnce(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, 100)
	cb := &countingBackend{Backend: newNAS(t, src)}
	mnt := testMount(t, cb, mfs.InputOptions{})
	fstest.Tree(t, mnt)
	first := cb.lists.Load()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); fstest.Tree(t, mnt) }()
	}
	wg.Wait()
	if n := cb.lists.Load(); n != first {
		t.Fatalf("listing fetched again: %d List calls after first walk, %d after five", first, n)
	}
}

func TestInputUnknownErrorIsEIO(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	cb := &countingBackend{Backend: newNAS(t, src), readErr: errors.New("wire fell out")}
	mnt := testMount(t, cb, mfs.InputOptions{Log: log})
	_, err := os.ReadFile(filepath.Join(mnt, "f"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read with a failing backend: %v, want EIO", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if s := logs.String(); !strings.Contains(s, "op=read") || !strings.Contains(s, "wire fell out") || !strings.Contains(s, "path=f") {
		t.Fatalf("EIO not logged with op, path and cause: %q", s)
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestCheckMountpoint(t *testing.T) {
	dir := t.TempDir()
	if err := mfs.CheckMountpoint(dir); err != nil {
		t.Fatalf("empty dir refused: %v", err)
	}
	cases := map[string]string{
		filepath.Join(dir, "missing"): "does not exist",
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	cases[file] = "not a directory"
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	cases[full] = "not empty"
	cases["/proc"] = "already a mount point"
	for p, want := range cases {
		if err := mfs.CheckMountpoint(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckMountpoint(%s) = %v, want %q", p, err, want)
		}
	}
}

// Listing a directory fetches its subdirectories' listings ahead (a walk of
// a wide tree then waits for many round trips at once), each still once;
// and a directory read in many getdents calls lists every entry once, in
// order, from the kernel's directory cache the second time.
func TestInputListsSubdirectoriesAhead(t *testing.T) {
	src := t.TempDir()
	// d00 holds 3,000 entries: 4 pages of the NAS backend's 1,000, listed
	// in ranges at once (each range a listing after a key, not counted).
	const dirs, wide = 30, 3000
	for i := range dirs {
		d := filepath.Join(src, fmt.Sprintf("d%02d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range wide {
		name := fmt.Sprintf("entry-with-a-long-name-%06d", i)
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(src, "d00", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, "f")
	cb := &countingBackend{Backend: newNAS(t, src)}
	mnt := testMount(t, cb, mfs.InputOptions{})
	top, err := os.ReadDir(mnt)
	if err != nil || len(top) != dirs {
		t.Fatalf("root: %d entries, %v; want %d", len(top), err, dirs)
	}
	// The root's listing, then one per subdirectory, without our asking.
	const lists = 1 + dirs
	testwait.Eventually(t, func() bool { return cb.listings.Load() >= lists }, "%d listings after listing the root (the subdirectories listed ahead)", lists)
	for round := range 2 {
		// os.ReadDir reads in getdents calls of 8 KiB: many for this one.
		ents, err := os.ReadDir(filepath.Join(mnt, "d00"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: d00 lists %d entries, want %d (first %q..)", round, len(got), len(want), got[:min(3, len(got))])
		}
	}
	for i := 1; i < dirs; i++ {
		b, err := os.ReadFile(filepath.Join(mnt, fmt.Sprintf("d%02d", i), "f"))
		if err != nil || len(b) != 1 || b[0] != byte(i) {
			t.Fatalf("d%02d/f: %v, %v", i, b, err)
		}
	}
	if n := cb.listings.Load(); n != lists {
		t.Fatalf("%d listings; want %d: each directory listed once", n, lists)
	}
	// ls -l: every entry's attributes come from the listing, no request
	// per entry (the one Stat was the mount's, of its root).
	stats := cb.stats.Load()
	for _, name := range want {
		fi, err := os.Lstat(filepath.Join(mnt, "d00", name))
		if err != nil {
			t.Fatal(err)
		}
		if wantSize := map[bool]int64{true: 1}[name == "f"]; fi.Size() != wantSize || !fi.Mode().IsRegular() {
			t.Fatalf("d00/%s: size %d mode %v, want a file of %d bytes", name, fi.Size(), fi.Mode(), wantSize)
		}
	}
	if n := cb.stats.Load() - stats; n != 0 {
		t.Fatalf("%d Stat calls for an ls -l of a listed directory; want none", n)
	}
}
