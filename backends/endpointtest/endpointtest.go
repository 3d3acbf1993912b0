// Package endpointtest serves the misbehaving TCP endpoints that the
// connect-time tests of the backends and of mlfsd point clients at: one
// that accepts and never answers (a hung server), one that speaks a
// protocol of the test's choosing, and a port nothing listens on.
package endpointtest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Serve listens on a loopback port and runs handle on each connection it
// accepts, until the test ends; then it closes the listener and every
// connection and waits for the handlers. It returns host:port and the
// count of connections accepted.
func Serve(t testing.TB, handle func(net.Conn)) (addr string, accepted *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); handle(c) }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String(), accepted
}

// Silent accepts TCP connections and never answers: the endpoint that
// once held `mlfsd mount` silent for 120 s. It returns host:port.
func Silent(t testing.TB) string {
	t.Helper()
	addr, _ := Serve(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	return addr
}

// SilentCounting is Silent that also counts the connections it accepted.
func SilentCounting(t testing.TB) (string, *atomic.Int32) {
	t.Helper()
	return Serve(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
}

// Closed returns a loopback host:port that nothing listens on (it did a
// moment ago): a connection to it is refused.
func Closed(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
