package fs

// Handing a live mount to another process (`mlfsd daemon --takeover`).
//
// The kernel's side of a FUSE mount is one connection: the /dev/fuse file
// the mount was made with, the INIT parameters negotiated once, the node
// IDs and file handles the daemon gave out. A new process that holds the
// same file (passed with SCM_RIGHTS) and answers those IDs serves the same
// mount; the kernel never notices.
//
// go-fuse serves a pre-opened fd through its magic mountpoint /dev/fd/N, but
// it then reads and answers INIT first, and the kernel sends INIT only once
// per connection. So an adopted connection starts on a socketpair: the
// kernel's original INIT request (the old daemon's Server.KernelSettings) is
// written into one end, go-fuse reads it from the other and answers it
// there, which sets up its negotiated state exactly as on the first mount;
// then the real /dev/fuse is dup3'd over the socket's fd number, which the
// server reads from thereafter (go-fuse keeps a blocking fd outside the
// runtime poller and passes the number to read(2) on every call). Nothing
// reaches the kernel until that point, so a takeover that fails before it
// leaves the connection as it was. The old daemon recomputes its INIT
// answer the same way and the new one refuses if its own differs (another
// go-fuse, other mount options).
//
// Node IDs: every mount uses go-fuse's ExternalNodeID, so a node's kernel
// ID is its inode number, which mlfsd picks (a counter per tree; on
// adoption, the old daemon's number for each path). The new daemon looks up
// every path the kernel knows and gets the same IDs.
//
// Lookup counts: the kernel counts, per node, the replies that gave it the
// node (LOOKUP, CREATE, MKDIR, MKNOD, SYMLINK, LINK, TMPFILE, and each
// READDIRPLUS entry but "." and ".."), and gives them back with FORGET; a
// node must live as long as its count is above zero. handoverFS counts
// those replies itself (go-fuse keeps its count private), hands the count
// of every node over, and the new daemon takes it as a debt: its replay
// lookup gives go-fuse a count of 1 for the whole debt, the FORGETs that
// pay the debt off are kept from go-fuse until the last one, which passes
// that 1 on. So go-fuse drops a node exactly when the kernel's count
// reaches zero, and not before (see handoverFS.Forget). A node the new
// daemon never had (the old one's, no longer in its tree) has its FORGETs
// dropped, as go-fuse would take them for a protocol error.
//
// File handles: go-fuse hands out the lowest free number, so the new
// daemon opens the handed-over handles in order (without O_TRUNC, O_CREAT
// or O_EXCL), filling the gaps with directory handles of the root it then
// releases.
//
// Each tree hands over its own state (Snapshot.Tree): an input tree its
// listings (input_handover.go), an output tree itself, node for node
// (output_handover.go).
//
// Requests in flight: the old daemon freezes (every request it reads from
// then on waits), finishes what it was answering, hands over and exits.
// The requests it read but never answered are still in the kernel's
// processing queue; the new daemon sends FUSE_NOTIFY_RESEND (Linux 6.9+)
// before it starts reading, and the kernel queues them again.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Snapshot is what the kernel holds of a frozen mount's server.
type Snapshot struct {
	// Init is the kernel's INIT request, as it sent it.
	Init []byte `json:"init"`
	// InitReply is the answer this server's options give to Init.
	InitReply []byte `json:"init_reply"`
	// NextIno is above every inode number given out.
	NextIno uint64 `json:"next_ino"`
	// Nodes are the nodes of the tree (the root, ID 1, excepted).
	Nodes []NodeState `json:"nodes"`
	// Handles are the open file and directory handles.
	Handles []HandleState `json:"handles"`
	// Tree is the tree's own state (an input tree's listings).
	Tree json.RawMessage `json:"tree,omitempty"`
	// Uncounted: the snapshot has no lookup counts (handover protocol 1):
	// its nodes are pinned, never forgotten (the kernel's FORGETs of them
	// are not passed on), which can only keep them in memory.
	Uncounted bool `json:"-"`
}

// pinned is the debt that pins a node: never paid off.
const pinned = 1 << 62

// NodeState is one node of the tree: its ID, where it is, and how many
// lookups of it the kernel holds (0: the tree has it, the kernel not).
type NodeState struct {
	ID      uint64 `json:"id"`
	Path    string `json:"path"`
	Lookups uint64 `json:"lookups"`
}

// HandleState is one open handle the kernel holds.
type HandleState struct {
	Fh    uint64 `json:"fh"`
	Node  uint64 `json:"node"`
	Flags uint32 `json:"flags"`
	Dir   bool   `json:"dir,omitempty"`
	// Passthrough: the kernel reads this handle's backing file itself.
	Passthrough bool  `json:"passthrough,omitempty"`
	BackingID   int32 `json:"backing_id,omitempty"`
}

// inoAlloc gives out inode numbers, which are also the kernel's node IDs
// (ExternalNodeID). replay, set only while an adoption looks up the handed
// over paths (before the server serves), gives those paths their old ones.
type inoAlloc struct {
	next   atomic.Uint64
	replay map[string]uint64
}

func newInoAlloc() *inoAlloc {
	a := &inoAlloc{}
	a.next.Store(1) // the root is 1
	return a
}

func (a *inoAlloc) ino(p string) uint64 {
	if a.replay != nil {
		if i, ok := a.replay[p]; ok {
			return i
		}
	}
	return a.next.Add(1)
}

// handoverFS is the outermost RawFileSystem of every mount: it can freeze
// the mount (requests wait, those running finish) and it keeps the open
// handles the kernel holds.
type handoverFS struct {
	fuse.RawFileSystem

	mu       sync.Mutex
	idle     *sync.Cond    // signalled when inflight or fsyncs drops to 0
	frozen   bool          // GUARDED_BY(mu)
	thawed   chan struct{} // GUARDED_BY(mu): closed by thaw
	inflight int           // GUARDED_BY(mu)
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

func newHandoverFS(inner fuse.RawFileSystem) *handoverFS {
	h := &handoverFS{RawFileSystem: inner, handles: map[uint64]HandleState{}, inherited: map[uint64]*inheritedBacking{},
		lookups: map[uint64]uint64{}, owed: map[uint64]uint64{}}
	h.idle = sync.NewCond(&h.mu)
	return h
}

// enter waits while the mount is frozen, then counts the request in.
func (h *handoverFS) enter() func() {
	h.mu.Lock()
	for h.frozen {
		ch := h.thawed
		h.mu.Unlock()
		<-ch
		h.mu.Lock()
	}
	h.inflight++
	h.mu.Unlock()
	return h.leave
}

func (h *handoverFS) leave() {
	h.mu.Lock()
	h.inflight--
	if h.inflight == 0 {
		h.idle.Broadcast()
	}
	h.mu.Unlock()
}

// enterFsync is enter for an FSYNC, which also waits while FSYNCs are
// held.
func (h *handoverFS) enterFsync() func() {
	h.mu.Lock()
	for h.frozen || h.fsyncsHeld {
		ch := h.thawed
		h.mu.Unlock()
		<-ch
		h.mu.Lock()
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
func (h *handoverFS) stopLocked(all bool) {
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
func (h *handoverFS) waitLocked(ctx context.Context, busy func() bool) bool {
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
func (h *handoverFS) holdFsyncs(ctx context.Context) error {
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
func (h *handoverFS) freeze(ctx context.Context) error {
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

func (h *handoverFS) thaw() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.frozen || h.fsyncsHeld {
		h.frozen, h.fsyncsHeld = false, false
		close(h.thawed)
	}
}

func (h *handoverFS) openHandles() []HandleState {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HandleState, 0, len(h.handles))
	for _, hs := range h.handles {
		out = append(out, hs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Fh < out[j].Fh })
	return out
}

func (h *handoverFS) opened(hs HandleState) {
	h.mu.Lock()
	h.handles[hs.Fh] = hs
	h.mu.Unlock()
}

func (h *handoverFS) released(fh uint64) {
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
func (h *handoverFS) inherit(hs HandleState) {
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
func (h *handoverFS) looked(id uint64) {
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
func (h *handoverFS) countDirPlus(buf []byte) {
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
func (h *handoverFS) lookupCount(id uint64) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lookups[id]
}

// owe records that the kernel holds n lookups of id given by a previous
// daemon, for which go-fuse was given one.
func (h *handoverFS) owe(id, n uint64) {
	h.mu.Lock()
	h.lookups[id] += n
	h.owed[id] += n
	h.mu.Unlock()
}

// forgetLocked applies the kernel's FORGET of n lookups of id to the
// counts and returns how many go-fuse is to forget. Needs h.mu.
func (h *handoverFS) forgetLocked(id, n uint64) uint64 {
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

func (h *handoverFS) Forget(nodeid, nlookup uint64) {
	defer h.enter()()
	h.mu.Lock()
	fwd := h.forgetLocked(nodeid, nlookup)
	h.mu.Unlock()
	if fwd > 0 {
		h.RawFileSystem.Forget(nodeid, fwd)
	}
}

func (h *handoverFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer h.enter()()
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

func (h *handoverFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer h.enter()()
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

func (h *handoverFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer h.enter()()
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
func (h *handoverFS) known(fh uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.handles[fh]
	return ok || fh == 0
}

func (h *handoverFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	defer h.enter()()
	if !h.known(in.Fh) {
		return
	}
	h.RawFileSystem.Release(c, in)
	h.released(in.Fh)
}

func (h *handoverFS) ReleaseDir(in *fuse.ReleaseIn) {
	defer h.enter()()
	if !h.known(in.Fh) {
		return
	}
	h.RawFileSystem.ReleaseDir(in)
	h.released(in.Fh)
}

// The rest only pass through the gate.

// The replies that give the kernel a node: each is one lookup it counts.

func (h *handoverFS) Lookup(c <-chan struct{}, hd *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	return h.entry(h.RawFileSystem.Lookup(c, hd, name, out), out)
}

func (h *handoverFS) entry(st fuse.Status, out *fuse.EntryOut) fuse.Status {
	if st.Ok() {
		h.looked(out.NodeId)
	}
	return st
}
func (h *handoverFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.GetAttr(c, in, out)
}
func (h *handoverFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.SetAttr(c, in, out)
}
func (h *handoverFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	return h.entry(h.RawFileSystem.Mknod(c, in, name, out), out)
}
func (h *handoverFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	return h.entry(h.RawFileSystem.Mkdir(c, in, name, out), out)
}
func (h *handoverFS) Unlink(c <-chan struct{}, hd *fuse.InHeader, name string) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Unlink(c, hd, name)
}
func (h *handoverFS) Rmdir(c <-chan struct{}, hd *fuse.InHeader, name string) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Rmdir(c, hd, name)
}
func (h *handoverFS) Rename(c <-chan struct{}, in *fuse.RenameIn, from, to string) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Rename(c, in, from, to)
}
func (h *handoverFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	return h.entry(h.RawFileSystem.Link(c, in, name, out), out)
}
func (h *handoverFS) Symlink(c <-chan struct{}, hd *fuse.InHeader, to, name string, out *fuse.EntryOut) fuse.Status {
	defer h.enter()()
	return h.entry(h.RawFileSystem.Symlink(c, hd, to, name, out), out)
}
func (h *handoverFS) Readlink(c <-chan struct{}, hd *fuse.InHeader) ([]byte, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.Readlink(c, hd)
}
func (h *handoverFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Access(c, in)
}
func (h *handoverFS) GetXAttr(c <-chan struct{}, hd *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.GetXAttr(c, hd, attr, dest)
}
func (h *handoverFS) ListXAttr(c <-chan struct{}, hd *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.ListXAttr(c, hd, dest)
}
func (h *handoverFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.SetXAttr(c, in, attr, data)
}
func (h *handoverFS) RemoveXAttr(c <-chan struct{}, hd *fuse.InHeader, attr string) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.RemoveXAttr(c, hd, attr)
}
func (h *handoverFS) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
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
func (h *handoverFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.Read(c, in, buf)
}
func (h *handoverFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Lseek(c, in, out)
}
func (h *handoverFS) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.GetLk(c, in, out)
}
func (h *handoverFS) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.SetLk(c, in)
}
func (h *handoverFS) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.SetLkw(c, in)
}
func (h *handoverFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.Write(c, in, data)
}
func (h *handoverFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.Writev(c, in, data)
}
func (h *handoverFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer h.enter()()
	return h.RawFileSystem.CopyFileRange(c, in)
}
func (h *handoverFS) Ioctl(c <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Ioctl(c, in, inbuf, out, outbuf)
}
func (h *handoverFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Flush(c, in)
}
func (h *handoverFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer h.enterFsync()()
	return h.RawFileSystem.Fsync(c, in)
}
func (h *handoverFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Fallocate(c, in)
}
func (h *handoverFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.ReadDir(c, in, out)
}
func (h *handoverFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer h.enter()()
	st := h.RawFileSystem.ReadDirPlus(c, in, out)
	if !st.Ok() {
		return st
	}
	h.countDirPlus(out.Bytes())
	return st
}
func (h *handoverFS) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.FsyncDir(c, in)
}
func (h *handoverFS) StatFs(c <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.StatFs(c, in, out)
}
func (h *handoverFS) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer h.enter()()
	return h.RawFileSystem.Statx(c, in, out)
}

// Freeze stops the mount from answering: requests read from now on wait,
// and Freeze returns once those already running are answered (or fails,
// thawed, when ctx is done first). Only a mount made by this package with
// a /dev/fuse fd it holds can be frozen for a handover.
func (m *Server) Freeze(ctx context.Context) error {
	if m.fd < 0 {
		return fmt.Errorf("%s was mounted through fusermount; its connection cannot be handed over", m.mountpoint)
	}
	if err := m.hfs.freeze(ctx); err != nil {
		return fmt.Errorf("freezing %s: %w", m.mountpoint, err)
	}
	return nil
}

// HoldFsyncs prepares a handover: FSYNCs read from now on wait (as all
// requests do once frozen), and HoldFsyncs returns once those already
// running are answered, while every other request is served as usual. It
// fails, thawed, when ctx is done first. Thaw ends the hold.
func (m *Server) HoldFsyncs(ctx context.Context) error {
	if err := m.hfs.holdFsyncs(ctx); err != nil {
		return fmt.Errorf("waiting for the fsyncs on %s: %w", m.mountpoint, err)
	}
	return nil
}

// Thaw lets a frozen mount answer again (the handover failed).
func (m *Server) Thaw() { m.hfs.thaw() }

// Fd is the mount's /dev/fuse descriptor (-1 when mounted through
// fusermount). It stays owned by the Server.
func (m *Server) Fd() int { return m.fd }

// Snapshot describes a frozen mount for a handover.
func (m *Server) Snapshot() (*Snapshot, error) {
	if m.inos == nil {
		return nil, fmt.Errorf("%s: this tree's node IDs cannot be given again by another process", m.mountpoint)
	}
	ks := m.server.KernelSettings()
	init := encodeInit(*ks)
	reply, err := negotiate(fuse.NewDefaultRawFileSystem(), m.fuseOpts, init)
	if err != nil {
		return nil, fmt.Errorf("%s: recomputing the INIT answer: %w", m.mountpoint, err)
	}
	s := &Snapshot{Init: init, InitReply: reply, NextIno: m.inos.next.Load() + 1}
	walkTree(m.root, "", &s.Nodes)
	for i := range s.Nodes {
		s.Nodes[i].Lookups = m.hfs.lookupCount(s.Nodes[i].ID)
	}
	known := map[uint64]bool{fuse.FUSE_ROOT_ID: true}
	for _, n := range s.Nodes {
		known[n.ID] = true
	}
	if m.treeState != nil {
		tree, err := m.treeState()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.mountpoint, err)
		}
		s.Tree = tree
	}
	s.Handles = m.hfs.openHandles()
	for _, h := range s.Handles {
		if !known[h.Node] {
			return nil, fmt.Errorf("%s: handle %d is open on node %d, which has no path (a deleted file still open); hand over once it is closed", m.mountpoint, h.Fh, h.Node)
		}
	}
	return s, nil
}

func walkTree(n *gofs.Inode, p string, out *[]NodeState) {
	for name, ch := range n.Children() {
		cp := name
		if p != "" {
			cp = p + "/" + name
		}
		*out = append(*out, NodeState{ID: ch.StableAttr().Ino, Path: cp})
		if ch.IsDir() {
			walkTree(ch, cp, out)
		}
	}
}

// opInit is FUSE_INIT's opcode; notifyResend is FUSE_NOTIFY_RESEND.
const (
	opInit       = 26
	notifyResend = 7
)

func encodeInit(in fuse.InitIn) []byte {
	in.Length = uint32(unsafe.Sizeof(in))
	in.Opcode = opInit
	in.Unique = 1
	in.NodeId = 0
	b := unsafe.Slice((*byte)(unsafe.Pointer(&in)), unsafe.Sizeof(in))
	return bytes.Clone(b)
}

// negotiateServer answers init with a go-fuse server over rfs, set up on a
// socketpair, and returns the answer, the server and the fd it reads.
func negotiateServer(rfs fuse.RawFileSystem, mo fuse.MountOptions, init []byte) (srv *fuse.Server, reply []byte, sockFd int, err error) {
	if len(init) < int(unsafe.Sizeof(fuse.InHeader{})) {
		return nil, nil, -1, fmt.Errorf("INIT request of %d bytes", len(init))
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, -1, fmt.Errorf("socketpair: %w", err)
	}
	defer unix.Close(sp[1])
	if _, err := unix.Write(sp[1], init); err != nil {
		unix.Close(sp[0])
		return nil, nil, -1, fmt.Errorf("writing INIT: %w", err)
	}
	mo.DirectMount, mo.DirectMountStrict = false, false
	// From here sp[0] belongs to the server, which closes it on failure.
	srv, err = fuse.NewServer(rfs, fmt.Sprintf("/dev/fd/%d", sp[0]), &mo)
	if err != nil {
		return nil, nil, -1, err
	}
	buf := make([]byte, 4096)
	n, err := unix.Read(sp[1], buf)
	if err != nil {
		return nil, nil, -1, fmt.Errorf("reading the INIT answer: %w", err)
	}
	return srv, buf[:n], sp[0], nil
}

// negotiate is the INIT answer mo gives to init.
func negotiate(rfs fuse.RawFileSystem, mo fuse.MountOptions, init []byte) ([]byte, error) {
	// The throwaway server's socket is closed with its *os.File once it is
	// garbage; it never serves.
	_, reply, _, err := negotiateServer(rfs, mo, init)
	return reply, err
}

// Adoption is a mount being taken over: a server set up on the handed-over
// connection, the kernel's node IDs looked up again, not yet serving.
type Adoption struct {
	mountpoint string
	fd         int // the handed-over /dev/fuse; -1 once moved onto sock
	sock       int // the fd number the server reads
	srv        *fuse.Server
	hfs        *handoverFS
	root       *gofs.Inode
	inos       *inoAlloc
	mo         fuse.MountOptions
	snap       *Snapshot
	opt        MountOptions
	setHint    func(passthrough, replaying bool)
	treeState  func() (json.RawMessage, error)
	out        *outTree // an output tree, given its Store by ServeOutput
}

// adopt sets up a server for root on the connection fd with the handed
// over snapshot; nothing is written to fd.
func adopt(fd int, mountpoint string, snap *Snapshot, root gofs.InodeEmbedder, inos *inoAlloc, opt MountOptions) (*Adoption, error) {
	mo, hfs, intr := newRawFS(root, opt)
	maxID := snap.NextIno
	inos.replay = map[string]uint64{}
	for _, n := range snap.Nodes {
		inos.replay[n.Path] = n.ID
		maxID = max(maxID, n.ID+1)
	}
	inos.next.Store(maxID)
	srv, reply, sock, err := negotiateServer(hfs, mo, snap.Init)
	if err != nil {
		return nil, fmt.Errorf("%s: starting a server on the handed-over connection: %w", mountpoint, err)
	}
	intr.setConn(sock) // /dev/fuse from the switch on (Adoption.Serve)
	a := &Adoption{mountpoint: mountpoint, fd: fd, sock: sock, srv: srv, hfs: hfs, root: root.EmbeddedInode(),
		inos: inos, mo: mo, snap: snap, opt: opt}
	if !bytes.Equal(reply, snap.InitReply) {
		return nil, fmt.Errorf("%s: this binary answers the kernel's INIT differently from the running daemon (%d bytes vs %d: another go-fuse or other mount options); refusing", mountpoint, len(reply), len(snap.InitReply))
	}
	nodes := append([]NodeState(nil), snap.Nodes...)
	sort.Slice(nodes, func(i, j int) bool {
		di, dj := strings.Count(nodes[i].Path, "/"), strings.Count(nodes[j].Path, "/")
		if di != dj {
			return di < dj
		}
		return nodes[i].Path < nodes[j].Path
	})
	ids := map[string]uint64{".": fuse.FUSE_ROOT_ID}
	for _, n := range nodes {
		parent, ok := ids[path.Dir(n.Path)]
		if !ok {
			return nil, fmt.Errorf("%s: node %s comes without its directory", mountpoint, n.Path)
		}
		var out fuse.EntryOut
		st := hfs.RawFileSystem.Lookup(nil, &fuse.InHeader{NodeId: parent}, path.Base(n.Path), &out)
		if !st.Ok() {
			return nil, fmt.Errorf("%s: looking up %s again: %v", mountpoint, n.Path, st)
		}
		if out.NodeId != n.ID {
			return nil, fmt.Errorf("%s: %s came back as node %d, the kernel knows it as %d", mountpoint, n.Path, out.NodeId, n.ID)
		}
		ids[n.Path] = n.ID
	}
	// go-fuse now holds one lookup of every node: the kernel's count of a
	// node it holds becomes a debt that its FORGETs pay off. A node the
	// tree has and the kernel does not (by the count) keeps that lookup:
	// were the count ever short, dropping it would leave the kernel with
	// a node go-fuse does not know (a crash); keeping it costs memory.
	for _, n := range nodes {
		switch {
		case snap.Uncounted:
			hfs.owe(n.ID, pinned)
		case n.Lookups > 0:
			hfs.owe(n.ID, n.Lookups)
		}
	}
	inos.replay = nil
	return a, nil
}

// Serve puts the handed-over connection under the server, opens the
// handed-over handles again under their numbers, has the kernel resend
// what the old daemon read and never answered, and starts serving. Call
// it once the old daemon no longer reads the connection (it exited).
// Errors opening one handle make that handle fail its reads (EIO) rather
// than the mount.
func (a *Adoption) Serve() (*Server, error) {
	if err := unix.Dup3(a.fd, a.sock, unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("%s: moving the connection under the server: %w", a.mountpoint, err)
	}
	unix.Close(a.fd)
	a.fd = -1
	log := a.opt.Log
	byFh := map[uint64]HandleState{}
	var maxFh uint64
	for _, h := range a.snap.Handles {
		byFh[h.Fh] = h
		maxFh = max(maxFh, h.Fh)
	}
	var fillers []uint64
	for fh := uint64(1); fh <= maxFh; fh++ {
		h, ok := byFh[fh]
		var out fuse.OpenOut
		var st fuse.Status
		switch {
		case !ok:
			st = a.hfs.RawFileSystem.OpenDir(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, Flags: syscall.O_RDONLY}, &out)
			fillers = append(fillers, fh)
		case h.Dir:
			st = a.hfs.RawFileSystem.OpenDir(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: h.Node}, Flags: h.Flags}, &out)
		default:
			if a.setHint != nil {
				a.setHint(h.Passthrough, true)
			}
			st = a.hfs.RawFileSystem.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: h.Node}, Flags: h.Flags}, &out)
			if a.setHint != nil {
				a.setHint(false, false)
			}
		}
		if !st.Ok() {
			return nil, fmt.Errorf("%s: opening handle %d (node %d) again: %v", a.mountpoint, fh, h.Node, st)
		}
		if out.Fh != fh {
			return nil, fmt.Errorf("%s: handle %d came back as %d", a.mountpoint, fh, out.Fh)
		}
		if ok {
			a.hfs.opened(h)
			if h.Passthrough && h.BackingID != 0 {
				a.hfs.inherit(h)
			}
		}
	}
	for _, fh := range fillers {
		a.hfs.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, Fh: fh})
	}
	// FUSE_NOTIFY_RESEND: an OutHeader with the notify code as error.
	var hdr [16]byte
	*(*fuse.OutHeader)(unsafe.Pointer(&hdr[0])) = fuse.OutHeader{Length: 16, Status: notifyResend}
	if _, err := unix.Write(a.sock, hdr[:]); err != nil && log != nil {
		log.Warn("the kernel refused FUSE_NOTIFY_RESEND (Linux < 6.9?): requests the old daemon read and did not answer stay unanswered", "mountpoint", a.mountpoint, "err", err)
	}
	a.hfs.srv = a.srv
	go a.srv.Serve()
	return &Server{server: a.srv, mountpoint: a.mountpoint, log: logOrDiscard(log), fd: a.sock,
		hfs: a.hfs, root: a.root, inos: a.inos, fuseOpts: a.mo, treeState: a.treeState}, nil
}

// Abort gives up the adoption: the handed-over fd is closed, the kernel
// never saw this process.
func (a *Adoption) Abort() {
	if a.fd >= 0 {
		unix.Close(a.fd)
		a.fd = -1
	}
}

// directMount mounts a FUSE filesystem at mountpoint as go-fuse's
// DirectMount does, but keeps the /dev/fuse fd for the caller (go-fuse
// hides it, and a handover must pass it on).
func directMount(mountpoint string, mo *fuse.MountOptions) (int, error) {
	source := mo.FsName
	if source == "" {
		source = mo.Name
	}
	var flags uintptr = syscall.MS_NOSUID | syscall.MS_NODEV
	if mo.DirectMountFlags != 0 {
		flags = mo.DirectMountFlags
	}
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err != nil {
		return -1, err
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	r := []string{
		fmt.Sprintf("fd=%d", fd),
		fmt.Sprintf("rootmode=%o", st.Mode&syscall.S_IFMT),
		fmt.Sprintf("user_id=%d", os.Geteuid()),
		fmt.Sprintf("group_id=%d", os.Getegid()),
		fmt.Sprintf("max_read=%d", mo.MaxWrite),
	}
	for _, o := range mo.Options {
		switch o {
		case "nodev":
			flags |= syscall.MS_NODEV
		case "nosuid":
			flags |= syscall.MS_NOSUID
		case "noexec":
			flags |= syscall.MS_NOEXEC
		default:
			r = append(r, o)
		}
	}
	if mo.AllowOther {
		r = append(r, "allow_other")
	}
	if err := unix.Mount(source, mountpoint, "fuse."+mo.Name, flags, strings.Join(r, ",")); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// pollHack does what go-fuse's WaitMount does for mounts it made itself:
// an open and a poll of its magic file, so that the kernel learns at once
// that POLL is not supported (go-fuse answers it), instead of a Go
// program's netpoller calling into its own mount later.
func pollHack(mountpoint string) error {
	fd, err := unix.Open(path.Join(mountpoint, ".go-fuse-epoll-hack"), unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	return unix.Close(fd)
}
