package nas

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/backendtest"
)

func TestConformance(t *testing.T) {
	backendtest.RunOptions(t, newTestBackend, backendtest.Options{RequireRenamer: true, RequireAppender: true, RequireDirMaker: true, RequireLinker: true, ExclusiveWriter: true,
		ManyKeys: conformanceKeys, LargeSize: conformanceLarge})
}

func newTestBackend(t *testing.T) backends.Backend {
	return openDir(t, t.TempDir())
}

// openDir opens a backend on dir; the caller closes it.
func openDir(t testing.TB, dir string) backends.Backend {
	t.Helper()
	u, err := backends.ParseURI((&url.URL{Scheme: "nas", Path: dir + "/"}).String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(t.Context(), u, Options{}, nil)
	if err != nil {
		t.Fatalf("New(%s): %v", u, err)
	}
	return b
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, b backends.Backend, key string) ([]byte, error) {
	t.Helper()
	r, err := b.Read(t.Context(), key, backends.ReadOptions{Length: -1})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func isRefused(err error) bool {
	return errors.Is(err, backends.ErrPermission) || errors.Is(err, backends.ErrNotExist)
}

// listKeys returns every key a full listing shows, files and directories.
func listKeys(t *testing.T, b backends.Backend, opt backends.ListOptions) map[string]backends.ObjectInfo {
	t.Helper()
	out := map[string]backends.ObjectInfo{}
	for {
		page, err := b.List(t.Context(), opt)
		if err != nil {
			t.Fatalf("List(%+v): %v", opt, err)
		}
		if len(page.Prefixes) != 0 {
			t.Errorf("List(%+v): Prefixes %q, want directories as IsDir objects", opt, page.Prefixes)
		}
		for _, o := range page.Objects {
			out[o.Key] = o
		}
		if page.NextToken == "" {
			return out
		}
		opt.Token = page.NextToken
	}
}

// TestSymlinksStayInsideRoot: symlinks that lead outside the root, by an
// absolute or a relative path, to a file or a directory, are neither listed
// nor followed by any operation; symlinks inside the root work.
func TestSymlinksStayInsideRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	mustWrite(t, filepath.Join(outside, "secret.txt"), "secret")
	mustWrite(t, filepath.Join(root, "real.txt"), "real content")
	mustWrite(t, filepath.Join(root, "sub", "x"), "x")
	mustSymlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(root, "leak"))
	mustSymlink(t, "../outside/secret.txt", filepath.Join(root, "leakrel"))
	mustSymlink(t, outside, filepath.Join(root, "leakdir"))
	mustSymlink(t, "../outside", filepath.Join(root, "leakdirrel"))
	mustSymlink(t, "../../outside/secret.txt", filepath.Join(root, "sub", "deepleak"))
	mustSymlink(t, "real.txt", filepath.Join(root, "inlink"))
	mustSymlink(t, "sub", filepath.Join(root, "indir"))
	mustSymlink(t, "../real.txt", filepath.Join(root, "sub", "uplink"))
	mustSymlink(t, "..", filepath.Join(root, "sub", "loop")) // back to the root: must not loop

	b := openDir(t, root)
	defer b.Close()
	ctx := t.Context()

	escaping := []string{"leak", "leakrel", "leakdir", "leakdirrel", "sub/deepleak", "leakdir/secret.txt", "leakdirrel/secret.txt"}
	for _, rec := range []bool{false, true} {
		keys := listKeys(t, b, backends.ListOptions{Recursive: rec})
		for k := range keys {
			if strings.Contains(k, "leak") {
				t.Errorf("List(recursive=%v) shows %q, a symlink leading outside the root", rec, k)
			}
		}
		if o, ok := keys["inlink"]; !ok || o.IsDir || o.Size != int64(len("real content")) {
			t.Errorf("List(recursive=%v): inlink = %+v, %v; want the file it points to", rec, o, ok)
		}
		if o, ok := keys["indir"]; !ok || !o.IsDir {
			t.Errorf("List(recursive=%v): indir = %+v, %v; want a directory", rec, o, ok)
		}
		if rec {
			// sub/loop leads back to an ancestor: listed, not descended.
			for _, k := range []string{"indir/x", "sub/x", "sub/uplink", "sub/loop"} {
				if _, ok := keys[k]; !ok {
					t.Errorf("recursive listing lacks %q", k)
				}
			}
		}
	}
	sub := listKeys(t, b, backends.ListOptions{Prefix: "sub/"})
	if _, ok := sub["sub/deepleak"]; ok {
		t.Errorf("listing of sub/ shows sub/deepleak")
	}
	_, err := b.List(ctx, backends.ListOptions{Prefix: "leakdir/"})
	if !isRefused(err) {
		t.Errorf("List of a directory outside the root: %v, want ErrPermission or ErrNotExist", err)
	}

	for _, k := range escaping {
		if _, err := b.Stat(ctx, k); !isRefused(err) {
			t.Errorf("Stat(%q) = %v, want ErrPermission or ErrNotExist", k, err)
		}
		data, err := readAll(t, b, k)
		if !isRefused(err) {
			t.Errorf("Read(%q) = %q, %v; want ErrPermission or ErrNotExist", k, data, err)
		}
		if bytes.Contains(data, []byte("secret")) {
			t.Errorf("Read(%q) served content from outside the root", k)
		}
	}
	if w, err := b.Write(ctx, "leakdir/new", backends.WriteOptions{SizeHint: -1}); err == nil {
		w.Write([]byte("escaped"))
		_, err = w.Commit(ctx)
		if err == nil {
			t.Errorf("Write through a symlink leading outside succeeded")
		}
	}
	if err := b.(backends.DirMaker).MakeDir(ctx, "leakdirrel/made"); err == nil {
		t.Errorf("MakeDir through a symlink leading outside succeeded")
	}
	if err := b.(backends.Renamer).Rename(ctx, "real.txt", "leakdir/stolen"); err == nil {
		t.Errorf("Rename into a directory outside succeeded")
	}
	if err := b.(backends.Renamer).Rename(ctx, "leakdir/secret.txt", "got"); err == nil {
		t.Errorf("Rename out of a directory outside succeeded")
	}
	if err := b.Delete(ctx, "leakdir/secret.txt"); err == nil {
		t.Errorf("Delete through a symlink leading outside succeeded")
	}
	if w, err := b.(backends.Appender).Append(ctx, "leak"); err == nil {
		w.Write([]byte("appended"))
		if _, err := w.Commit(ctx); err == nil {
			t.Errorf("Append through a symlink leading outside succeeded")
		}
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "secret.txt" {
		t.Errorf("outside directory now holds %v", entries)
	}
	if got, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(got) != "secret" {
		t.Errorf("outside file now holds %q", got)
	}

	// Inside the root, symlinks are followed.
	for k, want := range map[string]string{"inlink": "real content", "indir/x": "x", "sub/uplink": "real content", "sub/loop/real.txt": "real content"} {
		if got, err := readAll(t, b, k); err != nil || string(got) != want {
			t.Errorf("Read(%q) = %q, %v; want %q", k, got, err, want)
		}
	}
	// Deleting an escaping symlink removes the link (inside the root), not
	// its target.
	if err := b.Delete(ctx, "leak"); err != nil {
		t.Errorf("Delete of the symlink itself: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "leak")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("symlink still there after Delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret.txt")); err != nil {
		t.Errorf("Delete of a symlink removed its target: %v", err)
	}
}

// TestBadKeysRefused: keys with "..", ".", empty segments or a leading '/'
// are refused by every operation with ErrInvalid, and touch nothing.
func TestBadKeysRefused(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	mustWrite(t, filepath.Join(root, "a", "b"), "b")
	mustWrite(t, filepath.Join(base, "x"), "outside")
	b := openDir(t, root)
	defer b.Close()
	ctx := t.Context()
	bad := []string{"..", "../x", "a/../../x", "a/..", "./a", "a/./b", "/a", "/", "a//b", "//", "a/b/..", "nul\x00byte"}
	for _, k := range bad {
		_, err := b.Stat(ctx, k)
		wantInvalid(t, "Stat", k, err)
		_, err = b.Read(ctx, k, backends.ReadOptions{Length: -1})
		wantInvalid(t, "Read", k, err)
		_, err = b.Write(ctx, k, backends.WriteOptions{SizeHint: -1})
		wantInvalid(t, "Write", k, err)
		wantInvalid(t, "Delete", k, b.Delete(ctx, k))
		wantInvalid(t, "MakeDir", k, b.(backends.DirMaker).MakeDir(ctx, k))
		wantInvalid(t, "Rename from", k, b.(backends.Renamer).Rename(ctx, k, "y"))
		wantInvalid(t, "Rename to", k, b.(backends.Renamer).Rename(ctx, "a/b", k))
		_, err = b.(backends.Appender).Append(ctx, k)
		wantInvalid(t, "Append", k, err)
	}
	for _, prefix := range []string{"../", "a/../", "../x", "./", "/", "/a", "a//", "a/./b"} {
		_, err := b.List(ctx, backends.ListOptions{Prefix: prefix, Recursive: true})
		wantInvalid(t, "List", prefix, err)
	}
	if got, _ := os.ReadFile(filepath.Join(base, "x")); string(got) != "outside" {
		t.Errorf("file outside the root changed: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "a", "b")); string(got) != "b" {
		t.Errorf("a/b changed: %q", got)
	}
}

func wantInvalid(t *testing.T, op, key string, err error) {
	t.Helper()
	if !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("%s(%q) = %v, want ErrInvalid", op, key, err)
	}
}

// TestTempFilesNeverVisible: an in-flight write's temporary file exists on
// disk but is never listed or served, its name cannot be written, and
// neither Commit nor Abort leaves one behind; a stale one from a crash is
// hidden too.
func TestTempFilesNeverVisible(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "d", tmpPrefix+"stale"), "crash leftover")
	b := openDir(t, root)
	defer b.Close()
	ctx := t.Context()

	w1, err := b.Write(ctx, "d/f", backends.WriteOptions{SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := b.Write(ctx, "g", backends.WriteOptions{SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []backends.Writer{w1, w2} {
		if _, err := w.Write([]byte("in flight")); err != nil {
			t.Fatal(err)
		}
	}
	temps := tempFiles(t, root)
	if len(temps) != 3 {
		t.Fatalf("on disk: temporary files %q, want the stale one and two in flight", temps)
	}
	for _, rec := range []bool{false, true} {
		for _, prefix := range []string{"", "d/", "d/" + tmpPrefix, tmpPrefix} {
			for k := range listKeys(t, b, backends.ListOptions{Prefix: prefix, Recursive: rec}) {
				if strings.Contains(k, tmpPrefix) {
					t.Errorf("List(prefix=%q recursive=%v) shows %q", prefix, rec, k)
				}
			}
		}
	}
	for _, rel := range temps {
		key := filepath.ToSlash(rel)
		if _, err := b.Stat(ctx, key); !errors.Is(err, backends.ErrNotExist) {
			t.Errorf("Stat(%q) = %v, want ErrNotExist", key, err)
		}
		if _, err := readAll(t, b, key); !errors.Is(err, backends.ErrNotExist) {
			t.Errorf("Read(%q) = %v, want ErrNotExist", key, err)
		}
		if _, err := b.Write(ctx, key, backends.WriteOptions{}); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Write(%q) = %v, want ErrInvalid", key, err)
		}
		if err := b.Delete(ctx, key); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Delete(%q) = %v, want ErrInvalid", key, err)
		}
	}
	if _, err := w1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w2.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if temps := tempFiles(t, root); len(temps) != 1 {
		t.Errorf("after Commit and Abort: temporary files %q, want only the stale one", temps)
	}
	if got, err := os.ReadFile(filepath.Join(root, "d", "f")); err != nil || string(got) != "in flight" {
		t.Errorf("committed file on disk: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(root, "g")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("aborted file on disk: %v", err)
	}
}

// tempFiles lists the temporary files under root, relative to it.
func tempFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNewRootErrors: a missing root, a file as root, or another scheme
// fail in New with an error naming the problem.
func TestNewRootErrors(t *testing.T) {
	base := t.TempDir()
	mustWrite(t, filepath.Join(base, "file"), "x")
	cases := []struct {
		uri      string
		sentinel error
		text     string
	}{
		{"nas://" + base + "/missing/", backends.ErrNotExist, "does not exist"},
		{"file://" + base + "/file/", backends.ErrNotDir, "not a directory"},
	}
	for _, c := range cases {
		u, err := backends.ParseURI(c.uri)
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(t.Context(), u, Options{}, nil)
		if err == nil {
			b.Close()
			t.Errorf("New(%s) succeeded", c.uri)
			continue
		}
		if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.text) || !strings.Contains(err.Error(), base) {
			t.Errorf("New(%s) = %v; want %q naming the path and wrapping %v", c.uri, err, c.text, c.sentinel)
		}
	}
	u, _ := backends.ParseURI("oss://bucket/x/")
	if _, err := New(t.Context(), u, Options{}, nil); err == nil {
		t.Errorf("New of an oss:// URI succeeded")
	}
}

// TestVersionSeesOutsideChanges: a change made directly on disk (same size,
// new mtime) changes the version, and a read pinned to the old one fails.
func TestVersionSeesOutsideChanges(t *testing.T) {
	root := t.TempDir()
	b := openDir(t, root)
	defer b.Close()
	ctx := t.Context()
	w, _ := b.Write(ctx, "f", backends.WriteOptions{SizeHint: 4})
	w.Write([]byte("aaaa"))
	info, err := w.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("bbbb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(root, "f"), later, later); err != nil {
		t.Fatal(err)
	}
	st, err := b.Stat(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if st.Version == info.Version {
		t.Errorf("version %q unchanged after an in-place change on disk", st.Version)
	}
	if _, err := b.Read(ctx, "f", backends.ReadOptions{Length: -1, IfVersion: info.Version}); !errors.Is(err, backends.ErrVersionMismatch) {
		t.Errorf("Read at the old version: %v, want ErrVersionMismatch", err)
	}
}

// TestSpecialFilesNotServed: a FIFO is neither listed nor opened (a read
// must not hang waiting for a writer).
func TestSpecialFilesNotServed(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := openDir(t, root)
	defer b.Close()
	if keys := listKeys(t, b, backends.ListOptions{}); len(keys) != 0 {
		t.Errorf("listing shows %v", keys)
	}
	if _, err := b.Stat(t.Context(), "fifo"); !errors.Is(err, backends.ErrNotExist) {
		t.Errorf("Stat of a FIFO: %v, want ErrNotExist", err)
	}
	if _, err := readAll(t, b, "fifo"); !errors.Is(err, backends.ErrNotExist) {
		t.Errorf("Read of a FIFO: %v, want ErrNotExist", err)
	}
}

// TestClosedBackend: calls after Close fail cleanly; a reader opened
// before Close keeps working.
func TestClosedBackend(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "f"), "content")
	b := openDir(t, root)
	r, err := b.Read(t.Context(), "f", backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := b.Stat(t.Context(), "f"); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Stat after Close: %v, want ErrInvalid", err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != "content" {
		t.Errorf("reader opened before Close: %q, %v", got, err)
	}
}

// TestMarkerWrite: writing a key that ends in '/' makes a directory (an
// object store's directory marker), and refuses data.
func TestMarkerWrite(t *testing.T) {
	root := t.TempDir()
	b := openDir(t, root)
	defer b.Close()
	ctx := t.Context()
	w, err := b.Write(ctx, "m/n/", backends.WriteOptions{SizeHint: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("data")); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Write of data into a marker: %v, want ErrInvalid", err)
	}
	info, err := w.Commit(ctx)
	if err != nil || !info.IsDir || info.Key != "m/n" {
		t.Fatalf("Commit of a marker = %+v, %v; want directory m/n", info, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "m", "n")); err != nil || !fi.IsDir() {
		t.Errorf("on disk: %v, %v; want a directory", fi, err)
	}
	mustWrite(t, filepath.Join(root, "file"), "x")
	if err := b.Delete(ctx, "file/"); !errors.Is(err, backends.ErrNotDir) {
		t.Errorf("Delete(\"file/\") of a file: %v, want ErrNotDir", err)
	}
}

// TestNoSpace: on a full file system a write fails with ErrNoSpace and
// leaves neither the object nor its temporary file behind.
func TestNoSpace(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a 1 MiB tmpfs (the test needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(root, 0); err != nil {
			t.Errorf("unmount %s: %v", root, err)
		}
	})
	b := openDir(t, root)
	defer b.Close()
	ctx := t.Context()
	w, err := b.Write(ctx, "dir/big", backends.WriteOptions{SizeHint: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for i := 0; i < 32 && err == nil; i++ {
		_, err = w.Write(chunk)
	}
	if err == nil {
		_, err = w.Commit(ctx)
	}
	if !errors.Is(err, backends.ErrNoSpace) {
		t.Errorf("writing 2 MiB into 1 MiB: %v, want ErrNoSpace", err)
	}
	if err := w.Abort(ctx); err != nil {
		t.Errorf("Abort: %v", err)
	}
	if _, err := b.Stat(ctx, "dir/big"); !errors.Is(err, backends.ErrNotExist) {
		t.Errorf("Stat after a failed write: %v, want ErrNotExist", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("left behind in the root: %v", entries)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil {
		t.Fatal(err)
	}
	if free := fs.Bavail * uint64(fs.Bsize); free < 1<<20-64<<10 {
		t.Errorf("only %d bytes free after Abort: space not released", free)
	}
}

// TestErrorMapping: each OS error the backend can meet wraps its sentinel
// and keeps the cause.
func TestErrorMapping(t *testing.T) {
	cases := map[unix.Errno]error{
		unix.ENOENT:    backends.ErrNotExist,
		unix.EACCES:    backends.ErrPermission,
		unix.EPERM:     backends.ErrPermission,
		unix.EROFS:     backends.ErrPermission,
		unix.ENOTEMPTY: backends.ErrNotEmpty,
		unix.EEXIST:    backends.ErrExist,
		unix.ENOSPC:    backends.ErrNoSpace,
		unix.EDQUOT:    backends.ErrNoSpace,
		unix.ENOTDIR:   backends.ErrNotDir,
		unix.EISDIR:    backends.ErrIsDir,
		unix.EINVAL:    backends.ErrInvalid,
		unix.ESTALE:    backends.ErrTransient,
	}
	for errno, want := range cases {
		err := mapErr("op", "k", &os.PathError{Op: "open", Path: "k", Err: errno})
		if !errors.Is(err, want) || !errors.Is(err, errno) {
			t.Errorf("%v maps to %v, want it to wrap %v and the errno", errno, err, want)
		}
	}
	if err := mapErr("op", "k", errEscape); !errors.Is(err, backends.ErrPermission) {
		t.Errorf("escape maps to %v", err)
	}
	if err := mapErr("op", "k", unix.EIO); errors.Is(err, backends.ErrTransient) || !errors.Is(err, unix.EIO) {
		t.Errorf("EIO maps to %v, want the bare cause (EIO at the FUSE edge)", err)
	}
}

// The suite's listing and streaming tests are sized to prove paging and
// multipart boundaries, not volume: 2,500 keys are 3 pages of the stores'
// 1,000-key page (and 4 of 777), 20 MiB+3 are 3 OSS parts (20 HDFS blocks)
// with an odd tail. The defaults (10,000 keys, 64 MiB) took 5 to 8 minutes
// each on a loaded 2-core machine.
const (
	conformanceKeys  = 2500
	conformanceLarge = 20<<20 + 3
)

// A wide directory's sorted names are kept between pages, and a change to
// the directory is seen at the next page all the same.
func TestWideDirectoryListingSeesChanges(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 2 * wideDir {
		name := fmt.Sprintf("f%04d", i)
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Kept names are trusted only once the directory's last change is
	// racyDir old: no signal tells when that is.
	time.Sleep(racyDir + 100*time.Millisecond)
	b := openDir(t, dir)
	defer b.Close()
	listAll := func() []string {
		var keys []string
		opt := backends.ListOptions{MaxKeys: 100}
		for {
			page, err := b.List(t.Context(), opt)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.Objects {
				keys = append(keys, o.Key)
			}
			if page.NextToken == "" {
				return keys
			}
			opt.Token = page.NextToken
		}
	}
	if got := listAll(); !slices.Equal(got, want) {
		t.Fatalf("listing: %d keys, want %d", len(got), len(want))
	}
	if _, ok := b.(*backend).lists.get(dirItemsKey{stamp: dirStampOf(t, dir)}); !ok {
		t.Fatal("the wide directory's names were not kept")
	}
	// Between two pages of a listing: one name goes, one comes.
	opt := backends.ListOptions{MaxKeys: 100}
	first, err := b.List(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "f0300")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f0300x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want[300] = "f0300x"
	opt.Token = first.NextToken
	got := []string{}
	for _, o := range first.Objects {
		got = append(got, o.Key)
	}
	for opt.Token != "" {
		page, err := b.List(t.Context(), opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			got = append(got, o.Key)
		}
		opt.Token = page.NextToken
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listing across a change: %d keys, want %d (f0300x listed: %v)", len(got), len(want), slices.Contains(got, "f0300x"))
	}
}

func dirStampOf(t *testing.T, dir string) dirStamp {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return stampOf(&st)
}
