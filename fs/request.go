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

// requestFS sits on go-fuse's bridge: the requests that may wait on a
// store (a training job's I/O and its metadata calls) see a cancel channel
// that only a dying caller or a dead connection closes (interrupt.go), and
// are timed for the Observer; the rest pass through the embedded
// RawFileSystem as they are.
type requestFS struct {
	fuse.RawFileSystem
	obs  Observer // nil: not timed
	intr *interrupts
}

// begin swaps the request's cancel channel for the filtered one and
// returns what ends the request.
func (r *requestFS) begin(op string, cancel *<-chan struct{}, caller *fuse.Caller) func() {
	c := r.intr.begin(*cancel, caller.Pid)
	*cancel = c.cancel
	if r.obs == nil {
		return func() { r.intr.end(c) }
	}
	start := time.Now()
	return func() {
		r.intr.end(c)
		r.obs(op, time.Since(start))
	}
}

func (r *requestFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer r.begin("lookup", &c, &h.Caller)()
	return r.RawFileSystem.Lookup(c, h, name, out)
}

func (r *requestFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer r.begin("getattr", &c, &in.Caller)()
	return r.RawFileSystem.GetAttr(c, in, out)
}

func (r *requestFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer r.begin("setattr", &c, &in.Caller)()
	return r.RawFileSystem.SetAttr(c, in, out)
}

func (r *requestFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.begin("mkdir", &c, &in.Caller)()
	return r.RawFileSystem.Mkdir(c, in, name, out)
}

func (r *requestFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer r.begin("unlink", &c, &h.Caller)()
	return r.RawFileSystem.Unlink(c, h, name)
}

func (r *requestFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer r.begin("rmdir", &c, &h.Caller)()
	return r.RawFileSystem.Rmdir(c, h, name)
}

func (r *requestFS) Rename(c <-chan struct{}, in *fuse.RenameIn, from, to string) fuse.Status {
	defer r.begin("rename", &c, &in.Caller)()
	return r.RawFileSystem.Rename(c, in, from, to)
}

func (r *requestFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.begin("mknod", &c, &in.Caller)()
	return r.RawFileSystem.Mknod(c, in, name, out)
}

func (r *requestFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.begin("link", &c, &in.Caller)()
	return r.RawFileSystem.Link(c, in, name, out)
}

func (r *requestFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer r.begin("symlink", &c, &h.Caller)()
	return r.RawFileSystem.Symlink(c, h, target, name, out)
}

func (r *requestFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer r.begin("readlink", &c, &h.Caller)()
	return r.RawFileSystem.Readlink(c, h)
}

func (r *requestFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer r.begin("create", &c, &in.Caller)()
	return r.RawFileSystem.Create(c, in, name, out)
}

func (r *requestFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.begin("open", &c, &in.Caller)()
	return r.RawFileSystem.Open(c, in, out)
}

func (r *requestFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer r.begin("read", &c, &in.Caller)()
	return r.RawFileSystem.Read(c, in, buf)
}

// Writev is where go-fuse sends every WRITE; Write only where Writev
// answers ENOSYS, which the bridge never does for our nodes.
func (r *requestFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer r.begin("write", &c, &in.Caller)()
	return r.RawFileSystem.Writev(c, in, data)
}

func (r *requestFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	defer r.begin("release", &c, &in.Caller)()
	r.RawFileSystem.Release(c, in)
}

func (r *requestFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer r.begin("flush", &c, &in.Caller)()
	return r.RawFileSystem.Flush(c, in)
}

func (r *requestFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer r.begin("fsync", &c, &in.Caller)()
	return r.RawFileSystem.Fsync(c, in)
}

func (r *requestFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.begin("opendir", &c, &in.Caller)()
	return r.RawFileSystem.OpenDir(c, in, out)
}

func (r *requestFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer r.begin("readdir", &c, &in.Caller)()
	return r.RawFileSystem.ReadDir(c, in, out)
}

func (r *requestFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer r.begin("readdirplus", &c, &in.Caller)()
	return r.RawFileSystem.ReadDirPlus(c, in, out)
}

func (r *requestFS) StatFs(c <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer r.begin("statfs", &c, &in.Caller)()
	return r.RawFileSystem.StatFs(c, in, out)
}
