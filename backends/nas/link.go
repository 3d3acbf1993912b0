package nas

import (
	"context"
	"errors"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
)

var _ backends.Linker = (*backend)(nil)

// Symlink implements backends.Linker with a real symlink. The target is
// stored as given; the backend itself only ever follows links that stay
// inside the root (see resolveFlags).
func (b *backend) Symlink(ctx context.Context, key, target string) error {
	release, err := b.acquire(ctx)
	if err != nil {
		return mapErr("symlink", key, err)
	}
	defer release()
	p, err := parseKey("symlink", key, true)
	if err != nil {
		return err
	}
	if p.rel == "." || p.slash {
		return backends.Wrap("symlink", key, backends.ErrInvalid, errors.New("a link needs a file name"))
	}
	if target == "" {
		return backends.Wrap("symlink", key, backends.ErrInvalid, errors.New("empty link target"))
	}
	parent, base := splitRel(p.rel)
	pfd, created, err := b.mkdirAll(parent)
	if err != nil {
		return mapErr("symlink", key, err)
	}
	defer unix.Close(pfd)
	if err := unix.Symlinkat(target, pfd, base); err != nil {
		b.removeDirs(created)
		return mapErr("symlink", key, err)
	}
	return mapErr("symlink", key, syncDir(pfd))
}

// readLink returns the target of symlink name in directory dirfd.
func readLink(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
