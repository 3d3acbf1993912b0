package fstest

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// HoldNodes opens each of names under dir with O_PATH, which keeps its node
// in the kernel without sending the filesystem an OPEN, and returns a func
// that closes them (also run when the test ends). A test that counts the
// requests of warm reads, or compares inode numbers, holds its files so
// that a drop_caches elsewhere (another package's test in `go test ./...`)
// cannot make the kernel forget them. Release before an unmount: a held
// node keeps the mount busy.
func HoldNodes(t testing.TB, dir string, names []string) (release func()) {
	t.Helper()
	var fds []int
	release = func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
		fds = nil
	}
	t.Cleanup(release)
	for _, name := range names {
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			release()
			t.Fatalf("open %s O_PATH: %v", name, err)
		}
		fds = append(fds, fd)
	}
	return release
}
