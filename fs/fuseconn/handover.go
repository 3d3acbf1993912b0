package fuseconn

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
// Each tree hands over its own state (Snapshot.Tree, through the Tree
// interface): in package fs, an input tree its listings, an output tree
// itself, node for node.
//
// Requests in flight: the old daemon freezes (every request it reads from
// then on waits), finishes what it was answering, hands over and exits.
// The requests it read but never answered are still in the kernel's
// processing queue; the new daemon sends FUSE_NOTIFY_RESEND (Linux 6.9+)
// before it starts reading, and the kernel queues them again.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
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

// Inodes gives out a tree's inode numbers, which are also the kernel's
// node IDs (ExternalNodeID). replay, set only while an adoption looks up
// the handed over paths (before the server serves), gives those paths
// their old ones.
type Inodes struct {
	next   atomic.Uint64
	replay map[string]uint64
}

// NewInodes starts a tree's numbering; the root is 1.
func NewInodes() *Inodes {
	a := &Inodes{}
	a.next.Store(1)
	return a
}

// Ino is the number of a new node at path p (relative to the root).
func (a *Inodes) Ino(p string) uint64 {
	if a.replay != nil {
		if i, ok := a.replay[p]; ok {
			return i
		}
	}
	return a.next.Add(1)
}

// Freeze stops the mount from answering: requests read from now on wait,
// and Freeze returns once those already running are answered (or fails,
// thawed, when ctx is done first). Only a mount made by this package with
// a /dev/fuse fd it holds can be frozen for a handover.
func (m *Server) Freeze(ctx context.Context) error {
	if m.fd < 0 {
		return fmt.Errorf("%s was mounted through fusermount; its connection cannot be handed over", m.mountpoint)
	}
	if err := m.rfs.freeze(ctx); err != nil {
		return fmt.Errorf("freezing %s: %w", m.mountpoint, err)
	}
	return nil
}

// HoldFsyncs prepares a handover: FSYNCs read from now on wait (as all
// requests do once frozen), and HoldFsyncs returns once those already
// running are answered, while every other request is served as usual. It
// fails, thawed, when ctx is done first. Thaw ends the hold.
func (m *Server) HoldFsyncs(ctx context.Context) error {
	if err := m.rfs.holdFsyncs(ctx); err != nil {
		return fmt.Errorf("waiting for the fsyncs on %s: %w", m.mountpoint, err)
	}
	return nil
}

// Thaw lets a frozen mount answer again (the handover failed).
func (m *Server) Thaw() { m.rfs.thaw() }

// Fd is the mount's /dev/fuse descriptor (-1 when mounted through
// fusermount). It stays owned by the Server.
func (m *Server) Fd() int { return m.fd }

// Snapshot describes a frozen mount for a handover.
func (m *Server) Snapshot() (*Snapshot, error) {
	if m.tree == nil {
		return nil, fmt.Errorf("%s: this tree's node IDs cannot be given again by another process", m.mountpoint)
	}
	ks := m.server.KernelSettings()
	init := encodeInit(*ks)
	reply, err := negotiate(fuse.NewDefaultRawFileSystem(), m.fuseOpts, init)
	if err != nil {
		return nil, fmt.Errorf("%s: recomputing the INIT answer: %w", m.mountpoint, err)
	}
	s := &Snapshot{Init: init, InitReply: reply, NextIno: m.tree.Inodes().next.Load() + 1}
	walkTree(m.root, "", &s.Nodes)
	for i := range s.Nodes {
		s.Nodes[i].Lookups = m.rfs.lookupCount(s.Nodes[i].ID)
	}
	known := map[uint64]bool{fuse.FUSE_ROOT_ID: true}
	for _, n := range s.Nodes {
		known[n.ID] = true
	}
	tree, err := m.tree.ExportState()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.mountpoint, err)
	}
	s.Tree = tree
	s.Handles = m.rfs.openHandles()
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

// Adoption is a mount being taken over: a server set up on the handed-over
// connection, the kernel's node IDs looked up again, not yet serving.
type Adoption struct {
	mountpoint string
	fd         int // the handed-over /dev/fuse; -1 once moved onto sock
	sock       int // the fd number the server reads
	srv        *fuse.Server
	rfs        *rawFS
	tree       Tree
	mo         fuse.MountOptions
	snap       *Snapshot
	opt        MountOptions
}

// Adopt sets up a server for tree on the handed-over connection fd, as
// the snapshot snap describes it: the tree is seeded with the state the
// old one exported and the kernel's nodes are looked up again, while the
// tree is told it is being replayed. Nothing is written to fd; Serve
// starts serving, Abort gives up.
func Adopt(fd int, mountpoint string, snap *Snapshot, tree Tree, opt MountOptions) (*Adoption, error) {
	if err := tree.SeedState(snap.Tree); err != nil {
		return nil, err
	}
	tree.Replay(&Replay{})
	defer tree.Replay(nil)
	inos := tree.Inodes()
	mo, rfs := newRequestPath(tree.Root(), opt)
	maxID := snap.NextIno
	inos.replay = map[string]uint64{}
	for _, n := range snap.Nodes {
		inos.replay[n.Path] = n.ID
		maxID = max(maxID, n.ID+1)
	}
	inos.next.Store(maxID)
	srv, reply, sock, err := negotiateServer(rfs, mo, snap.Init)
	if err != nil {
		return nil, fmt.Errorf("%s: starting a server on the handed-over connection: %w", mountpoint, err)
	}
	rfs.intr.setConn(sock) // /dev/fuse from the switch on (Adoption.Serve)
	a := &Adoption{mountpoint: mountpoint, fd: fd, sock: sock, srv: srv, rfs: rfs, tree: tree,
		mo: mo, snap: snap, opt: opt}
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
		st := rfs.RawFileSystem.Lookup(nil, &fuse.InHeader{NodeId: parent}, path.Base(n.Path), &out)
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
			rfs.owe(n.ID, pinned)
		case n.Lookups > 0:
			rfs.owe(n.ID, n.Lookups)
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
			st = a.rfs.RawFileSystem.OpenDir(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, Flags: syscall.O_RDONLY}, &out)
			fillers = append(fillers, fh)
		case h.Dir:
			st = a.rfs.RawFileSystem.OpenDir(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: h.Node}, Flags: h.Flags}, &out)
		default:
			a.tree.Replay(&Replay{Handle: &h})
			st = a.rfs.RawFileSystem.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: h.Node}, Flags: h.Flags}, &out)
			a.tree.Replay(nil)
		}
		if !st.Ok() {
			return nil, fmt.Errorf("%s: opening handle %d (node %d) again: %v", a.mountpoint, fh, h.Node, st)
		}
		if out.Fh != fh {
			return nil, fmt.Errorf("%s: handle %d came back as %d", a.mountpoint, fh, out.Fh)
		}
		if ok {
			a.rfs.opened(h)
			if h.Passthrough && h.BackingID != 0 {
				a.rfs.inherit(h)
			}
		}
	}
	for _, fh := range fillers {
		a.rfs.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, Fh: fh})
	}
	// FUSE_NOTIFY_RESEND: an OutHeader with the notify code as error.
	var hdr [16]byte
	*(*fuse.OutHeader)(unsafe.Pointer(&hdr[0])) = fuse.OutHeader{Length: 16, Status: notifyResend}
	if _, err := unix.Write(a.sock, hdr[:]); err != nil && log != nil {
		log.Warn("the kernel refused FUSE_NOTIFY_RESEND (Linux < 6.9?): requests the old daemon read and did not answer stay unanswered", "mountpoint", a.mountpoint, "err", err)
	}
	a.rfs.srv = a.srv
	go a.srv.Serve()
	return &Server{server: a.srv, mountpoint: a.mountpoint, log: logOrDiscard(log), fd: a.sock,
		rfs: a.rfs, root: a.tree.Root().EmbeddedInode(), tree: a.tree, fuseOpts: a.mo}, nil
}

// Abort gives up the adoption: the handed-over fd is closed, the kernel
// never saw this process.
func (a *Adoption) Abort() {
	if a.fd >= 0 {
		unix.Close(a.fd)
		a.fd = -1
	}
}
