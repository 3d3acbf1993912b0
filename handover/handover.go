// Package handover is the protocol by which a new `mlfsd daemon
// --takeover` takes the live mounts of the running one, over a unix socket
// in the state directory:
//
//	new → old  hello {protocol, version}
//	old → new  offer {mounts} + their /dev/fuse fds (SCM_RIGHTS)   | refuse {error}
//	new → old  prepared                                            | abort {error}
//	old → new  committed
//	new → old  ack (it told the service manager it is the main process)
//	old        stops its uploads, closes its cache, exits without unmounting
//	new        waits for the old process to be gone, then serves
//
// A new daemon refused by a daemon of protocol 1 asks again in protocol 1
// (inputs only, no lookup counts); an old daemon answers a hello of any
// protocol from 1 to Protocol in that protocol.
//
// Until the old daemon commits, a failure anywhere (the new daemon
// refusing, failing to set a mount up, dying before its ack) leaves it
// serving (its mounts were only frozen) and both sides log why; the new
// daemon exits with the error. After it commits, the new daemon owns the
// mounts.
package handover

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/node"
)

// Protocol is the version of this handover protocol and of what it
// carries (the mount snapshots). A daemon refuses another protocol.
// 2: output mounts (their trees and staged files open for writing) and the
// kernel's lookup count of every node.
const Protocol = 2

// minProtocol is the oldest protocol spoken, both ways. Protocol 1 carries
// input mounts only, and no lookup counts: the nodes of its snapshots are
// pinned (never forgotten) by the daemon that takes them.
const minProtocol = 1

// SocketPath is the handover socket of the daemon with this state dir.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, "takeover.sock") }

type message struct {
	Type     string               `json:"type"` // hello, offer, refuse, prepared, abort, committed
	Protocol int                  `json:"protocol,omitempty"`
	Version  string               `json:"version,omitempty"`
	Error    string               `json:"error,omitempty"`
	Mounts   []node.HandoverMount `json:"mounts,omitempty"`
}

// maxMessage bounds a message (a snapshot of a very large tree).
const maxMessage = 1 << 30

func send(c *net.UnixConn, m message, fds []int) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	buf = append(buf, body...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	// The fds travel with the first byte; the rest follows as a stream.
	n, oobn, err := c.WriteMsgUnix(buf, oob, nil)
	if err != nil {
		return err
	}
	if oobn != len(oob) {
		return errors.New("the fds were not sent")
	}
	if n < len(buf) {
		_, err = c.Write(buf[n:])
	}
	return err
}

// recv reads one message and the fds that came with it.
func recv(c *net.UnixConn) (message, []int, error) {
	var fds []int
	readFull := func(p []byte) error {
		for len(p) > 0 {
			oob := make([]byte, unix.CmsgSpace(4*64))
			n, oobn, _, _, err := c.ReadMsgUnix(p, oob)
			if oobn > 0 {
				cms, perr := unix.ParseSocketControlMessage(oob[:oobn])
				if perr == nil {
					for _, cm := range cms {
						if got, err := unix.ParseUnixRights(&cm); err == nil {
							fds = append(fds, got...)
						}
					}
				}
			}
			if n == 0 && err == nil {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				return err
			}
			p = p[n:]
		}
		return nil
	}
	closeFds := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	var hdr [4]byte
	if err := readFull(hdr[:]); err != nil {
		closeFds()
		return message{}, nil, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > maxMessage {
		closeFds()
		return message{}, nil, fmt.Errorf("handover message of %d bytes", size)
	}
	body := make([]byte, size)
	if err := readFull(body); err != nil {
		closeFds()
		return message{}, nil, err
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		closeFds()
		return message{}, nil, fmt.Errorf("handover message: %w", err)
	}
	return m, fds, nil
}

// Offer serves one new daemon that connected to the handover socket: it
// freezes n's mounts and offers them. It returns true once the old daemon
// (the caller) committed: it must then exit at once, without unmounting.
// Otherwise its mounts were thawed and the error says why.
func Offer(ctx context.Context, c *net.UnixConn, n *node.Node, version string, log *slog.Logger) (committed bool, err error) {
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	hello, fds, err := recv(c)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		return false, fmt.Errorf("reading the new daemon's hello: %w", err)
	}
	refuse := func(err error) (bool, error) {
		send(c, message{Type: "refuse", Error: err.Error()}, nil)
		return false, err
	}
	if hello.Type != "hello" || hello.Protocol < minProtocol || hello.Protocol > Protocol {
		return refuse(fmt.Errorf("the new daemon (version %q) speaks handover protocol %d, this one (version %q) %d", hello.Version, hello.Protocol, version, Protocol))
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	hv, err := n.FreezeForHandover(fctx)
	cancel()
	if err != nil {
		return refuse(err)
	}
	if hello.Protocol < 2 {
		for _, m := range hv.Mounts {
			if !m.Request.ReadOnly {
				hv.Abort()
				return refuse(fmt.Errorf("%s is an output mount, which the new daemon's handover protocol %d cannot carry", m.Info.Target, hello.Protocol))
			}
		}
	}
	fds = fds[:0]
	for _, m := range hv.Mounts {
		fds = append(fds, m.Fd)
	}
	log.Info("handover: mounts frozen and offered", "mounts", len(hv.Mounts), "new_version", hello.Version)
	if err := send(c, message{Type: "offer", Protocol: hello.Protocol, Version: version, Mounts: hv.Mounts}, fds); err != nil {
		hv.Abort()
		return false, fmt.Errorf("sending the offer: %w", err)
	}
	reply, rfds, err := recv(c)
	for _, fd := range rfds {
		unix.Close(fd)
	}
	switch {
	case err != nil:
		hv.Abort()
		return false, fmt.Errorf("the new daemon went away before it was ready: %w", err)
	case reply.Type != "prepared":
		hv.Abort()
		return false, fmt.Errorf("the new daemon could not take the mounts: %s", reply.Error)
	}
	// The new daemon is ready. It acknowledges "committed" once it told
	// the service manager it is the main process now; only then does this
	// one let go for good (stop its uploads, close its cache) and exit. A
	// new daemon that died before that leaves this one serving: it still
	// has everything.
	// The connection closed by the new daemon before its ack means it
	// will not serve: it died, or gave up (it closes the connection only
	// once it has, or once it serves). A timeout is not that: a new daemon
	// that is slow to ack serves once this one is gone.
	newGone := func(err error) bool {
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
	if err := send(c, message{Type: "committed"}, nil); err != nil && newGone(err) {
		hv.Abort()
		return false, fmt.Errorf("the new daemon went away as it was told to serve: %w", err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, afds, err := recv(c)
	for _, fd := range afds {
		unix.Close(fd)
	}
	if err != nil && newGone(err) {
		hv.Abort()
		return false, fmt.Errorf("the new daemon died before it took the mounts: %w", err)
	}
	if err := hv.Commit(); err != nil {
		// The cache is closed either way; the new daemon opens it again.
		log.Error("handover: closing", "err", err)
	}
	return true, nil
}

// Take connects to the running daemon's handover socket and takes its
// mounts into n; it returns once they are served by this process. Before
// the old daemon commits, any error leaves it serving and is returned;
// after, errors (a mount that could not be served, a cache that could not
// be opened) are logged and Take returns nil: the rest is served. committed, if set,
// runs once the old daemon committed and before it exits (to tell systemd
// the new main PID).
//
// protocol is the protocol to ask for: 0 is Protocol (another value is for
// tests of a refused handover).
func Take(ctx context.Context, socket string, n *node.Node, version string, protocol int, log *slog.Logger, committed func()) error {
	if protocol != 0 {
		return take(ctx, socket, n, version, protocol, log, committed)
	}
	err := take(ctx, socket, n, version, Protocol, log, committed)
	var old *olderProtocol
	if errors.As(err, &old) {
		// A daemon of before protocol 2 refuses any other: ask again in
		// its own (its mounts are inputs; their nodes are pinned).
		log.Info("handover: the running daemon speaks an older handover protocol; taking over in protocol 1", "refusal", old.refusal)
		return take(ctx, socket, n, version, 1, log, committed)
	}
	return err
}

// ErrNoDaemon is Take's error when no daemon listens on the handover
// socket (none runs with this state dir): nothing was taken, and a daemon
// started with --takeover=auto starts afresh.
var ErrNoDaemon = errors.New("no mlfsd daemon is running with this state directory")

// olderProtocol is the refusal of a daemon that speaks only protocol 1,
// which says so in these words.
type olderProtocol struct{ refusal string }

func (e *olderProtocol) Error() string { return e.refusal }

func take(ctx context.Context, socket string, n *node.Node, version string, protocol int, log *slog.Logger, committed func()) error {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			err = errors.Join(ErrNoDaemon, err)
		}
		return fmt.Errorf("connecting to the running daemon's handover socket %s: %w", socket, err)
	}
	defer c.Close()
	// The old process, identified now: it must be gone before we serve.
	pidfd, pid, err := peerPidfd(c)
	if err != nil {
		return err
	}
	defer unix.Close(pidfd)
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	if err := send(c, message{Type: "hello", Protocol: protocol, Version: version}, nil); err != nil {
		return fmt.Errorf("handover hello: %w", err)
	}
	offer, fds, err := recv(c)
	if err != nil {
		return fmt.Errorf("reading the running daemon's offer: %w", err)
	}
	if offer.Type != "offer" {
		for _, fd := range fds {
			unix.Close(fd)
		}
		if protocol > 1 && offer.Protocol == 0 && strings.Contains(offer.Error, "speaks handover protocol") && strings.HasSuffix(offer.Error, " 1") {
			return &olderProtocol{refusal: offer.Error}
		}
		return fmt.Errorf("the running daemon (pid %d) refused the handover: %s", pid, offer.Error)
	}
	if len(fds) != len(offer.Mounts) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		send(c, message{Type: "abort", Error: "fds missing"}, nil)
		return fmt.Errorf("the offer carries %d mounts and %d fds", len(offer.Mounts), len(fds))
	}
	for i := range offer.Mounts {
		offer.Mounts[i].Fd = fds[i]
		if offer.Protocol < 2 && offer.Mounts[i].Snapshot != nil {
			offer.Mounts[i].Snapshot.Uncounted = true
		}
	}
	ad, err := n.Adopt(ctx, offer.Mounts)
	if err != nil {
		send(c, message{Type: "abort", Error: err.Error()}, nil)
		return err
	}
	if err := send(c, message{Type: "prepared"}, nil); err != nil {
		ad.Abort()
		return fmt.Errorf("handover: %w", err)
	}
	reply, rfds, rerr := recv(c)
	for _, fd := range rfds {
		unix.Close(fd)
	}
	if rerr == nil && reply.Type != "committed" {
		ad.Abort()
		return fmt.Errorf("the running daemon did not commit the handover: %s", reply.Error)
	}
	if rerr != nil && !exited(pidfd, 0) {
		ad.Abort()
		return fmt.Errorf("the running daemon (pid %d) did not commit the handover: %w", pid, rerr)
	}
	if rerr == nil {
		if committed != nil {
			committed()
		}
		if err := send(c, message{Type: "ack"}, nil); err != nil && !exited(pidfd, 0) {
			// The old daemon reads the broken connection as this one gone,
			// and serves on (Offer): so must this one give up.
			ad.Abort()
			return fmt.Errorf("acknowledging the handover to the running daemon (pid %d), which serves on: %w", pid, err)
		}
	}
	// Committed (or the old process died holding only frozen mounts): once
	// it no longer reads the connections, they are ours.
	if !exited(pidfd, 30*time.Second) {
		log.Warn("the old daemon did not exit after the handover; killing it", "pid", pid)
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		exited(pidfd, -1)
	}
	log.Info("handover: the old daemon is gone; serving its mounts", "old_pid", pid, "mounts", len(offer.Mounts))
	if err := ad.Serve(); err != nil {
		// Past the commit there is no going back: what serves, serves.
		log.Error("taking over: some of it failed", "err", err)
	}
	return nil
}

// peerPidfd returns a pidfd of the process at the other end of c.
func peerPidfd(c *net.UnixConn) (int, int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, 0, err
	}
	if cerr != nil {
		return -1, 0, fmt.Errorf("handover socket peer: %w", cerr)
	}
	pidfd, err := unix.PidfdOpen(int(cred.Pid), 0)
	if err != nil {
		return -1, 0, fmt.Errorf("pidfd of the running daemon (pid %d): %w", cred.Pid, err)
	}
	return pidfd, int(cred.Pid), nil
}

// exited waits up to d (forever if negative) for the process to exit.
func exited(pidfd int, d time.Duration) bool {
	ms := int(d / time.Millisecond)
	if d < 0 {
		ms = -1
	}
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, ms)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}
