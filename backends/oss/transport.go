package oss

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Body reads wake the reading goroutine only once a large read's worth has
// arrived (see lowatConn): the per-wakeup cost (a read syscall, the
// netpoller, a goroutine switch) is then paid per rcvLowatMax bytes instead
// of per packet burst.
const (
	// rcvLowatMin: reads shorter than this (headers, small bodies) wake
	// on the first byte, as usual.
	rcvLowatMin = 64 << 10
	// rcvLowatMax caps how much must be buffered before a read wakes: the
	// cache reads a block (1 MiB) at a time, and a block is of no use
	// before it is whole. Measured (one cold 512 MiB dd, busy machine):
	// 10,000 socket reads and 0.40-0.44 daemon CPU-s without, 4,800-5,700
	// and 0.38-0.43 with 256 KiB, 2,100 and 0.37-0.41 with 1 MiB.
	rcvLowatMax = 1 << 20
)

// newHTTPClient is the client the SDK would build for itself
// (transport_1_7.go in the SDK: the same dial and header timeouts, idle
// connections and per-operation read/write deadlines), except that on a
// plain-HTTP endpoint its connections set SO_RCVLOWAT for large reads
// (lowatConn). A TLS connection reads records into its own buffer, whose
// length says nothing about how many bytes are still to come, so TLS
// endpoints get the SDK's plain connections. The backend builds the client
// itself, rather than letting the SDK do it, to close its idle connections
// at Close: otherwise each unmounted backend kept them (and two
// goroutines each) until IdleConnTimeout, 120 s.
func newHTTPClient(tls bool, connectTimeout, rwTimeout time.Duration) *http.Client {
	lowat := !tls && lowatSupported
	d := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if lowat {
				c = newLowatConn(c)
			}
			return newDeadlineConn(c, rwTimeout, 10*rwTimeout), nil
		},
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       rwTimeout,
		ResponseHeaderTimeout: rwTimeout,
	}
	return &http.Client{Transport: tr}
}

// deadlineConn is the SDK's timeoutConn: every read and write must make
// progress within timeout; an idle connection may wait longTimeout.
type deadlineConn struct {
	net.Conn
	timeout, longTimeout time.Duration
}

func newDeadlineConn(c net.Conn, timeout, longTimeout time.Duration) *deadlineConn {
	c.SetReadDeadline(time.Now().Add(longTimeout))
	return &deadlineConn{Conn: c, timeout: timeout, longTimeout: longTimeout}
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	n, err := c.Conn.Read(b)
	c.Conn.SetReadDeadline(time.Now().Add(c.longTimeout))
	return n, err
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	n, err := c.Conn.Write(b)
	c.Conn.SetReadDeadline(time.Now().Add(c.longTimeout))
	return n, err
}
