package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOutputNameTooLong: a name the store cannot hold (NAS: 255 bytes per
// component) is refused at create, mkdir, symlink, rename, mknod and
// mkfifo with ENAMETOOLONG, so no file exists that could never be
// uploaded, and a lookup of one (stat, unlink) is ENAMETOOLONG, not
// ENOENT (POSIX; pjdfstest */02.t); the longest allowed name works end to
// end.
func TestOutputNameTooLong(t *testing.T) {
	back := t.TempDir()
	b := newNAS(t, back)
	m := testOutputMount(t, b, t.TempDir(), nil)
	long, ok := strings.Repeat("n", 256), strings.Repeat("k", 255)
	_, err := os.Create(filepath.Join(m.mnt, long))
	wantErrno(t, "create of a 256-byte name", err, syscall.ENAMETOOLONG)
	wantErrno(t, "mkdir of a 256-byte name", os.Mkdir(filepath.Join(m.mnt, long), 0o755), syscall.ENAMETOOLONG)
	wantErrno(t, "symlink of a 256-byte name", os.Symlink("x", filepath.Join(m.mnt, long)), syscall.ENAMETOOLONG)
	_, err = os.Lstat(filepath.Join(m.mnt, long))
	wantErrno(t, "stat of a 256-byte name", err, syscall.ENAMETOOLONG)
	wantErrno(t, "unlink of a 256-byte name", unix.Unlink(filepath.Join(m.mnt, long)), syscall.ENAMETOOLONG)
	wantErrno(t, "mkfifo of a 256-byte name", unix.Mkfifo(filepath.Join(m.mnt, long), 0o644), syscall.ENAMETOOLONG)
	wantErrno(t, "mknod of a 256-byte name", unix.Mknod(filepath.Join(m.mnt, long), unix.S_IFREG|0o644, 0), syscall.ENAMETOOLONG)
	// At the limit: a lookup of a missing name is ENOENT, and a FIFO and
	// a mknod'd file are made, found and removed.
	_, err = os.Lstat(filepath.Join(m.mnt, ok))
	wantErrno(t, "stat of a missing 255-byte name", err, syscall.ENOENT)
	must(t, unix.Mkfifo(filepath.Join(m.mnt, ok), 0o644))
	if st, err := os.Lstat(filepath.Join(m.mnt, ok)); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("stat of a 255-byte FIFO: %v, %v", st, err)
	}
	must(t, unix.Unlink(filepath.Join(m.mnt, ok)))
	must(t, unix.Mknod(filepath.Join(m.mnt, ok), unix.S_IFREG|0o644, 0))
	if st, err := os.Lstat(filepath.Join(m.mnt, ok)); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("stat of a 255-byte mknod'd file: %v, %v", st, err)
	}
	must(t, unix.Unlink(filepath.Join(m.mnt, ok)))
	must(t, os.WriteFile(filepath.Join(m.mnt, "short"), []byte("data"), 0o644))
	wantErrno(t, "rename to a 256-byte name", os.Rename(filepath.Join(m.mnt, "short"), filepath.Join(m.mnt, long)), syscall.ENAMETOOLONG)
	must(t, os.WriteFile(filepath.Join(m.mnt, ok), []byte("data"), 0o644))
	m.close(t) // drains: fails the test if any upload failed
	for _, name := range []string{"short", ok} {
		if got, err := os.ReadFile(filepath.Join(back, name)); err != nil || string(got) != "data" {
			t.Errorf("%s in the store: %q, %v", name[:min(len(name), 10)], got, err)
		}
	}
}

// TestOutputPathMaxBelowRoot: a NAS output resolves every key from a
// descriptor of its root, so a path of PATH_MAX-1 bytes below the mount
// (what pjdfstest's */03.t create) is created, uploaded and found in the
// store, however long the root's own path. A limit that counted the root
// refused it with ENAMETOOLONG.
func TestOutputPathMaxBelowRoot(t *testing.T) {
	back := t.TempDir()
	b := newNAS(t, back)
	m := testOutputMount(t, b, t.TempDir(), nil)
	// Components of 200 bytes and a last one that brings the path to
	// PATH_MAX-1 bytes, the longest a system call takes.
	var dirs []string
	rel := ""
	for len(rel)+1+200 < unix.PathMax-1-50 {
		if rel != "" {
			rel += "/"
		}
		rel += strings.Repeat(string(rune('a'+len(dirs)%26)), 200)
		dirs = append(dirs, rel)
	}
	rel += "/" + strings.Repeat("f", unix.PathMax-1-len(rel)-1)
	if len(rel) != unix.PathMax-1 {
		t.Fatalf("built a path of %d bytes", len(rel))
	}
	mfd, err := unix.Open(m.mnt, unix.O_PATH|unix.O_DIRECTORY, 0)
	must(t, err)
	for _, d := range dirs {
		must(t, unix.Mkdirat(mfd, d, 0o755))
	}
	fd, err := unix.Openat(mfd, rel, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, 0o642)
	unix.Close(mfd) // before the unmount, which it would hold up
	if err != nil {
		t.Fatalf("create of a %d-byte path: %v", len(rel), err)
	}
	if _, err := unix.Write(fd, []byte("data")); err != nil {
		t.Fatal(err)
	}
	must(t, unix.Close(fd))
	m.close(t) // drains: fails the test if the upload failed

	bfd, err := unix.Open(back, unix.O_PATH|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(bfd)
	fd, err = unix.Openat(bfd, rel, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("the file in the store: %v", err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 16)
	n, err := unix.Read(fd, buf)
	if err != nil || string(buf[:n]) != "data" {
		t.Errorf("the file in the store holds %q, %v", buf[:n], err)
	}
}
