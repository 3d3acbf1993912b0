package oss

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

const lowatSupported = true

// lowatConn sets the socket's SO_RCVLOWAT before each read: to the read's
// length (capped at rcvLowatMax) for a large read, to 1 otherwise. The
// kernel then wakes a reader parked on the socket only once that much is
// buffered, and the read takes it all in one call. A read's length never
// exceeds what the response still has to send (net/http's body reader
// limits it to the rest of the body, and reads into its own small buffer
// for headers), so a read is never left waiting for bytes that will not
// come; a peer that closes wakes it anyway. net/http reads a connection
// from one goroutine at a time, so cur needs no lock.
type lowatConn struct {
	net.Conn
	raw syscall.RawConn
	cur int // the SO_RCVLOWAT set now
}

func newLowatConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &lowatConn{Conn: c, raw: raw, cur: 1}
}

func (c *lowatConn) Read(p []byte) (int, error) {
	want := 1
	if len(p) >= rcvLowatMin {
		want = min(len(p), rcvLowatMax)
	}
	if want != c.cur {
		c.raw.Control(func(fd uintptr) {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, want) == nil {
				c.cur = want
			}
		})
	}
	return c.Conn.Read(p)
}
