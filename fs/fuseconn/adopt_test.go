package fuseconn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/fs/fstest"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// loopTree is go-fuse's loopback tree over a directory as a Tree: the
// connection layer's own tests need a tree, and package fs's import this
// one. Its node IDs are the source's inode numbers, so a new tree over the
// same directory gives the kernel's nodes the same IDs.
type loopTree struct {
	root gofs.InodeEmbedder
	inos *Inodes
}

func newLoopTree(t *testing.T, src string) *loopTree {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(src, &st); err != nil {
		t.Fatal(err)
	}
	lr := &gofs.LoopbackRoot{Path: src, Dev: uint64(st.Dev)}
	lr.NewNode = func(r *gofs.LoopbackRoot, _ *gofs.Inode, _ string, _ *syscall.Stat_t) gofs.InodeEmbedder {
		return &cachedNode{LoopbackNode: gofs.LoopbackNode{RootData: r}}
	}
	root := lr.NewNode(lr, nil, "", &st)
	lr.RootNode = root
	return &loopTree{root: root, inos: NewInodes()}
}

// cachedNode is a loopback node whose files are read through the server,
// never by passthrough: the relayed server (relayedMount) cannot register
// backing files, and the kernel refuses a passthrough open of an inode
// open in cached mode.
type cachedNode struct{ gofs.LoopbackNode }

func (n *cachedNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if lf, ok := fh.(*gofs.LoopbackFile); ok {
		return noPassthrough{lf}, fl, errno
	}
	return fh, fl, errno
}

type noPassthrough struct{ *gofs.LoopbackFile }

func (noPassthrough) PassthroughFd() (int, bool) { return -1, false }

func (l *loopTree) Root() gofs.InodeEmbedder              { return l.root }
func (l *loopTree) Inodes() *Inodes                       { return l.inos }
func (l *loopTree) ExportState() (json.RawMessage, error) { return nil, nil }
func (l *loopTree) SeedState(json.RawMessage) error       { return nil }
func (l *loopTree) Replay(*Replay)                        {}

// relayedMount mounts tree as mount does, but its server reads the
// connection through a relay (a socketpair): stopRelay then makes the
// server stop reading the connection, as an old daemon's exit does, with
// its requests read and not answered still the kernel's. A second server
// in this process can then take the connection over, which the old one's
// readers, blocked in read(2) on it, would otherwise race.
func relayedMount(t *testing.T, mnt string, tree Tree, opt MountOptions) (srv *Server, stopRelay func()) {
	t.Helper()
	mo, rfs := newRequestPath(tree.Root(), opt)
	mo.DisableSplice = true // the server writes into a socket
	fd, err := directMount(mnt, &mo)
	if err != nil {
		t.Fatalf("FUSE mount failed (tests need /dev/fuse and root): %v", err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // kernel → server, until stopped
		defer wg.Done()
		buf := make([]byte, maxWrite+64<<10)
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(stop), Events: unix.POLLIN}}
			if _, err := unix.Poll(fds, -1); err != nil {
				if err == unix.EINTR {
					continue
				}
				return
			}
			if fds[1].Revents != 0 || fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
				return
			}
			n, err := unix.Read(fd, buf)
			if err == unix.EINTR || err == unix.ENOENT {
				continue
			}
			if err != nil {
				return
			}
			if _, err := unix.Write(sp[1], buf[:n]); err != nil {
				return
			}
		}
	}()
	go func() { // server → kernel, while the socket lives
		buf := make([]byte, maxWrite+64<<10)
		for {
			n, err := unix.Read(sp[1], buf)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				return
			}
			unix.Write(fd, buf[:n]) // a reply to an interrupted request fails; go on
		}
	}()
	rfs.intr.setConn(fd)
	mo2 := mo
	mo2.DirectMount = false
	server, err := fuse.NewServer(rfs, fmt.Sprintf("/dev/fd/%d", sp[0]), &mo2)
	if err != nil {
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		t.Fatal(err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		t.Fatal(err)
	}
	if err := pollHack(mnt); err != nil {
		t.Fatal(err)
	}
	srv = &Server{server: server, mountpoint: mnt, log: logOrDiscard(nil), fd: fd, rfs: rfs,
		root: tree.Root().EmbeddedInode(), tree: tree, fuseOpts: mo}
	t.Cleanup(func() {
		// After the test's own cleanup (the mount is gone): the old
		// server's held requests go on and its readers, blocked on the
		// socket, read its end, and leave.
		srv.Thaw()
		unix.Shutdown(sp[1], unix.SHUT_RDWR)
	})
	var once sync.Once
	return srv, func() {
		once.Do(func() {
			unix.Write(stop, []byte{1, 0, 0, 0, 0, 0, 0, 0})
			wg.Wait()
		})
	}
}

// TestAdoptServesTheSameMount: the project's POSIX table (fs/fstest) holds
// on a mount before and after its connection is frozen, snapshotted and
// adopted by another server in this process: a file held open across
// keeps reading through its handle, and a request that arrived while the
// mount was frozen is answered by the new server (FUSE_NOTIFY_RESEND).
func TestAdoptServesTheSameMount(t *testing.T) {
	src := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	if err := os.MkdirAll(filepath.Join(src, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"f", "d/g", "d/e/h"} {
		if err := os.WriteFile(filepath.Join(src, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mnt := t.TempDir()
	opt := MountOptions{ReadOnly: true}
	old, stopRelay := relayedMount(t, mnt, newLoopTree(t, src), opt)
	var cur *Server = old
	t.Cleanup(func() {
		stopRelay()
		if err := cur.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})

	t.Run("before", func(t *testing.T) { fstest.RunReadOnly(t, mnt, src) })

	held, err := os.Open(filepath.Join(mnt, "d", "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	head := make([]byte, 16)
	if _, err := held.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}

	if err := old.Freeze(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap, err := old.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Handles) == 0 || len(snap.Nodes) == 0 {
		t.Fatalf("snapshot of a mount with a file open: %d nodes, %d handles", len(snap.Nodes), len(snap.Handles))
	}
	// A request that arrives while frozen: the old server reads it and
	// holds it at its gate.
	frozenStat := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(mnt, "d", "e", "h"))
		frozenStat <- err
	}()
	testwaitHeld(t, old, 1)
	stopRelay() // the old daemon is gone: it reads the connection no more

	fd, err := unix.Dup(old.Fd())
	if err != nil {
		t.Fatal(err)
	}
	a, err := Adopt(fd, mnt, snap, newLoopTree(t, src), opt)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	srv, err := a.Serve()
	if err != nil {
		t.Fatal(err)
	}
	cur = srv
	select {
	case err := <-frozenStat:
		if err != nil {
			t.Fatalf("the stat held by the frozen server: %v", err)
		}
	case <-time.After(testwait.Guard):
		t.Fatal("the stat held by the frozen server was never answered by the new one (FUSE_NOTIFY_RESEND needs Linux 6.9 or later)")
	}
	got := make([]byte, len(data))
	if _, err := held.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading the handle opened before the adoption: %v (equal: %v)", err, bytes.Equal(got, data))
	}

	t.Run("after", func(t *testing.T) { fstest.RunReadOnly(t, mnt, src) })
}

// testwaitHeld waits until n requests wait at srv's frozen gate.
func testwaitHeld(t *testing.T, srv *Server, n int) {
	t.Helper()
	testwait.Eventually(t, func() bool { return srv.rfs.waitingAtGate() >= n }, "%d requests held at the frozen gate", n)
}
