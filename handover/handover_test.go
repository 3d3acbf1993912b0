package handover

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/node"
)

// unixPair returns the two ends of a connected unix stream socket.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func newNode(t *testing.T) *node.Node {
	t.Helper()
	set := node.Defaults()
	set.Cache.Dir = t.TempDir()
	n, err := node.New(context.Background(), node.Options{Settings: set})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// TestOfferRefusesOtherProtocol: a new daemon speaking another handover
// protocol is refused with both versions named, in words and by value
// (the protocols this one speaks), and the old node is left
// as it was (a mount request is served, not refused as mid-handover).
func TestOfferRefusesOtherProtocol(t *testing.T) {
	n := newNode(t)
	old, nw := unixPair(t)
	type result struct {
		committed bool
		err       error
	}
	done := make(chan result, 1)
	go func() {
		c, err := Offer(context.Background(), old, n, "v1", slog.New(slog.DiscardHandler))
		done <- result{c, err}
	}()
	if err := send(nw, message{Type: "hello", Protocol: Protocol + 1, Version: "v2"}, nil); err != nil {
		t.Fatal(err)
	}
	m, fds, err := recv(nw)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != "refuse" || len(fds) != 0 || !strings.Contains(m.Error, fmt.Sprintf("protocol %d", Protocol+1)) || !strings.Contains(m.Error, `"v2"`) {
		t.Fatalf("answer to another protocol: %+v (%d fds)", m, len(fds))
	}
	if m.Protocol != Protocol || m.MinProtocol != minProtocol {
		t.Fatalf("refusal names protocols %d to %d, want %d to %d", m.MinProtocol, m.Protocol, minProtocol, Protocol)
	}
	r := <-done
	if r.committed || r.err == nil {
		t.Fatalf("Offer = %v, %v; want a refusal", r.committed, r.err)
	}
	// Not left frozen: a mount request gets past the handover check (and
	// fails on its target, which does not exist).
	_, err = n.Mount(context.Background(), node.MountRequest{URI: "file:///nonexistent/", Target: t.TempDir() + "/missing", ReadOnly: true})
	if err == nil || strings.Contains(err.Error(), "handing its mounts over") {
		t.Errorf("mount after a refused handover: %v", err)
	}
}

// TestMessagesCarryFds: an offer's fds arrive with it, in order.
func TestMessagesCarryFds(t *testing.T) {
	a, b := unixPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	big := strings.Repeat("x", 1<<20) // more than one socket buffer
	go send(a, message{Type: "offer", Error: big}, []int{int(r.Fd()), int(w.Fd())})
	m, fds, err := recv(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != "offer" || len(m.Error) != len(big) || len(fds) != 2 {
		t.Fatalf("got %q with %d bytes and %d fds", m.Type, len(m.Error), len(fds))
	}
	// The received write end writes into the original pipe.
	if _, err := unix.Write(fds[1], []byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := r.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read through the passed fd: %q, %v", buf, err)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// TestTakeAsksProtocol1OfAnOlderDaemon: a daemon of protocol 1 refuses any
// other in its own words; the new daemon then asks again in protocol 1.
func TestTakeAsksProtocol1OfAnOlderDaemon(t *testing.T) {
	sock := t.TempDir() + "/takeover.sock"
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	asked := make(chan int, 2)
	go func() {
		for i := 0; i < 2; i++ {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			hello, _, err := recv(c)
			if err != nil {
				c.Close()
				return
			}
			asked <- hello.Protocol
			refusal := fmt.Sprintf("the new daemon (version %q) speaks handover protocol %d, this one (version %q) 1", hello.Version, hello.Protocol, "old")
			if hello.Protocol == 1 {
				refusal = "no mounts today"
			}
			send(c, message{Type: "refuse", Error: refusal}, nil) // as protocol 1 did: no protocol field
			c.Close()
		}
	}()
	err = Take(context.Background(), sock, newNode(t), "new", 0, slog.New(slog.DiscardHandler), nil)
	if err == nil || !strings.Contains(err.Error(), "no mounts today") {
		t.Fatalf("Take = %v; want the refusal of the second attempt", err)
	}
	if a, b := <-asked, <-asked; a != Protocol || b != 1 {
		t.Fatalf("asked for protocols %d then %d, want %d then 1", a, b, Protocol)
	}
}
