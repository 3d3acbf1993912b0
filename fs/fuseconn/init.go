package fuseconn

// The INIT codec: the kernel's INIT request as bytes (a Snapshot carries
// it), and the answer a go-fuse server with given options gives it.

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

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
