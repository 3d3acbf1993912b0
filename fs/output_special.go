package fs

import (
	"context"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/mlfsd/mlfsd/writeback"
)

// outSpecial is a FIFO, socket or device node. No store can hold one, so
// it lives in the mount only: never uploaded, gone after a remount. The
// kernel serves FIFOs and sockets itself; devices do not open (nodev).
type outSpecial struct {
	gofs.Inode
	rdev uint32

	mu   sync.Mutex
	meta nodeMeta // GUARDED_BY(mu)
}

var (
	_ = (gofs.NodeGetattrer)((*outSpecial)(nil))
	_ = (gofs.NodeSetattrer)((*outSpecial)(nil))
	_ = (gofs.NodeMknoder)((*outDir)(nil))
)

func (n *outSpecial) Getattr(ctx context.Context, _ gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.meta.fill(out, n.StableAttr().Mode&syscall.S_IFMT, n.meta.mtime)
	out.Nlink = n.meta.nlink()
	out.Rdev = n.rdev
	return 0
}

func (n *outSpecial) Setattr(ctx context.Context, _ gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	n.meta.set(in)
	if mt, ok := in.GetMTime(); ok {
		n.meta.mtime = mt
	}
	n.mu.Unlock()
	return n.Getattr(ctx, nil, out)
}

// Mknod makes a FIFO, socket (bind(2) on a path) or device node in the
// mount, or an empty regular file, which is stored like any file.
func (d *outDir) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := d.load(ctx); errno != 0 {
		return nil, errno
	}
	if d.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	// A FIFO or device is not uploaded, but a name create would refuse
	// is refused here too, so every node type has the same limits.
	key := childKey(outKey(&d.Inode), name)
	if err := d.t.st.CheckName(key); err != nil {
		return nil, ToErrno(d.t.log, "mknod", key, err)
	}
	typ := mode & syscall.S_IFMT
	switch typ {
	case syscall.S_IFREG, 0:
		h, err := d.t.st.Open(ctx, key, nil, writeback.OpenFlags{Write: true, Truncate: true})
		if err == nil {
			err = h.Flush(ctx)
			if rerr := h.Release(); err == nil {
				err = rerr
			}
		}
		if err != nil {
			return nil, ToErrno(d.t.log, "mknod", key, err)
		}
		f := &outFile{t: d.t, meta: d.newMeta(ctx, mode, false)}
		ch := d.newChild(ctx, outKey(&d.Inode), name, f, syscall.S_IFREG)
		var ao fuse.AttrOut
		f.Getattr(ctx, nil, &ao)
		out.Attr = ao.Attr
		d.touch()
		return ch, 0
	case syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFCHR, syscall.S_IFBLK:
	default:
		return nil, syscall.EINVAL
	}
	n := &outSpecial{rdev: rdev, meta: d.newMeta(ctx, mode, false)}
	ch := d.newChild(ctx, outKey(&d.Inode), name, n, typ)
	var ao fuse.AttrOut
	n.Getattr(ctx, nil, &ao)
	out.Attr = ao.Attr
	d.touch()
	return ch, 0
}
