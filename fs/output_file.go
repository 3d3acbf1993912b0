package fs

import (
	"context"
	"io"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/writeback"
)

// outFile is a regular file of the output tree. Its data and size live in
// the writeback.Store once the Store has seen it; before that, in base.
type outFile struct {
	gofs.Inode
	t *outTree

	mu    sync.Mutex
	base  *backends.ObjectInfo // GUARDED_BY(mu): from the listing; nil for a file created here
	meta  nodeMeta             // GUARDED_BY(mu): mode, owner, atime, ctime (output_meta.go)
	mtime time.Time            // GUARDED_BY(mu): set by utimens; zero = from the data
}

var (
	_ = (gofs.NodeOpener)((*outFile)(nil))
	_ = (gofs.NodeGetattrer)((*outFile)(nil))
	_ = (gofs.NodeSetattrer)((*outFile)(nil))
)

// stat returns the file's size and time: the open handle's view, else the
// Store's, else the listing's.
func (f *outFile) stat(fh gofs.FileHandle) backends.ObjectInfo {
	if oh := asOutHandle(fh); oh != nil {
		return oh.h.Stat()
	}
	if info, ok := f.t.st.Stat(outKey(&f.Inode)); ok {
		return info
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.base != nil {
		return *f.base
	}
	return backends.ObjectInfo{}
}

func (f *outFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	info := f.stat(fh)
	f.mu.Lock()
	defer f.mu.Unlock()
	mt := info.ModTime
	if !f.mtime.IsZero() {
		mt = f.mtime
	}
	f.meta.fill(out, syscall.S_IFREG, mt)
	out.Nlink = f.meta.nlink()
	out.Size = uint64(info.Size)
	out.Blocks = (out.Size + 511) / 512
	return 0
}

func (f *outFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if errno := f.truncate(ctx, fh, int64(size)); errno != 0 {
			return errno
		}
	}
	f.mu.Lock()
	f.meta.set(in)
	if mt, ok := in.GetMTime(); ok {
		f.mtime = mt
	} else if _, ok := in.GetSize(); ok {
		f.mtime = time.Time{}
	}
	f.mu.Unlock()
	return f.Getattr(ctx, fh, out)
}

// truncate sets the size through the open handle, or through a handle of
// its own (truncate(2) on a path), which it closes like close(2) would.
func (f *outFile) truncate(ctx context.Context, fh gofs.FileHandle, size int64) syscall.Errno {
	key := outKey(&f.Inode)
	if oh := asOutHandle(fh); oh != nil && oh.write {
		return ToErrno(f.t.log, "truncate", key, oh.h.Truncate(ctx, size))
	}
	h, err := f.t.st.Open(ctx, key, f.baseInfo(), writeback.OpenFlags{Write: true, Truncate: size == 0})
	if err == nil {
		if size != 0 {
			err = h.Truncate(ctx, size)
		}
		if err == nil {
			err = h.Flush(ctx)
		}
		if rerr := h.Release(); err == nil {
			err = rerr
		}
	}
	return ToErrno(f.t.log, "truncate", key, err)
}

func asOutHandle(fh gofs.FileHandle) *outHandle {
	switch h := fh.(type) {
	case *outHandle:
		return h
	case *outPTHandle:
		return h.outHandle
	}
	return nil
}

func (f *outFile) baseInfo() *backends.ObjectInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.base == nil {
		return nil
	}
	b := *f.base
	return &b
}

func (f *outFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	key := outKey(&f.Inode)
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	h, err := f.t.st.Open(ctx, key, f.baseInfo(), writeback.OpenFlags{Write: write, Truncate: write && flags&syscall.O_TRUNC != 0,
		Passthrough: !f.t.opt.NoPassthrough})
	if err != nil {
		return nil, 0, ToErrno(f.t.log, "open", key, err)
	}
	if write && flags&syscall.O_TRUNC != 0 {
		f.mu.Lock()
		f.mtime = time.Time{}
		f.mu.Unlock()
	}
	return newOutHandle(ctx, f, h, write), 0, 0
}

// newOutHandle wraps h, opened by the request in ctx; a handle staged for
// passthrough offers its staging file to the kernel.
func newOutHandle(ctx context.Context, f *outFile, h *writeback.Handle, write bool) gofs.FileHandle {
	oh := &outHandle{f: f, h: h, write: write}
	if write {
		oh.opener = callerProcess(ctx)
	}
	if _, ok := h.PassthroughFd(); ok {
		return &outPTHandle{oh}
	}
	return oh
}

// outPTHandle is an outHandle whose reads and writes the kernel sends to
// the staging file directly (FUSE passthrough). The kernel keeps the first
// registered file for every passthrough open of the inode, and
// writeback.Store keeps that file in place while passthrough handles are
// open.
type outPTHandle struct{ *outHandle }

var _ = (gofs.FilePassthroughFder)((*outPTHandle)(nil))

// PassthroughFd implements gofs.FilePassthroughFder.
func (p *outPTHandle) PassthroughFd() (int, bool) { return p.h.PassthroughFd() }

// outHandle is an open file of the output tree.
type outHandle struct {
	f     *outFile
	h     *writeback.Handle
	write bool
	// opener is the process that opened a write handle (0 when unknown:
	// a handle a previous daemon opened). Only its close seals the file.
	opener int
}

var (
	_ = (gofs.FileReader)((*outHandle)(nil))
	_ = (gofs.FileWriter)((*outHandle)(nil))
	_ = (gofs.FileFlusher)((*outHandle)(nil))
	_ = (gofs.FileFsyncer)((*outHandle)(nil))
	_ = (gofs.FileReleaser)((*outHandle)(nil))
)

func (oh *outHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := oh.h.ReadAt(ctx, dest, off)
	if err != nil && err != io.EOF {
		return nil, ToErrno(oh.f.t.log, "read", oh.h.Key(), err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (oh *outHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := oh.h.WriteAt(ctx, data, off)
	if err != nil {
		return uint32(n), ToErrno(oh.f.t.log, "write", oh.h.Key(), err)
	}
	oh.f.mu.Lock()
	oh.f.mtime = time.Time{}
	oh.f.mu.Unlock()
	return uint32(n), 0
}

// Flush is close(2): it returns once the file is journaled for upload.
//
// Every process that shares the open file flushes it when it closes its
// descriptor, a child made by fork() included, at its exit or at exec (a
// close-on-exec descriptor). Such a close says nothing about the writer
// being done: sealing there published a half-written file. So only a close
// by the process that opened the file seals it; the bytes written
// through the shared file after the opener's close (a child still writing)
// are sealed at the last close of all (Release). An opener we cannot name
// (0) seals at every close, as before.
func (oh *outHandle) Flush(ctx context.Context) syscall.Errno {
	if !oh.write {
		return 0
	}
	if oh.opener != 0 {
		if p := callerProcess(ctx); p != 0 && p != oh.opener {
			return 0
		}
	}
	return ToErrno(oh.f.t.log, "close", oh.h.Key(), oh.h.Flush(ctx))
}

// Fsync returns once the file is durable in the backend (FsyncDurable) or
// journaled locally.
func (oh *outHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return ToErrno(oh.f.t.log, "fsync", oh.h.Key(), oh.h.Sync(ctx, oh.f.t.opt.FsyncDurable))
}

func (oh *outHandle) Release(ctx context.Context) syscall.Errno {
	return ToErrno(oh.f.t.log, "release", oh.h.Key(), oh.h.Release())
}
