package fs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Observer is told of every FUSE request an observed mount answers: its
// operation name (lookup, getattr, read, write, ...) and how long the
// daemon took to answer it. It must be safe for concurrent use and cheap.
// go-fuse's own latency hook (Server.RecordLatencies) is a no-op since
// v2.6, hence this wrapper.
type Observer func(op string, d time.Duration)

// observedFS times the requests that carry a training job's I/O and its
// metadata calls; the rest pass through the embedded RawFileSystem untimed.
type observedFS struct {
	fuse.RawFileSystem
	obs Observer
}

func (o *observedFS) done(op string, start time.Time) { o.obs(op, time.Since(start)) }

func (o *observedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer o.done("lookup", time.Now())
	return o.RawFileSystem.Lookup(c, h, name, out)
}

func (o *observedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer o.done("getattr", time.Now())
	return o.RawFileSystem.GetAttr(c, in, out)
}

func (o *observedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer o.done("setattr", time.Now())
	return o.RawFileSystem.SetAttr(c, in, out)
}

func (o *observedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer o.done("mkdir", time.Now())
	return o.RawFileSystem.Mkdir(c, in, name, out)
}

func (o *observedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer o.done("unlink", time.Now())
	return o.RawFileSystem.Unlink(c, h, name)
}

func (o *observedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer o.done("rmdir", time.Now())
	return o.RawFileSystem.Rmdir(c, h, name)
}

func (o *observedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, from, to string) fuse.Status {
	defer o.done("rename", time.Now())
	return o.RawFileSystem.Rename(c, in, from, to)
}

func (o *observedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer o.done("create", time.Now())
	return o.RawFileSystem.Create(c, in, name, out)
}

func (o *observedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer o.done("open", time.Now())
	return o.RawFileSystem.Open(c, in, out)
}

func (o *observedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer o.done("read", time.Now())
	return o.RawFileSystem.Read(c, in, buf)
}

func (o *observedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer o.done("write", time.Now())
	return o.RawFileSystem.Write(c, in, data)
}

func (o *observedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	defer o.done("release", time.Now())
	o.RawFileSystem.Release(c, in)
}

func (o *observedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer o.done("flush", time.Now())
	return o.RawFileSystem.Flush(c, in)
}

func (o *observedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer o.done("fsync", time.Now())
	return o.RawFileSystem.Fsync(c, in)
}

func (o *observedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer o.done("opendir", time.Now())
	return o.RawFileSystem.OpenDir(c, in, out)
}

func (o *observedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer o.done("readdir", time.Now())
	return o.RawFileSystem.ReadDir(c, in, out)
}

func (o *observedFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer o.done("readdirplus", time.Now())
	return o.RawFileSystem.ReadDirPlus(c, in, out)
}

func (o *observedFS) StatFs(c <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer o.done("statfs", time.Now())
	return o.RawFileSystem.StatFs(c, in, out)
}
