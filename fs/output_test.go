package fs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/writeback"
)

// outMount is an output mount under test.
type outMount struct {
	mnt string
	st  *writeback.Store
	srv *mfs.Server
}

// testOutputMount mounts an output tree over b, staging in staging, and
// drains and unmounts it when the test ends (unless done earlier).
func testOutputMount(t *testing.T, b backends.Backend, staging string, tweak func(*writeback.Options)) *outMount {
	t.Helper()
	return testOutputMountMode(t, b, staging, tweak, false)
}

// ioModes are the two ways writes reach staging: the kernel writing the
// staging file directly (FUSE passthrough), or through the daemon.
var ioModes = []struct {
	name          string
	noPassthrough bool
}{{"passthrough", false}, {"daemon", true}}

func testOutputMountMode(t *testing.T, b backends.Backend, staging string, tweak func(*writeback.Options), noPassthrough bool) *outMount {
	t.Helper()
	return testOutputMountWith(t, b, staging, tweak, noPassthrough, mfs.MountOptions{})
}

// testOutputMountWith is testOutputMountMode with the mount's options.
func testOutputMountWith(t *testing.T, b backends.Backend, staging string, tweak func(*writeback.Options), noPassthrough bool, mo mfs.MountOptions) *outMount {
	t.Helper()
	opt := writeback.Options{StagingDir: staging, Registry: prometheus.NewRegistry(), Log: slog.Default(),
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	if tweak != nil {
		tweak(&opt)
	}
	st, err := writeback.Open(context.Background(), b, opt)
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	srv, err := mfs.MountOutput(context.Background(), mnt, mfs.OutputOptions{Store: st, FsyncDurable: true, NoPassthrough: noPassthrough, Log: slog.Default()}, mo)
	if err != nil {
		st.Close()
		t.Fatalf("FUSE mount failed (tests need /dev/fuse and root): %v", err)
	}
	m := &outMount{mnt: mnt, st: st, srv: srv}
	t.Cleanup(func() { m.close(t) })
	return m
}

// close drains, unmounts and closes the Store (idempotent).
func (m *outMount) close(t *testing.T) {
	if m.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.st.Drain(ctx, nil); err != nil {
		t.Errorf("drain: %v", err)
	}
	if err := m.srv.Unmount(); err != nil {
		t.Errorf("unmount: %v", err)
	}
	m.st.Close()
	m.srv = nil
}

// tree maps each path under root to "d" (directory), "l:target" (symlink)
// or the SHA-256 of a file's content.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case rel == ".":
		case d.IsDir():
			out[rel] = "d"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if errors.Is(err, fs.ErrPermission) {
				out[rel] = unfollowed // a link from the store that leaves the channel
				return nil
			}
			if err != nil {
				return err
			}
			out[rel] = "l:" + target
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("%x", sha256.Sum256(data))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// unfollowed stands, in a tree, for a link from the store that leads out of
// the channel, whose target the mount does not give.
const unfollowed = "l!unfollowed"

// asRemounted is tree t as a new mount shows it: the links that lead out of
// the channel, now from the store, are not followed.
func asRemounted(t map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range t {
		if target, ok := strings.CutPrefix(v, "l:"); ok {
			if p := path.Join(path.Dir(filepath.ToSlash(k)), target); path.IsAbs(target) || p == ".." || strings.HasPrefix(p, "../") {
				v = unfollowed
			}
		}
		out[k] = v
	}
	return out
}

func diffTrees(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	bad := 0
	for _, k := range keys {
		if got[k] != want[k] {
			if bad++; bad <= 10 {
				t.Errorf("%s: %s: got %.20q, want %.20q", what, k, got[k], want[k])
			}
		}
	}
}

// rwCheck is one POSIX property of a read-write directory. The table runs
// on a plain directory (to prove the checks) and on the output mount.
type rwCheck func(t *testing.T, dir string)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return string(b)
}

var rwChecks = map[string]rwCheck{
	"CreateWriteReadBack": func(t *testing.T, d string) {
		data := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16+7)
		must(t, os.WriteFile(filepath.Join(d, "f"), data, 0o644))
		if got := readFile(t, filepath.Join(d, "f")); got != string(data) {
			t.Fatalf("read back %d bytes, want %d", len(got), len(data))
		}
		st, err := os.Stat(filepath.Join(d, "f"))
		must(t, err)
		if st.Size() != int64(len(data)) || !st.Mode().IsRegular() {
			t.Fatalf("stat = %v %d", st.Mode(), st.Size())
		}
	},
	"ReadWhileWriting": func(t *testing.T, d string) {
		p := filepath.Join(d, "rw")
		w, err := os.Create(p)
		must(t, err)
		defer w.Close()
		w.WriteString("abc")
		if got := readFile(t, p); got != "abc" {
			t.Fatalf("other fd reads %q before close, want abc", got)
		}
	},
	"Append": func(t *testing.T, d string) {
		p := filepath.Join(d, "log")
		must(t, os.WriteFile(p, []byte("one\n"), 0o644))
		for _, line := range []string{"two\n", "three\n"} {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = f.WriteString(line)
			must(t, err)
			must(t, f.Close())
		}
		if got := readFile(t, p); got != "one\ntwo\nthree\n" {
			t.Fatalf("append gave %q", got)
		}
	},
	"RandomWritesAndHoles": func(t *testing.T, d string) {
		p := filepath.Join(d, "sparse")
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		must(t, err)
		_, err = f.WriteAt([]byte("end"), 1<<20)
		must(t, err)
		_, err = f.WriteAt([]byte("mid"), 4096)
		must(t, err)
		_, err = f.WriteAt([]byte("X"), 4097)
		must(t, err)
		must(t, f.Close())
		got := readFile(t, p)
		want := make([]byte, 1<<20+3)
		copy(want[4096:], "mXd")
		copy(want[1<<20:], "end")
		if got != string(want) {
			t.Fatalf("sparse file differs (len %d)", len(got))
		}
	},
	"TruncateShrinkExtend": func(t *testing.T, d string) {
		p := filepath.Join(d, "t")
		must(t, os.WriteFile(p, []byte("hello world"), 0o644))
		must(t, os.Truncate(p, 5))
		if got := readFile(t, p); got != "hello" {
			t.Fatalf("after truncate(5): %q", got)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		must(t, err)
		must(t, f.Truncate(8))
		must(t, f.Close())
		if got := readFile(t, p); got != "hello\x00\x00\x00" {
			t.Fatalf("after ftruncate(8): %q", got)
		}
		must(t, os.WriteFile(p, []byte("new"), 0o644)) // O_TRUNC
		if got := readFile(t, p); got != "new" {
			t.Fatalf("after O_TRUNC: %q", got)
		}
	},
	"Fsync": func(t *testing.T, d string) {
		f, err := os.Create(filepath.Join(d, "synced"))
		must(t, err)
		f.WriteString("durable")
		must(t, f.Sync())
		f.WriteString(" twice")
		must(t, f.Sync())
		must(t, f.Close())
		if got := readFile(t, filepath.Join(d, "synced")); got != "durable twice" {
			t.Fatalf("got %q", got)
		}
	},
	"ExclusiveCreate": func(t *testing.T, d string) {
		p := filepath.Join(d, "x")
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		must(t, err)
		f.Close()
		_, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		wantErrno(t, "O_EXCL on existing", err, syscall.EEXIST)
	},
	"MkdirRmdir": func(t *testing.T, d string) {
		p := filepath.Join(d, "a", "b", "c")
		must(t, os.MkdirAll(p, 0o755))
		wantErrno(t, "mkdir existing", os.Mkdir(p, 0o755), syscall.EEXIST)
		must(t, os.WriteFile(filepath.Join(p, "f"), []byte("x"), 0o644))
		wantErrno(t, "rmdir non-empty", syscall.Rmdir(p), syscall.ENOTEMPTY)
		wantErrno(t, "rmdir file", syscall.Rmdir(filepath.Join(p, "f")), syscall.ENOTDIR)
		wantErrno(t, "unlink dir", syscall.Unlink(p), syscall.EISDIR)
		must(t, os.Remove(filepath.Join(p, "f")))
		must(t, syscall.Rmdir(p))
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat after rmdir: %v", err)
		}
		st, err := os.Stat(filepath.Join(d, "a", "b"))
		must(t, err)
		if !st.IsDir() {
			t.Fatal("a/b is not a directory")
		}
	},
	"Unlink": func(t *testing.T, d string) {
		p := filepath.Join(d, "u")
		must(t, os.WriteFile(p, []byte("x"), 0o644))
		must(t, os.Remove(p))
		_, err := os.Stat(p)
		wantErrno(t, "stat unlinked", err, syscall.ENOENT)
		wantErrno(t, "unlink missing", os.Remove(p), syscall.ENOENT)
	},
	"UnlinkOpenFile": func(t *testing.T, d string) {
		p := filepath.Join(d, "open")
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		must(t, err)
		defer f.Close()
		f.WriteString("still here")
		must(t, os.Remove(p))
		buf := make([]byte, 32)
		n, _ := f.ReadAt(buf, 0)
		if string(buf[:n]) != "still here" {
			t.Fatalf("read via fd after unlink: %q", buf[:n])
		}
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("name still there after unlink: %v", err)
		}
	},
	"RenameFile": func(t *testing.T, d string) {
		must(t, os.WriteFile(filepath.Join(d, "a"), []byte("A"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "b"), []byte("B"), 0o644))
		must(t, os.Rename(filepath.Join(d, "a"), filepath.Join(d, "b"))) // replaces
		if got := readFile(t, filepath.Join(d, "b")); got != "A" {
			t.Fatalf("b = %q after rename over it", got)
		}
		must(t, os.Mkdir(filepath.Join(d, "sub"), 0o755))
		must(t, os.Rename(filepath.Join(d, "b"), filepath.Join(d, "sub", "c")))
		if got := readFile(t, filepath.Join(d, "sub", "c")); got != "A" {
			t.Fatalf("sub/c = %q", got)
		}
		_, err := os.Stat(filepath.Join(d, "b"))
		wantErrno(t, "old name", err, syscall.ENOENT)
		wantErrno(t, "rename missing", os.Rename(filepath.Join(d, "nope"), filepath.Join(d, "x")), syscall.ENOENT)
		must(t, os.Mkdir(filepath.Join(d, "sub2"), 0o755))
		wantErrno(t, "file over dir", syscall.Rename(filepath.Join(d, "sub", "c"), filepath.Join(d, "sub2")), syscall.EISDIR)
	},
	"RenameNoReplace": func(t *testing.T, d string) {
		must(t, os.WriteFile(filepath.Join(d, "a"), []byte("A"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "b"), []byte("B"), 0o644))
		err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(d, "a"), unix.AT_FDCWD, filepath.Join(d, "b"), unix.RENAME_NOREPLACE)
		wantErrno(t, "RENAME_NOREPLACE", err, syscall.EEXIST)
	},
	"RenameOpenFile": func(t *testing.T, d string) {
		f, err := os.Create(filepath.Join(d, "before"))
		must(t, err)
		f.WriteString("written ")
		must(t, os.Rename(filepath.Join(d, "before"), filepath.Join(d, "after")))
		f.WriteString("across a rename")
		must(t, f.Close())
		if got := readFile(t, filepath.Join(d, "after")); got != "written across a rename" {
			t.Fatalf("after = %q", got)
		}
	},
	"RenameOpenExistingFile": func(t *testing.T, d string) {
		must(t, os.WriteFile(filepath.Join(d, "old"), []byte("hello world"), 0o644))
		f, err := os.OpenFile(filepath.Join(d, "old"), os.O_RDWR, 0)
		must(t, err)
		f.WriteAt([]byte("J"), 0)
		must(t, os.Rename(filepath.Join(d, "old"), filepath.Join(d, "new")))
		f.WriteAt([]byte("!"), 11)
		must(t, f.Close())
		if got := readFile(t, filepath.Join(d, "new")); got != "Jello world!" {
			t.Fatalf("new = %q", got)
		}
		_, err = os.Stat(filepath.Join(d, "old"))
		wantErrno(t, "old name", err, syscall.ENOENT)
	},
	"RenameDir": func(t *testing.T, d string) {
		must(t, os.MkdirAll(filepath.Join(d, "x", "y"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "x", "y", "f"), []byte("F"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "x", "g"), []byte("G"), 0o644))
		must(t, os.Mkdir(filepath.Join(d, "empty"), 0o755))
		must(t, syscall.Rename(filepath.Join(d, "x"), filepath.Join(d, "empty"))) // over an empty dir (os.Rename refuses)
		if got := readFile(t, filepath.Join(d, "empty", "y", "f")); got != "F" {
			t.Fatalf("moved file = %q", got)
		}
		must(t, os.MkdirAll(filepath.Join(d, "full", "z"), 0o755))
		wantErrno(t, "over non-empty dir", syscall.Rename(filepath.Join(d, "empty"), filepath.Join(d, "full")), syscall.ENOTEMPTY)
		wantErrno(t, "into itself", syscall.Rename(filepath.Join(d, "full"), filepath.Join(d, "full", "z", "in")), syscall.EINVAL)
		must(t, os.WriteFile(filepath.Join(d, "file"), nil, 0o644))
		wantErrno(t, "dir over file", syscall.Rename(filepath.Join(d, "full"), filepath.Join(d, "file")), syscall.ENOTDIR)
	},
	"Symlink": func(t *testing.T, d string) {
		must(t, os.WriteFile(filepath.Join(d, "target"), []byte("T"), 0o644))
		must(t, os.Symlink("target", filepath.Join(d, "link")))
		got, err := os.Readlink(filepath.Join(d, "link"))
		must(t, err)
		if got != "target" {
			t.Fatalf("readlink = %q", got)
		}
		st, err := os.Lstat(filepath.Join(d, "link"))
		must(t, err)
		if st.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("lstat mode %v", st.Mode())
		}
		if got := readFile(t, filepath.Join(d, "link")); got != "T" {
			t.Fatalf("read through link = %q", got)
		}
		must(t, os.Rename(filepath.Join(d, "link"), filepath.Join(d, "link2")))
		if got, _ := os.Readlink(filepath.Join(d, "link2")); got != "target" {
			t.Fatalf("renamed link -> %q", got)
		}
		must(t, os.Remove(filepath.Join(d, "link2")))
		wantErrno(t, "symlink over existing", os.Symlink("x", filepath.Join(d, "target")), syscall.EEXIST)
	},
	"Readdir": func(t *testing.T, d string) {
		for _, n := range []string{"b", "a", "c d", "ünï"} {
			must(t, os.WriteFile(filepath.Join(d, n), nil, 0o644))
		}
		must(t, os.Mkdir(filepath.Join(d, "dir"), 0o755))
		ents, err := os.ReadDir(d)
		must(t, err)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
			if e.Name() == "dir" && !e.IsDir() {
				t.Error("dir is not listed as a directory")
			}
		}
		if fmt.Sprint(names) != fmt.Sprint([]string{"a", "b", "c d", "dir", "ünï"}) {
			t.Fatalf("readdir = %q", names)
		}
	},
	"Chmod": func(t *testing.T, d string) {
		p := filepath.Join(d, "m")
		must(t, os.WriteFile(p, nil, 0o644))
		must(t, os.Chmod(p, 0o600))
		st, err := os.Stat(p)
		must(t, err)
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v after chmod 600", st.Mode())
		}
	},
}

func runRW(t *testing.T, root string) {
	names := make([]string, 0, len(rwChecks))
	for n := range rwChecks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			d := filepath.Join(root, n)
			must(t, os.Mkdir(d, 0o755))
			rwChecks[n](t, d)
		})
	}
}

// TestOutputPOSIX runs the POSIX table on a plain directory (the reference)
// and on an output mount; then, after draining, checks the backend holds
// what the mount showed, and a fresh mount shows it again.
func TestOutputPOSIX(t *testing.T) {
	umask := syscall.Umask(0o022)
	defer syscall.Umask(umask)
	t.Run("plain", func(t *testing.T) { runRW(t, t.TempDir()) })
	for _, mode := range ioModes {
		t.Run(mode.name, func(t *testing.T) {
			back := t.TempDir()
			b := newNAS(t, back)
			// A small stream threshold so the daemon mode streams too.
			small := func(o *writeback.Options) { o.StreamThreshold = 64 << 10 }
			m := testOutputMountMode(t, b, t.TempDir(), small, mode.noPassthrough)
			runRW(t, m.mnt)
			shown := tree(t, m.mnt)
			m.close(t)
			m2 := testOutputMount(t, newNAS(t, back), t.TempDir(), nil)
			diffTrees(t, "remount", tree(t, m2.mnt), shown)
		})
	}
}
