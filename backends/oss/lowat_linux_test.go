package oss

import (
	"net"
	"testing"
	"time"
)

// TestLowatConnWakesOnceWhole: a large read of a body that trickles in
// (4 KiB pieces, 1 ms apart) returns it in at most two reads (the first
// may take what was there before it waited); a plain connection returns
// it piece by piece.
func TestLowatConnWakesOnceWhole(t *testing.T) {
	const pieces, piece = 64, 4 << 10
	reads := func(wrap func(net.Conn) net.Conn) int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, piece)
			for range pieces {
				if _, err := c.Write(buf); err != nil {
					return
				}
				time.Sleep(time.Millisecond) // the pace of the body, not a timeout
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c = wrap(c)
		p := make([]byte, pieces*piece)
		n, calls := 0, 0
		for n < len(p) {
			m, err := c.Read(p[n:])
			if err != nil {
				t.Fatalf("after %d bytes: %v", n, err)
			}
			n += m
			calls++
		}
		return calls
	}
	if got := reads(newLowatConn); got > 2 {
		t.Errorf("lowatConn: %d reads for %d KiB, want at most 2", got, pieces*piece>>10)
	}
	if got := reads(func(c net.Conn) net.Conn { return c }); got <= 2 {
		t.Errorf("plain connection: %d reads; the test does not trickle", got)
	}
}
