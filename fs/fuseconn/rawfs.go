package fuseconn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Observer is told of every FUSE request an observed mount answers: its
// operation name (lookup, getattr, read, write, ...) and how long the
// daemon took to answer it. It must be safe for concurrent use and cheap.
// go-fuse's own latency hook (Server.RecordLatencies) is a no-op since
// v2.6, hence this wrapper.
type Observer func(op string, d time.Duration)

// rawFS is the one decorator of go-fuse's bridge, the outermost
// RawFileSystem of every mount. Every request passes its gate, which can
// freeze the mount (requests wait, those running finish). The requests
// that may wait on a store (a training job's I/O and its metadata calls)
// see a cancel channel that only a dying caller or a dead connection
// closes (interrupt.go), and are timed for the Observer. It counts the
// replies that give the kernel a node and keeps the open handles the
// kernel holds, which a handover passes on.
//
// Every request method of fuse.RawFileSystem is written out here: one
// left to the embedded RawFileSystem would pass the gate ungated
// (TestEveryRequestIsGated).
type rawFS struct {
	fuse.RawFileSystem
	obs  Observer // nil: not timed
	intr *interrupts

	mu       sync.Mutex
	idle     *sync.Cond    // signalled when inflight or fsyncs drops to 0
	frozen   bool          // GUARDED_BY(mu)
	thawed   chan struct{} // GUARDED_BY(mu): closed by thaw
	inflight int           // GUARDED_BY(mu)
	waiting  int           // GUARDED_BY(mu): requests held at the gate
	// fsyncsHeld makes new FSYNCs wait as frozen requests do, while the
	// rest of the mount is served (holdFsyncs); fsyncs counts those
	// running.
	fsyncsHeld bool                   // GUARDED_BY(mu)
	fsyncs     int                    // GUARDED_BY(mu)
	handles    map[uint64]HandleState // GUARDED_BY(mu)
	// lookups is the kernel's lookup count of each node, as this server
	// (and the daemons before it) answered; owed is the part of it a
	// previous daemon gave, for which go-fuse holds a count of 1.
	lookups map[uint64]uint64 // GUARDED_BY(mu)
	owed    map[uint64]uint64 // GUARDED_BY(mu)

	// inherited are the passthrough backing files a previous daemon
	// registered, by node, while handles it opened on them are open. The
	// kernel binds an inode open by passthrough to one backing file: every
	// further open of it must name that one, which go-fuse, knowing only
	// the IDs it registered itself, cannot; Open rewrites its answer.
	inherited map[uint64]*inheritedBacking // GUARDED_BY(mu)
	srv       *fuse.Server                 // set before serving: unregisters them
}

type inheritedBacking struct {
	id  int32
	fhs map[uint64]bool // open handles that use it
}

// newRawFS decorates inner (go-fuse's bridge); obs may be nil.
func newRawFS(inner fuse.RawFileSystem, obs Observer) *rawFS {
	h := &rawFS{RawFileSystem: inner, obs: obs, intr: newInterrupts(), handles: map[uint64]HandleState{}, inherited: map[uint64]*inheritedBacking{},
		lookups: map[uint64]uint64{}, owed: map[uint64]uint64{}}
	h.idle = sync.NewCond(&h.mu)
	return h
}

// enter waits while the mount is frozen, then counts the request in.
func (h *rawFS) enter() func() {
	h.mu.Lock()
	for h.frozen {
		h.waitThawLocked()
	}
	h.inflight++
	h.mu.Unlock()
	return h.leave
}

// waitThawLocked waits, counted as waiting, until the gate is thawed.
// Needs h.mu, which it releases meanwhile.
func (h *rawFS) waitThawLocked() {
	ch := h.thawed
	h.waiting++
	h.mu.Unlock()
	<-ch
	h.mu.Lock()
	h.waiting--
}

// waitingAtGate is how many requests wait for a thaw.
func (h *rawFS) waitingAtGate() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

// begin swaps the request's cancel channel for the filtered one and
// returns what ends the request.
func (h *rawFS) begin(op string, cancel *<-chan struct{}, caller *fuse.Caller) func() {
	c := h.intr.begin(*cancel, caller.Pid)
	*cancel = c.cancel
	if h.obs == nil {
		return func() { h.intr.end(c) }
	}
	start := time.Now()
	return func() {
		h.intr.end(c)
		h.obs(op, time.Since(start))
	}
}

func (h *rawFS) leave() {
	h.mu.Lock()
	h.inflight--
	if h.inflight == 0 {
		h.idle.Broadcast()
	}
	h.mu.Unlock()
}

// enterFsync is enter for an FSYNC, which also waits while FSYNCs are
// held.
func (h *rawFS) enterFsync() func() {
	h.mu.Lock()
	for h.frozen || h.fsyncsHeld {
		h.waitThawLocked()
	}
	h.inflight++
	h.fsyncs++
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		h.fsyncs--
		h.inflight--
		if h.inflight == 0 || h.fsyncs == 0 {
			h.idle.Broadcast()
		}
		h.mu.Unlock()
	}
}

// stopLocked makes the requests that arrive from now on wait for thaw,
// all of them (freeze) or only FSYNCs (holdFsyncs).
func (h *rawFS) stopLocked(all bool) {
	if !h.frozen && !h.fsyncsHeld {
		h.thawed = make(chan struct{})
	}
	if all {
		h.frozen = true
	} else {
		h.fsyncsHeld = true
	}
}

// waitLocked waits until busy is false or ctx is done, and reports
// whether busy still is.
func (h *rawFS) waitLocked(ctx context.Context, busy func() bool) bool {
	stop := context.AfterFunc(ctx, func() {
		h.mu.Lock()
		h.idle.Broadcast()
		h.mu.Unlock()
	})
	defer stop()
	for busy() && ctx.Err() == nil {
		h.idle.Wait()
	}
	return busy()
}

// holdFsyncs makes new FSYNCs wait (as frozen requests do) and waits for
// those running to be answered, until ctx is done (then it thaws and
// fails). Every other request is served meanwhile. A durable fsync waits
// for an upload, which may take long: a handover holds fsyncs, and waits
// for those running, before it freezes anything, so that no mount is
// frozen while another finishes one.
func (h *rawFS) holdFsyncs(ctx context.Context) error {
	h.mu.Lock()
	h.stopLocked(false)
	busy := h.waitLocked(ctx, func() bool { return h.fsyncs > 0 })
	n := h.fsyncs
	h.mu.Unlock()
	if busy {
		h.thaw()
		return fmt.Errorf("%d fsyncs still running: %w", n, ctx.Err())
	}
	return nil
}

// freeze stops new requests and waits for those running to finish, until
// ctx is done (then it thaws and fails).
func (h *rawFS) freeze(ctx context.Context) error {
	h.mu.Lock()
	if h.frozen {
		h.mu.Unlock()
		return errors.New("already frozen")
	}
	h.stopLocked(true)
	busy := h.waitLocked(ctx, func() bool { return h.inflight > 0 })
	n := h.inflight
	h.mu.Unlock()
	if busy {
		h.thaw()
		return fmt.Errorf("%d requests still running: %w", n, ctx.Err())
	}
	return nil
}

func (h *rawFS) thaw() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.frozen || h.fsyncsHeld {
		h.frozen, h.fsyncsHeld = false, false
		close(h.thawed)
	}
}

func (h *rawFS) openHandles() []HandleState {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HandleState, 0, len(h.handles))
	for _, hs := range h.handles {
		out = append(out, hs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Fh < out[j].Fh })
	return out
}

func (h *rawFS) opened(hs HandleState) {
	h.mu.Lock()
	h.handles[hs.Fh] = hs
	h.mu.Unlock()
}

func (h *rawFS) released(fh uint64) {
	h.mu.Lock()
	hs := h.handles[fh]
	delete(h.handles, fh)
	var drop int32
	if ib := h.inherited[hs.Node]; ib != nil && ib.fhs[fh] {
		delete(ib.fhs, fh)
		if len(ib.fhs) == 0 {
			delete(h.inherited, hs.Node)
			drop = ib.id
		}
	}
	h.mu.Unlock()
	if drop != 0 && h.srv != nil {
		// The last handle on it is closed: the kernel let go of the inode's
		// backing file, and so may we.
		h.srv.UnregisterBackingFd(drop)
	}
}

// inherit makes hs's node use hs's backing file for every open until its
// last handle using it is released.
func (h *rawFS) inherit(hs HandleState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ib := h.inherited[hs.Node]
	if ib == nil {
		ib = &inheritedBacking{id: hs.BackingID, fhs: map[uint64]bool{}}
		h.inherited[hs.Node] = ib
	}
	ib.fhs[hs.Fh] = true
}

// looked counts a reply that gave the kernel node id (0: none).
func (h *rawFS) looked(id uint64) {
	if id == 0 {
		return
	}
	h.mu.Lock()
	h.lookups[id]++
	h.mu.Unlock()
}

// entryOutSize and direntSize are the sizes of a READDIRPLUS entry's
// fuse_entry_out and fuse_dirent header.
const (
	entryOutSize = int(unsafe.Sizeof(fuse.EntryOut{}))
	direntSize   = 24 // ino, off, namelen, type
)

// countDirPlus counts the nodes a READDIRPLUS answer gives the kernel:
// every entry with a node but "." and ".." (the kernel's
// fuse_direntplus_link). It reads the answer in place (fuse.
// ParseDirLookupEntries would copy every name: this runs on every listing).
func (h *rawFS) countDirPlus(buf []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(buf) >= entryOutSize+direntSize {
		id := binary.NativeEndian.Uint64(buf) // fuse_entry_out.nodeid
		d := buf[entryOutSize:]
		nameLen := int(binary.NativeEndian.Uint32(d[16:]))
		if direntSize+nameLen > len(d) {
			return // not a READDIRPLUS answer go-fuse writes
		}
		name := d[direntSize : direntSize+nameLen]
		if id != 0 && !(len(name) == 1 && name[0] == '.') && !(len(name) == 2 && name[0] == '.' && name[1] == '.') {
			h.lookups[id]++
		}
		n := entryOutSize + (direntSize+nameLen+7)&^7
		if n > len(buf) {
			return
		}
		buf = buf[n:]
	}
}

// lookupCount is the kernel's lookup count of id, as answered.
func (h *rawFS) lookupCount(id uint64) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lookups[id]
}

// owe records that the kernel holds n lookups of id given by a previous
// daemon, for which go-fuse was given one.
func (h *rawFS) owe(id, n uint64) {
	h.mu.Lock()
	h.lookups[id] += n
	h.owed[id] += n
	h.mu.Unlock()
}

// forgetLocked applies the kernel's FORGET of n lookups of id to the
// counts and returns how many go-fuse is to forget. Needs h.mu.
func (h *rawFS) forgetLocked(id, n uint64) uint64 {
	c := h.lookups[id]
	if c == 0 {
		// A node this server never gave nor took over (the kernel kept a
		// node of the old daemon that was no longer in its tree): go-fuse
		// does not know it and would take its FORGET for a protocol error.
		return 0
	}
	if n >= c {
		n = c // never below zero
		delete(h.lookups, id)
	} else {
		h.lookups[id] = c - n
	}
	owed := h.owed[id]
	if owed == 0 {
		return n
	}
	paid := min(n, owed)
	fwd := n - paid
	if owed -= paid; owed > 0 {
		h.owed[id] = owed
	} else {
		// The debt is paid: go-fuse's one lookup for it goes too.
		delete(h.owed, id)
		fwd++
	}
	return fwd
}

func (h *rawFS) Forget(nodeid, nlookup uint64) {
	defer h.enter()()
	h.mu.Lock()
	fwd := h.forgetLocked(nodeid, nlookup)
	h.mu.Unlock()
	if fwd > 0 {
		h.RawFileSystem.Forget(nodeid, fwd)
	}
}

func (h *rawFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer h.enter()()
	defer h.begin("open", &c, &in.Caller)()
	st := h.RawFileSystem.Open(c, in, out)
	if !st.Ok() {
		return st
	}
	// Opened again after a handover without O_TRUNC (an output file
	// would lose what was written since) or O_CREAT/O_EXCL.
	hs := HandleState{Fh: out.Fh, Node: in.NodeId, Flags: in.Flags &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC)}
	h.mu.Lock()
	if ib := h.inherited[in.NodeId]; ib != nil {
		// A backing file go-fuse may have registered for this open stays
		// unused, and is unregistered at its release.
		out.BackingID = ib.id
		out.OpenFlags = (out.OpenFlags | fuse.FOPEN_PASSTHROUGH) &^ fuse.FOPEN_KEEP_CACHE
		ib.fhs[out.Fh] = true
	}
	hs.Passthrough, hs.BackingID = out.OpenFlags&fuse.FOPEN_PASSTHROUGH != 0, out.BackingID
	h.handles[out.Fh] = hs
	h.mu.Unlock()
	return st
}

func (h *rawFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer h.enter()()
	defer h.begin("create", &c, &in.Caller)()
	st := h.RawFileSystem.Create(c, in, name, out)
	if st.Ok() {
		h.looked(out.NodeId)
		// Reopened later without O_CREAT/O_EXCL/O_TRUNC: it exists now.
		flags := in.Flags &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC)
		h.opened(HandleState{Fh: out.Fh, Node: out.NodeId, Flags: flags,
			Passthrough: out.OpenFlags&fuse.FOPEN_PASSTHROUGH != 0, BackingID: out.BackingID})
	}
	return st
}

func (h *rawFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer h.enter()()
	defer h.begin("opendir", &c, &in.Caller)()
	st := h.RawFileSystem.OpenDir(c, in, out)
	if st.Ok() {
		h.opened(HandleState{Fh: out.Fh, Node: in.NodeId, Flags: in.Flags, Dir: true})
	}
	return st
}

// known reports whether fh is an open handle. A RELEASE the old daemon
// answered but whose reply it had not written when it exited comes again
// after the handover (FUSE_NOTIFY_RESEND) for a handle this server never
// had, which go-fuse would take for a protocol error (a panic).
func (h *rawFS) known(fh uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.handles[fh]
	return ok || fh == 0
}

func (h *rawFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	defer h.enter()()
	defer h.begin("release", &c, &in.Caller)()
	if !h.known(in.Fh) {
		return
	}
	h.RawFileSystem.Release(c, in)
	h.released(in.Fh)
}

func (h *rawFS) ReleaseDir(in *fuse.ReleaseIn) {
	defer h.enter()()
	if !h.known(in.Fh) {
		return
	}
	h.RawFileSystem.ReleaseDir(in)
	h.released(in.Fh)
}

// The rest pass through the gate, and the requests that may wait on a
// store through the interrupt filter and the Observer (begin); those
// whose replies give the kernel a node count one lookup of it (entry).

func (h *rawFS) Lookup(c <-chan struct{}, hd *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	defer h.begin("lookup", &c, &hd.Caller)()
	return h.entry(h.RawFileSystem.Lookup(c, hd, name, out), out)
}

func (h *rawFS) entry(st fuse.Status, out *fuse.EntryOut) fuse.Status {
	if st.Ok() {
		h.looked(out.NodeId)
	}
	return st
}
func (h *rawFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer h.enter()()
	defer h.begin("getattr", &c, &in.Caller)()
	return h.RawFileSystem.GetAttr(c, in, out)
}
func (h *rawFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer h.enter()()
	defer h.begin("setattr", &c, &in.Caller)()
	return h.RawFileSystem.SetAttr(c, in, out)
}
func (h *rawFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	defer h.begin("mknod", &c, &in.Caller)()
	return h.entry(h.RawFileSystem.Mknod(c, in, name, out), out)
}
func (h *rawFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	defer h.begin("mkdir", &c, &in.Caller)()
	return h.entry(h.RawFileSystem.Mkdir(c, in, name, out), out)
}
func (h *rawFS) Unlink(c <-chan struct{}, hd *fuse.InHeader, name string) fuse.Status {
	defer h.enter()()
	defer h.begin("unlink", &c, &hd.Caller)()
	return h.RawFileSystem.Unlink(c, hd, name)
}
func (h *rawFS) Rmdir(c <-chan struct{}, hd *fuse.InHeader, name string) fuse.Status {
	defer h.enter()()
	defer h.begin("rmdir", &c, &hd.Caller)()
	return h.RawFileSystem.Rmdir(c, hd, name)
}
func (h *rawFS) Rename(c <-chan struct{}, in *fuse.RenameIn, from, to string) fuse.Status {
	defer h.enter()()
	defer h.begin("rename", &c, &in.Caller)()
	return h.RawFileSystem.Rename(c, in, from, to)
}
func (h *rawFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	defer h.begin("link", &c, &in.Caller)()
	return h.entry(h.RawFileSystem.Link(c, in, name, out), out)
}
func (h *rawFS) Symlink(c <-chan struct{}, hd *fuse.InHeader, to, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	defer h.begin("symlink", &c, &hd.Caller)()
	return h.entry(h.RawFileSystem.Symlink(c, hd, to, name, out), out)
}
func (h *rawFS) Readlink(c <-chan struct{}, hd *fuse.InHeader) ([]byte, fuse.Status) {
	defer h.enter()()
	defer h.begin("readlink", &c, &hd.Caller)()
	return h.RawFileSystem.Readlink(c, hd)
}
func (h *rawFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Access(c, in)
}
func (h *rawFS) GetXAttr(c <-chan struct{}, hd *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.GetXAttr(c, hd, attr, dest)
}
func (h *rawFS) ListXAttr(c <-chan struct{}, hd *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.ListXAttr(c, hd, dest)
}
func (h *rawFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.SetXAttr(c, in, attr, data)
}
func (h *rawFS) RemoveXAttr(c <-chan struct{}, hd *fuse.InHeader, attr string) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.RemoveXAttr(c, hd, attr)
}
func (h *rawFS) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	// Tracked like any handle; its node has no path until linked, which
	// Snapshot refuses.
	defer h.enter()()
	st := h.RawFileSystem.Tmpfile(c, in, out)
	if st.Ok() {
		h.looked(out.NodeId)
		h.opened(HandleState{Fh: out.Fh, Node: out.NodeId, Flags: in.Flags})
	}
	return st
}
func (h *rawFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer h.enter()()
	defer h.begin("read", &c, &in.Caller)()
	return h.RawFileSystem.Read(c, in, buf)
}
func (h *rawFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Lseek(c, in, out)
}
func (h *rawFS) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.GetLk(c, in, out)
}
func (h *rawFS) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.SetLk(c, in)
}
func (h *rawFS) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.SetLkw(c, in)
}
func (h *rawFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.Write(c, in, data)
}

// Writev is where go-fuse sends every WRITE; Write only where Writev
// answers ENOSYS, which the bridge never does for our nodes.
func (h *rawFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer h.enter()()
	defer h.begin("write", &c, &in.Caller)()
	return h.RawFileSystem.Writev(c, in, data)
}
func (h *rawFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.CopyFileRange(c, in)
}
func (h *rawFS) Ioctl(c <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Ioctl(c, in, inbuf, out, outbuf)
}
func (h *rawFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer h.enter()()
	defer h.begin("flush", &c, &in.Caller)()
	return h.RawFileSystem.Flush(c, in)
}
func (h *rawFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer h.enterFsync()()
	defer h.begin("fsync", &c, &in.Caller)()
	return h.RawFileSystem.Fsync(c, in)
}
func (h *rawFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Fallocate(c, in)
}
func (h *rawFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer h.enter()()
	defer h.begin("readdir", &c, &in.Caller)()
	return h.RawFileSystem.ReadDir(c, in, out)
}
func (h *rawFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer h.enter()()
	defer h.begin("readdirplus", &c, &in.Caller)()
	st := h.RawFileSystem.ReadDirPlus(c, in, out)
	if !st.Ok() {
		return st
	}
	h.countDirPlus(out.Bytes())
	return st
}
func (h *rawFS) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.FsyncDir(c, in)
}
func (h *rawFS) StatFs(c <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer h.enter()()
	defer h.begin("statfs", &c, &in.Caller)()
	return h.RawFileSystem.StatFs(c, in, out)
}
func (h *rawFS) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Statx(c, in, out)
}
