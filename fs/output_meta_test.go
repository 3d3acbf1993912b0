package fs_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// newOSSEmu returns a function opening OSS backends on one emulated bucket
// prefix (oss://bkt/out/), so a test can mount it again.
func newOSSEmu(t *testing.T) func() backends.Backend {
	t.Helper()
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	t.Setenv("OSS_SESSION_TOKEN", "")
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "bkt"), 0o755))
	_, endpoint := ossemutest.Start(t, root, ossemu.Options{})
	u, err := backends.ParseURI("oss://bkt/out/")
	must(t, err)
	return func() backends.Backend {
		b, err := oss.New(context.Background(), u, oss.Options{Endpoint: endpoint}, nil)
		must(t, err)
		t.Cleanup(func() { b.Close() })
		return b
	}
}

// TestOutputLinksAreStoreLinks: links are kept as the store's own links,
// so no regular name can be mistaken for one after a remount (the old
// "NAME.mlfsdlink" objects did exactly that) — over NAS and OSS, including
// links inside a directory renamed on a store without server-side rename.
func TestOutputLinksAreStoreLinks(t *testing.T) {
	stores := map[string]func(t *testing.T) func() backends.Backend{
		"nas": func(t *testing.T) func() backends.Backend {
			dir := t.TempDir()
			return func() backends.Backend { return newNAS(t, dir) }
		},
		"oss": newOSSEmu,
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			newBackend := open(t)
			m := testOutputMount(t, newBackend(), t.TempDir(), nil)
			p := func(n string) string { return filepath.Join(m.mnt, n) }
			must(t, os.WriteFile(p("x.mlfsdlink"), []byte("a regular file"), 0o644))
			must(t, os.Symlink("x.mlfsdlink", p("q")))
			must(t, os.WriteFile(p("q.mlfsdlink"), []byte("beside link q"), 0o644))
			must(t, os.Symlink("no/such/target", p("dangling")))
			must(t, os.MkdirAll(p("d/e"), 0o755))
			must(t, os.Symlink("../../q.mlfsdlink", p("d/e/up")))
			must(t, os.Rename(p("d"), p("moved")))
			must(t, os.Symlink("first", p("r1")))
			must(t, os.Symlink("second", p("r2")))
			must(t, os.Rename(p("r1"), p("r2")))
			must(t, os.WriteFile(p("over"), []byte("file"), 0o644))
			must(t, os.Symlink("over-target", p("l3")))
			must(t, os.Rename(p("l3"), p("over")))
			shown := tree(t, m.mnt)
			sum := func(s string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(s))) }
			want := map[string]string{
				"x.mlfsdlink": sum("a regular file"), "q.mlfsdlink": sum("beside link q"),
				"q": "l:x.mlfsdlink", "dangling": "l:no/such/target", "r2": "l:first", "over": "l:over-target",
				"moved": "d", "moved/e": "d", "moved/e/up": "l:../../q.mlfsdlink",
			}
			diffTrees(t, "mount", shown, want)
			m.close(t)
			m2 := testOutputMount(t, newBackend(), t.TempDir(), nil)
			again := tree(t, m2.mnt)
			diffTrees(t, "remount", again, want)
			st, err := os.Lstat(filepath.Join(m2.mnt, "x.mlfsdlink"))
			must(t, err)
			if !st.Mode().IsRegular() {
				t.Errorf("x.mlfsdlink after remount: mode %v, want a regular file", st.Mode())
			}
			if got := readFile(t, filepath.Join(m2.mnt, "q")); got != "a regular file" {
				t.Errorf("read through link q = %q", got)
			}
			must(t, os.Remove(filepath.Join(m2.mnt, "dangling")))
			must(t, os.Remove(filepath.Join(m2.mnt, "q")))
			if got := readFile(t, filepath.Join(m2.mnt, "q.mlfsdlink")); got != "beside link q" {
				t.Errorf("q.mlfsdlink after removing link q = %q", got)
			}
		})
	}
}

func statT(t *testing.T, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	return &st
}

// TestOutputMetadata: times, link counts and modes as POSIX has them.
func TestOutputMetadata(t *testing.T) {
	store := t.TempDir()
	m := testOutputMount(t, newNAS(t, store), t.TempDir(), nil)
	p := func(n string) string { return filepath.Join(m.mnt, n) }
	umask := syscall.Umask(0o022)
	defer syscall.Umask(umask)

	t.Run("Atime", func(t *testing.T) {
		must(t, os.WriteFile(p("a"), []byte("x"), 0o644))
		st := statT(t, p("a"))
		if st.Atim.Sec == 0 || st.Atim != st.Mtim {
			t.Errorf("new file: atime %v, mtime %v; want atime = mtime", st.Atim, st.Mtim)
		}
		at, mt := time.Unix(1_000_000, 5), time.Unix(2_000_000, 7)
		must(t, os.Chtimes(p("a"), at, mt))
		st = statT(t, p("a"))
		if time.Unix(st.Atim.Unix()) != at || time.Unix(st.Mtim.Unix()) != mt {
			t.Errorf("after utimes: atime %v mtime %v, want %v %v", time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix()), at, mt)
		}
		if st.Ctim.Sec < time.Now().Add(-time.Hour).Unix() {
			t.Errorf("ctime %v after utimes: want about now", st.Ctim)
		}
		must(t, os.Mkdir(p("adir"), 0o755))
		if st := statT(t, p("adir")); st.Atim.Sec == 0 {
			t.Errorf("new directory: atime 0")
		}
	})
	t.Run("DirLinks", func(t *testing.T) {
		must(t, os.MkdirAll(p("n/a"), 0o755))
		must(t, os.Mkdir(p("n/b"), 0o755))
		must(t, os.WriteFile(p("n/f"), nil, 0o644))
		if st := statT(t, p("n")); st.Nlink != 4 {
			t.Errorf("nlink of a directory with 2 sub-directories and a file = %d, want 4", st.Nlink)
		}
		must(t, os.Remove(p("n/b")))
		if st := statT(t, p("n")); st.Nlink != 3 {
			t.Errorf("nlink after rmdir = %d, want 3", st.Nlink)
		}
		if st := statT(t, p("n/a")); st.Nlink != 2 {
			t.Errorf("nlink of an empty directory = %d, want 2", st.Nlink)
		}
	})
	t.Run("UnlinkedOpen", func(t *testing.T) {
		must(t, os.WriteFile(p("u"), []byte("still here"), 0o644))
		// Opened once uploaded and freed from staging (as a file written
		// long ago): only the backend holds its bytes, which the unlink
		// deletes. Without this wait the test covered that case only when
		// the upload won a race against the open (~3 runs in 100).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		must(t, m.st.WaitUnstaged(ctx, "u"))
		f, err := os.Open(p("u"))
		must(t, err)
		defer f.Close()
		must(t, os.Remove(p("u")))
		var st unix.Stat_t
		must(t, unix.Fstat(int(f.Fd()), &st))
		if st.Nlink != 0 || st.Size != 10 {
			t.Errorf("fstat of an open, unlinked file: nlink %d size %d, want 0 and 10", st.Nlink, st.Size)
		}
		buf := make([]byte, 32)
		n, err := f.ReadAt(buf, 0)
		if string(buf[:n]) != "still here" {
			t.Errorf("read of an open, unlinked file: %q, %v", buf[:n], err)
		}
		if _, err := os.Stat(filepath.Join(store, "u")); !os.IsNotExist(err) {
			t.Errorf("the unlinked file is still in the backend: %v", err)
		}
	})
	t.Run("UnlinkedOpenNameReused", func(t *testing.T) {
		// As UnlinkedOpen, then the name is used again while the old
		// descriptors are open: a new file under it, and (for a second
		// open file) another file renamed over it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		openUploaded := func(name, content string) *os.File {
			must(t, os.WriteFile(p(name), []byte(content), 0o644))
			must(t, m.st.WaitUnstaged(ctx, name))
			f, err := os.Open(p(name))
			must(t, err)
			t.Cleanup(func() { f.Close() })
			return f
		}
		readBack := func(f *os.File, want string) {
			t.Helper()
			buf := make([]byte, 64)
			n, err := f.ReadAt(buf, 0)
			if string(buf[:n]) != want {
				t.Errorf("read of the old descriptor: %q, %v; want %q", buf[:n], err, want)
			}
		}
		fv := openUploaded("v", "old v")
		must(t, os.Remove(p("v")))
		must(t, os.WriteFile(p("v"), []byte("the new v"), 0o644))
		fw := openUploaded("w", "old w")
		must(t, os.WriteFile(p("w2"), []byte("renamed over w"), 0o644))
		must(t, os.Rename(p("w2"), p("w")))
		readBack(fv, "old v")
		readBack(fw, "old w")
		must(t, fv.Close())
		must(t, fw.Close())
		must(t, m.st.Drain(ctx, nil))
		for name, want := range map[string]string{"v": "the new v", "w": "renamed over w"} {
			for _, root := range []string{m.mnt, store} {
				got, err := os.ReadFile(filepath.Join(root, name))
				if err != nil || string(got) != want {
					t.Errorf("%s under %s after the old descriptor closed: %q, %v; want %q", name, root, got, err, want)
				}
			}
		}
	})
	t.Run("ModeZero", func(t *testing.T) {
		fd, err := unix.Open(p("zero"), unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, 0)
		must(t, err)
		unix.Close(fd)
		if st := statT(t, p("zero")); st.Mode != unix.S_IFREG {
			t.Errorf("file created with mode 0: mode %o", st.Mode)
		}
		must(t, unix.Mkdir(p("zdir"), 0))
		if st := statT(t, p("zdir")); st.Mode != unix.S_IFDIR {
			t.Errorf("directory made with mode 0: mode %o", st.Mode)
		}
		must(t, unix.Mkdir(p("masked"), 0o777))
		if st := statT(t, p("masked")); st.Mode&0o7777 != 0o755 {
			t.Errorf("mkdir 0777 under umask 022: mode %o", st.Mode&0o7777)
		}
	})
	t.Run("Chown", func(t *testing.T) {
		must(t, os.WriteFile(p("owned"), nil, 0o644))
		st := statT(t, p("owned"))
		if st.Uid != uint32(os.Getuid()) || st.Gid != uint32(os.Getgid()) {
			t.Errorf("new file owned by %d:%d, want the creator %d:%d", st.Uid, st.Gid, os.Getuid(), os.Getgid())
		}
		must(t, os.Lchown(p("owned"), 65534, 65534))
		if st := statT(t, p("owned")); st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("after chown 65534:65534: %d:%d", st.Uid, st.Gid)
		}
	})
}

// asNobody runs name args as uid/gid 65534 and returns its combined output
// and error.
func asNobody(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestOutputPermissions: the kernel enforces the modes and owners the
// mount reports (default_permissions): another local user (65534, in a
// subprocess) cannot read a 0600 file, delete in a 0700 directory or in a
// directory it cannot write, nor chmod what it does not own; it can read
// what is readable and create where it may, owning what it creates.
func TestOutputPermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (FUSE mounts with allow_other, and a subprocess as another user)")
	}
	m := testOutputMount(t, newNAS(t, t.TempDir()), t.TempDir(), nil)
	// t.TempDir makes 0700 directories: let 65534 reach the mount.
	for d := m.mnt; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		must(t, os.Chmod(d, 0o755))
	}
	p := func(n string) string { return filepath.Join(m.mnt, n) }
	must(t, os.Chmod(m.mnt, 0o755))
	must(t, os.WriteFile(p("secret"), []byte("s"), 0o600))
	must(t, os.WriteFile(p("public"), []byte("public data"), 0o644))
	must(t, os.Mkdir(p("private"), 0o700))
	must(t, os.WriteFile(p("private/f"), nil, 0o666))
	must(t, os.Mkdir(p("shared"), 0o755))
	must(t, os.WriteFile(p("shared/f"), nil, 0o666))
	must(t, os.Mkdir(p("open"), 0o777))
	must(t, os.Chmod(p("open"), 0o777))

	mustFail := func(what, name string, args ...string) {
		t.Helper()
		out, err := asNobody(t, name, args...)
		if err == nil {
			t.Errorf("%s as 65534 succeeded: %s", what, out)
		} else if !strings.Contains(out, "Permission denied") && !strings.Contains(out, "Operation not permitted") {
			t.Errorf("%s as 65534: %v, output %q; want permission denied", what, err, out)
		}
	}
	mustFail("reading a 0600 file", "cat", p("secret"))
	mustFail("deleting in a 0700 directory", "rm", "-f", p("private/f"))
	mustFail("listing a 0700 directory", "ls", p("private"))
	mustFail("deleting in a 0755 directory of another user", "rm", "-f", p("shared/f"))
	mustFail("writing a 0644 file of another user", "sh", "-c", "echo x >> "+p("public"))
	mustFail("chmod of another user's file", "chmod", "666", p("secret"))
	mustFail("creating in the 0755 root of another user", "touch", p("mine"))

	if out, err := asNobody(t, "cat", p("public")); err != nil || out != "public data" {
		t.Errorf("reading a 0644 file as 65534: %v, %q", err, out)
	}
	if out, err := asNobody(t, "sh", "-c", "echo hi > "+p("open/mine")+" && chmod 600 "+p("open/mine")); err != nil {
		t.Errorf("creating in a 0777 directory as 65534: %v, %s", err, out)
	}
	st := statT(t, p("open/mine"))
	if st.Uid != 65534 || st.Gid != 65534 || st.Mode&0o777 != 0o600 {
		t.Errorf("file made by 65534: owner %d:%d mode %o", st.Uid, st.Gid, st.Mode&0o777)
	}
	for _, f := range []string{"secret", "private/f", "shared/f", "public"} {
		if _, err := os.Stat(p(f)); err != nil {
			t.Errorf("%s after the refused attempts: %v", f, err)
		}
	}
	if got := readFile(t, p("public")); got != "public data" {
		t.Errorf("public after a refused append: %q", got)
	}
}

// TestOutputSpecialFiles: FIFOs, sockets and device nodes exist in the
// mount (the kernel serves FIFOs itself), can be renamed and removed, and
// are never stored: a remount does not show them, and the backend holds
// nothing for them.
func TestOutputSpecialFiles(t *testing.T) {
	back := t.TempDir()
	m := testOutputMount(t, newNAS(t, back), t.TempDir(), nil)
	p := func(n string) string { return filepath.Join(m.mnt, n) }
	must(t, unix.Mkfifo(p("fifo"), 0o640))
	must(t, unix.Mknod(p("sock"), unix.S_IFSOCK|0o600, 0))
	must(t, unix.Mknod(p("chr"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))))
	must(t, unix.Mknod(p("reg"), unix.S_IFREG|0o600, 0))
	for _, c := range []struct {
		name string
		mode uint32
	}{{"fifo", unix.S_IFIFO | 0o640}, {"sock", unix.S_IFSOCK | 0o600}, {"chr", unix.S_IFCHR | 0o644}, {"reg", unix.S_IFREG | 0o600}} {
		if st := statT(t, p(c.name)); st.Mode != c.mode {
			t.Errorf("%s: mode %o, want %o", c.name, st.Mode, c.mode)
		}
	}
	if st := statT(t, p("chr")); st.Rdev != unix.Mkdev(1, 3) {
		t.Errorf("chr: rdev %x", st.Rdev)
	}
	wantErrno(t, "mkfifo over a FIFO", unix.Mkfifo(p("fifo"), 0o600), syscall.EEXIST)
	fd, err := unix.Open(p("fifo"), unix.O_RDWR, 0)
	must(t, err)
	if _, err := unix.Write(fd, []byte("through the fifo")); err != nil {
		t.Errorf("write to the FIFO: %v", err)
	}
	buf := make([]byte, 64)
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil || string(buf[:n]) != "through the fifo" {
		t.Errorf("read from the FIFO: %q, %v", buf[:n], err)
	}
	must(t, os.Rename(p("fifo"), p("fifo2")))
	must(t, os.WriteFile(p("file"), []byte("f"), 0o644))
	must(t, os.Rename(p("file"), p("sock"))) // a file over a socket
	must(t, os.Remove(p("chr")))
	if got := readFile(t, p("sock")); got != "f" {
		t.Errorf("file renamed over a socket reads %q", got)
	}
	m.close(t)
	ents, err := os.ReadDir(back)
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if fmt.Sprint(names) != "[reg sock]" {
		t.Errorf("backend holds %q, want [reg sock] (regular files only)", names)
	}
	m2 := testOutputMount(t, newNAS(t, back), t.TempDir(), nil)
	if _, err := os.Lstat(filepath.Join(m2.mnt, "fifo2")); !os.IsNotExist(err) {
		t.Errorf("FIFO after a remount: %v, want it gone", err)
	}
}

// TestOutputHandoverWaitsForUnlinkedOpen: a descriptor open on an
// unlinked file (whose data only this daemon's staging holds) keeps the
// mount from being handed over, and still reads the file after the
// refusal.
func TestOutputHandoverWaitsForUnlinkedOpen(t *testing.T) {
	m := testOutputMount(t, newNAS(t, t.TempDir()), t.TempDir(), nil)
	p := filepath.Join(m.mnt, "gone")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must(t, os.WriteFile(p, []byte("kept for the descriptor"), 0o644))
	must(t, m.st.WaitUnstaged(ctx, "gone"))
	f, err := os.Open(p)
	must(t, err)
	defer f.Close()
	must(t, os.Remove(p))
	must(t, m.srv.Freeze(ctx))
	_, err = m.srv.Snapshot()
	m.srv.Thaw()
	if err == nil || !strings.Contains(err.Error(), "no path") {
		t.Fatalf("snapshot with an unlinked file open: %v, want a refusal", err)
	}
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if string(buf[:n]) != "kept for the descriptor" {
		t.Fatalf("read after the refused handover: %q, %v", buf[:n], err)
	}
}
