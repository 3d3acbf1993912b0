package fs

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/mlfsd/mlfsd/backends"
)

// outLink is a symbolic link, kept in the backend as the store's own link
// (backends.Linker), so it can never be mistaken for a regular file.
type outLink struct {
	gofs.Inode
	t      *outTree
	target string // set at creation, never changed
	// fromStore: the link was in the store when the tree listed it, put
	// there by anyone who may write the store, not made through this
	// mount. Such a link is not followed out of the channel (Readlink).
	fromStore bool

	mu   sync.Mutex
	meta nodeMeta // GUARDED_BY(mu)
}

var (
	_ = (gofs.NodeReadlinker)((*outLink)(nil))
	_ = (gofs.NodeGetattrer)((*outLink)(nil))
	_ = (gofs.NodeSetattrer)((*outLink)(nil))
)

// Readlink gives the target, except for a link from the store that leads
// out of the channel: the kernel follows a link in the caller's own file
// system, so such a link, planted in a shared store, would redirect a
// job's writes (echo > ckpt) to a file of the job's host or container
// that the job never named (/etc/..., or a file beside the mountpoint).
// It is answered EACCES, so open, stat and every path through it fail
// without following it; lstat, unlink and rename of the link itself, which
// do not follow it, work. A link the job makes through the mount is its
// own and always followed.
func (l *outLink) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	if l.fromStore {
		if key := outKey(&l.Inode); leavesChannel(key, l.target) {
			l.t.log.Warn("output: not following a link from the store that leads out of the channel; replace it with a relative link inside the channel",
				"key", key, "target", l.target)
			return nil, syscall.EACCES
		}
	}
	return []byte(l.target), 0
}

// leavesChannel reports whether a link at key (a path relative to the
// channel's root) to target resolves outside the channel. An absolute
// target always does: where the channel appears in the caller's file
// system is not known here. A relative one is cleaned lexically, which
// errs on the safe side only: a link to a path that goes down a link and
// back up ("in/../x") is taken as it reads, and the links on its way are
// themselves checked when the kernel follows them.
func leavesChannel(key, target string) bool {
	if path.IsAbs(target) {
		return true
	}
	p := path.Join(path.Dir(key), target)
	return p == ".." || strings.HasPrefix(p, "../")
}

func (l *outLink) Getattr(ctx context.Context, _ gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.meta.fill(out, syscall.S_IFLNK, l.meta.mtime)
	out.Mode = syscall.S_IFLNK | 0o777 // links have no permissions of their own
	out.Nlink = l.meta.nlink()
	out.Size = uint64(len(l.target))
	return 0
}

// Setattr takes a new owner (lchown) or times (lutimes).
func (l *outLink) Setattr(ctx context.Context, _ gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	l.mu.Lock()
	l.meta.set(in)
	if mt, ok := in.GetMTime(); ok {
		l.meta.mtime = mt
	}
	l.mu.Unlock()
	return l.Getattr(ctx, nil, out)
}

// renameLink moves the link from to to, replacing what is at to (a file
// or a link, when replace is set): server-side where the store renames,
// else by making the new link and deleting the old one.
func (t *outTree) renameLink(ctx context.Context, from, to, target string, replace bool) error {
	if replace {
		if err := t.st.Remove(ctx, to); err != nil {
			return err
		}
	}
	if rn, ok := backends.As[backends.Renamer](t.b); ok {
		return rn.Rename(ctx, from, to)
	}
	lk, ok := backends.As[backends.Linker](t.b)
	if !ok {
		return backends.Wrap("rename", from, backends.ErrUnsupported, errors.New("the store has no links"))
	}
	if err := lk.Symlink(ctx, to, target); err != nil {
		return err
	}
	return t.b.Delete(ctx, from)
}

// moveLinksUnder moves the links below directory node dir from key from to
// key to, before writeback.Store.RenameDir moves the files. Stores that
// rename directories server-side move links with them; on the others the
// Store would copy a link object like a file, which is not a link (OSS
// copies the target's data, and fails on a dangling link).
func (t *outTree) moveLinksUnder(ctx context.Context, dir *gofs.Inode, from, to string) error {
	if _, ok := backends.As[backends.Renamer](t.b); ok {
		return nil
	}
	for name, ch := range dir.Children() {
		switch o := ch.Operations().(type) {
		case *outLink:
			if err := t.renameLink(ctx, childKey(from, name), childKey(to, name), o.target, false); err != nil {
				return err
			}
		case *outDir:
			if errno := o.load(ctx); errno != 0 {
				return errno
			}
			if err := t.moveLinksUnder(ctx, ch, childKey(from, name), childKey(to, name)); err != nil {
				return err
			}
		}
	}
	return nil
}
