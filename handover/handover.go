// Package handover is the protocol by which a new `mlfsd daemon
// --takeover` takes the live mounts of the running one, over a unix socket
// in the state directory:
//
//	new → old  hello {protocol, version}
//	old → new  offer {mounts} + their /dev/fuse fds (SCM_RIGHTS)   | refuse {error, protocol, min_protocol}
//	new → old  prepared                                            | abort {error}
//	old → new  committed
//	new → old  ack (it told the service manager it is the main process)
//	old        stops its uploads, closes its cache, exits without unmounting
//	new        waits for the old process to be gone, then serves
//
// A refusal names the protocols the refusing daemon speaks (protocol, and
// min_protocol when the hello's protocol was not one of them): a new
// daemon refused by an older one asks again in the highest protocol both
// speak. A daemon of protocol 1 refused without naming them, in words
// ("... speaks handover protocol 2, this one ... 1"), which are still
// recognised. An old daemon answers a hello of any protocol from
// minProtocol to Protocol in that protocol.
//
// What crosses the socket is JSON with a name fixed for every field: the
// payload of each protocol is checked against handover/testdata (see
// TestPayloadGolden); renaming a field is a new protocol.
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
	Type string `json:"type"` // hello, offer, refuse, prepared, abort, committed, ack
	// Protocol: of a hello, the one asked for; of an offer, the one it is
	// in; of a refusal, the highest the refusing daemon speaks (0 from a
	// daemon that predates this field).
	Protocol int `json:"protocol,omitempty"`
	// MinProtocol, in a refusal of the hello's protocol, is the lowest
	// the refusing daemon speaks.
	MinProtocol int                  `json:"min_protocol,omitempty"`
	Version     string               `json:"version,omitempty"`
	Error       string               `json:"error,omitempty"`
	Mounts      []node.HandoverMount `json:"mounts,omitempty"`
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
	return offer(ctx, c, n, version, log, hooks{})
}

func offer(ctx context.Context, c *net.UnixConn, n *node.Node, version string, log *slog.Logger, hk hooks) (committed bool, err error) {
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	hello, fds, err := recv(c)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		return false, fmt.Errorf("reading the new daemon's hello: %w", err)
	}
	refuse := func(err error) (bool, error) {
		send(c, message{Type: "refuse", Protocol: Protocol, Error: err.Error()}, nil)
		return false, err
	}
	if hello.Type != "hello" || hello.Protocol < minProtocol || hello.Protocol > Protocol {
		err := fmt.Errorf("the new daemon (version %q) speaks handover protocol %d, this one (version %q) %d to %d", hello.Version, hello.Protocol, version, minProtocol, Protocol)
		send(c, message{Type: "refuse", Protocol: Protocol, MinProtocol: minProtocol, Error: err.Error()}, nil)
		return false, err
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
	if hk.crashed(crashOffered) {
		return false, &crash{point: crashOffered, hv: hv}
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
	if hk.crashed(crashCommitting) {
		return false, &crash{point: crashCommitting, hv: hv}
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
	if hk.crashed(crashCommitSent) {
		return false, &crash{point: crashCommitSent, hv: hv}
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
		return take(ctx, socket, n, version, protocol, log, committed, hooks{})
	}
	err := take(ctx, socket, n, version, Protocol, log, committed, hooks{})
	var old *olderProtocol
	if errors.As(err, &old) {
		// An older daemon refuses a newer protocol: ask again in the
		// highest it speaks (protocol 1: its mounts are inputs, their
		// nodes pinned).
		log.Info("handover: the running daemon speaks an older handover protocol; taking over in its own", "protocol", old.protocol, "refusal", old.refusal)
		return take(ctx, socket, n, version, old.protocol, log, committed, hooks{})
	}
	return err
}

// ErrNoDaemon is Take's error when no daemon listens on the handover
// socket (none runs with this state dir): nothing was taken, and a daemon
// started with --takeover=auto starts afresh.
var ErrNoDaemon = errors.New("no mlfsd daemon is running with this state directory")

// olderProtocol is the refusal of a daemon that speaks only older
// protocols, the highest of which is protocol.
type olderProtocol struct {
	protocol int
	refusal  string
}

func (e *olderProtocol) Error() string { return e.refusal }

// protocolRefusal tells whether a refusal of a hello in protocol asked is
// one of the protocol, and if so, which protocol to ask for instead (0:
// none both speak). A refusal that names the refusing daemon's protocols
// says it by value; one from a daemon of protocol 1, which predates them,
// in words.
func protocolRefusal(asked int, r message) (isProtocol bool, askNext int) {
	switch {
	case r.MinProtocol != 0:
		next := min(Protocol, r.Protocol)
		if next < max(minProtocol, r.MinProtocol) || next >= asked {
			return true, 0
		}
		return true, next
	case r.Protocol == 0 && strings.Contains(r.Error, "speaks handover protocol") && strings.HasSuffix(r.Error, " 1"):
		if asked > 1 {
			return true, 1
		}
		return true, 0
	}
	return false, 0
}

func take(ctx context.Context, socket string, n *node.Node, version string, protocol int, log *slog.Logger, committed func(), hk hooks) error {
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
	oldGone := func(d time.Duration) bool { return exited(pidfd, d) }
	if hk.oldGone != nil {
		oldGone = hk.oldGone
	}
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
		if isProto, next := protocolRefusal(protocol, offer); isProto && next != 0 {
			return &olderProtocol{protocol: next, refusal: offer.Error}
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
	if hk.crashed(crashOfferReceived) {
		for _, fd := range fds {
			unix.Close(fd) // as the process's death would
		}
		return &crash{point: crashOfferReceived}
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
	// Once the offer is taken, an old daemon that is gone (it died) has
	// left the mounts to this one: their connections are held here alone.
	if err := send(c, message{Type: "prepared"}, nil); err != nil && !oldGone(0) {
		ad.Abort()
		return fmt.Errorf("handover: %w", err)
	}
	if hk.crashed(crashPrepared) {
		ad.Abort() // closes the fds, as the process's death would
		return &crash{point: crashPrepared}
	}
	reply, rfds, rerr := recv(c)
	for _, fd := range rfds {
		unix.Close(fd)
	}
	if rerr == nil && reply.Type != "committed" {
		ad.Abort()
		return fmt.Errorf("the running daemon did not commit the handover: %s", reply.Error)
	}
	if rerr != nil && !oldGone(0) {
		ad.Abort()
		return fmt.Errorf("the running daemon (pid %d) did not commit the handover: %w", pid, rerr)
	}
	if rerr == nil {
		if hk.crashed(crashCommitRead) {
			ad.Abort()
			return &crash{point: crashCommitRead}
		}
		if committed != nil {
			committed()
		}
		if err := send(c, message{Type: "ack"}, nil); err != nil && !oldGone(0) {
			// The old daemon reads the broken connection as this one gone,
			// and serves on (Offer): so must this one give up.
			ad.Abort()
			return fmt.Errorf("acknowledging the handover to the running daemon (pid %d), which serves on: %w", pid, err)
		}
	}
	// Committed (or the old process died holding only frozen mounts): once
	// it no longer reads the connections, they are ours.
	if hk.crashed(crashAcked) {
		ad.Abort()
		return &crash{point: crashAcked}
	}
	if !oldGone(30 * time.Second) {
		log.Warn("the old daemon did not exit after the handover; killing it", "pid", pid)
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		exited(pidfd, -1)
	}
	if hk.crashed(crashServing) {
		ad.Abort()
		return &crash{point: crashServing}
	}
	log.Info("handover: the old daemon is gone; serving its mounts", "old_pid", pid, "mounts", len(offer.Mounts))
	if err := ad.Serve(); err != nil {
		// Past the commit there is no going back: what serves, serves.
		log.Error("taking over: some of it failed", "err", err)
	}
	return nil
}

// Crash points: where a takeover stops when a daemon dies (or its
// connection breaks), and which daemon serves the mounts then. Before the
// old daemon sent its offer it alone holds the connections, and its death
// is an ordinary crash; once the new daemon has acknowledged the commit,
// it alone serves them, and its death is one. Between the two, a death of
// either leaves the mounts to the other, never to neither:
//
//	offer-received  new: offer and fds read, nothing set up: the old one
//	                reads the broken connection, thaws and serves.
//	prepared        new: mounts set up, prepared sent: as above (the old
//	                one had not committed).
//	commit-read     new: committed read, ack not sent: the old one reads
//	                the broken connection before any ack, thaws and serves.
//	offered         old: offer sent, prepared not read: the new one finds
//	                the old process gone and serves what it was given.
//	committing      old: prepared read, committed not sent: as above.
//	commit-sent     old: committed sent, ack not read: as above.
//	acked           new: ack sent, the old one not yet gone: it exits, and
//	                the new one serves (its death now is a crash of the
//	                daemon serving).
//	serving         new: the old one gone, about to serve.
//
// Tests (TestCrashPoints) stop a side at each through hooks.crash.
const (
	crashOfferReceived = "offer-received"
	crashPrepared      = "prepared"
	crashCommitRead    = "commit-read"
	crashOffered       = "offered"
	crashCommitting    = "committing"
	crashCommitSent    = "commit-sent"
	crashAcked         = "acked"
	crashServing       = "serving"
)

// hooks are the test hooks of a handover; the zero value is none.
type hooks struct {
	// crash, called at each crash point, ends the side there when it
	// returns true: its connection and fds are closed, as its death would,
	// and nothing is thawed.
	crash func(point string) bool
	// oldGone, for the new side, stands for "the old process exited
	// (within d)": in a test both sides are one process.
	oldGone func(d time.Duration) bool
}

func (h hooks) crashed(point string) bool { return h.crash != nil && h.crash(point) }

// crash is the error of a side stopped at a crash point; hv, on the old
// side, is its frozen handover, which a dead process would never thaw (a
// test does, to clean up).
type crash struct {
	point string
	hv    *node.Handover
}

func (c *crash) Error() string { return "crashed at " + c.point }

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
