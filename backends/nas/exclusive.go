package nas

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
)

var _ backends.ExclusiveWriter = (*backend)(nil)

// WriteExclusive implements backends.ExclusiveWriter: the data goes to a
// hidden temporary file, synced, which is then hard-linked under key.
// link(2) fails with EEXIST when anything is at key, atomically, on a
// local file system and on NFS alike (where O_EXCL on the final name was
// long unsafe), so of racing writers exactly one publishes; the others'
// temporary files are removed and they get ErrExist.
func (b *backend) WriteExclusive(ctx context.Context, key string, data []byte) (backends.ObjectInfo, error) {
	w, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: int64(len(data))})
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	nw := w.(*writer)
	if nw.marker {
		nw.Abort(ctx)
		return backends.ObjectInfo{}, backends.Wrap("write", key, backends.ErrInvalid, errors.New("an exclusive write needs a file key"))
	}
	if _, err := nw.Write(data); err != nil {
		nw.Abort(ctx)
		return backends.ObjectInfo{}, err
	}
	release, err := b.acquire(ctx)
	if err != nil {
		nw.abort(false)
		return backends.ObjectInfo{}, mapErr("write", key, err)
	}
	defer release()
	oi, err := nw.commitLink()
	if err != nil {
		nw.abort(!errors.Is(err, unix.EEXIST)) // keep the directories the winner uses
		return backends.ObjectInfo{}, mapErr("write", nw.key, err)
	}
	nw.state = committed
	nw.closeDir()
	return oi, nil
}

// commitLink publishes the temporary file under the key with link(2),
// which never replaces an existing name, then removes the temporary name.
func (w *writer) commitLink() (backends.ObjectInfo, error) {
	if err := w.f.Sync(); err != nil {
		return backends.ObjectInfo{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(w.f.Fd()), &st); err != nil {
		return backends.ObjectInfo{}, err
	}
	if err := w.f.Close(); err != nil {
		return backends.ObjectInfo{}, err
	}
	w.f = nil
	if err := unix.Linkat(w.dirfd, w.tmp, w.dirfd, w.base, 0); err != nil {
		return backends.ObjectInfo{}, err
	}
	w.removeTemp()
	if err := syncDir(w.dirfd); err != nil {
		return backends.ObjectInfo{}, fmt.Errorf("published, but syncing its directory failed: %w", err)
	}
	// The link count is now 1 again (the temporary name is gone); the
	// version (inode, mtime, size) is the one read before the link.
	return info(w.key, &st), nil
}
