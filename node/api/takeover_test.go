package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/node"
)

// frozenServer serves the API of a node frozen for a handover on sock,
// counting the requests it answers. stop stops it (the socket goes away).
func frozenServer(t *testing.T, sock string, setup ...func(*node.Node)) (requests *atomic.Int64, stop func()) {
	t.Helper()
	n := testNode(t)
	for _, f := range setup {
		f(n)
	}
	h, err := n.FreezeForHandover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(n, slog.New(slog.DiscardHandler))
	requests = new(atomic.Int64)
	inner := srv.http.Handler
	srv.http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		inner.ServeHTTP(w, r)
	})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		srv.Shutdown(context.Background())
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		h.Abort()
		n.Close(context.Background())
	}
	t.Cleanup(stop)
	return requests, stop
}

// TestClientRetriesAcrossTakeover: a mount refused by a daemon handing
// over is sent again, on the same socket, to the daemon that listens there
// next, which mounts it.
func TestClientRetriesAcrossTakeover(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	requests, stopOld := frozenServer(t, sock)
	src, mnt := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewClient(sock)
	type result struct {
		info node.MountInfo
		err  error
	}
	res := make(chan result, 1)
	go func() {
		info, err := c.Mount(t.Context(), node.MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true})
		res <- result{info, err}
	}()
	// The old daemon refuses it (and may be asked again while it hands
	// over), then exits; the new one listens on the same socket.
	for requests.Load() == 0 {
		select {
		case r := <-res:
			t.Fatalf("Mount answered before the new daemon listened: %+v", r)
		default:
		}
		runtime.Gosched()
	}
	stopOld()
	serveNode(t, testNode(t), sock) // a new daemon
	r := <-res
	if r.err != nil {
		t.Fatalf("Mount across the takeover: %v", r.err)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "a"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("read through the mount the new daemon made: %q, %v", got, err)
	}
	if err := c.Unmount(t.Context(), mnt); err != nil {
		t.Fatal(err)
	}
}

// TestClientRetriedUnmountNotHeldFails: an unmount cut by a takeover and
// sent again to a daemon that does not hold the target fails, and not as
// the plain "not mounted" a caller may take for an unmount already done:
// this request did not drain it.
func TestClientRetriedUnmountNotHeldFails(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	src, mnt := t.TempDir(), t.TempDir()
	requests, stopOld := frozenServer(t, sock, func(n *node.Node) {
		if _, err := n.Mount(t.Context(), node.MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true}); err != nil {
			t.Fatal(err)
		}
	})
	res := make(chan error, 1)
	go func() { res <- NewClient(sock).Unmount(t.Context(), mnt) }()
	for requests.Load() == 0 {
		runtime.Gosched()
	}
	stopOld() // unmounts it: the new daemon will not hold it
	// A new daemon:
	serveNode(t, testNode(t), sock)
	err := <-res
	var ae *Error
	if err == nil || errors.As(err, &ae) || !strings.Contains(err.Error(), "not drained or unmounted by this request") {
		t.Fatalf("Unmount sent again to a daemon without the target: %v", err)
	}
}

// TestClientDoesNotRetryOrdinaryErrors: errors other than the takeover
// refusal fail at once, with their message, even from a daemon that is
// handing over: each is one request.
func TestClientDoesNotRetryOrdinaryErrors(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	requests, _ := frozenServer(t, sock)
	c := NewClient(sock)
	ctx := t.Context()
	var ae *Error
	err := c.Unmount(ctx, "/nowhere/mounted")
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Code == codeHandingOver || !strings.Contains(err.Error(), "/nowhere/mounted") {
		t.Errorf("Unmount of an unknown target: %v", err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("Unmount of an unknown target: %d requests, want 1", n)
	}
	_, err = c.Mount(ctx, node.MountRequest{URI: "bogus://x/", Target: t.TempDir(), ReadOnly: true})
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("Mount of a bad URI: %v", err)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("after the Mount of a bad URI: %d requests, want 2", n)
	}
	// No daemon on the socket: fails at once too.
	if _, err := NewClient(filepath.Join(t.TempDir(), "none.sock")).List(ctx); !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "no daemon at") {
		t.Errorf("List with no daemon: %v", err)
	}
	// A takeover refusal with a done context gives up with the context's error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Mount(cctx, node.MountRequest{URI: "nas://" + t.TempDir() + "/", Target: t.TempDir(), ReadOnly: true})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Mount with a cancelled context: %v", err)
	}
}

// TestClientWaitsWhileTakeoverMarked: a request that finds nobody on the
// socket while a daemon's takeover marker is there (the old daemon exited,
// the new one does not listen yet) waits for the new daemon; with a marker
// older than TakeoverWait, or none, it fails at once.
func TestClientWaitsWhileTakeoverMarked(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	c := NewClient(sock)
	if _, err := c.List(t.Context()); !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "no daemon at") {
		t.Fatalf("List with no daemon and no marker: %v", err)
	}
	if err := MarkTakeover(sock); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * DefaultTakeoverWait)
	if err := os.Chtimes(TakeoverMarker(sock), old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(t.Context()); !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "no daemon at") {
		t.Fatalf("List with a stale marker: %v", err)
	}
	if err := MarkTakeover(sock); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(TakeoverMarker(sock), time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := NewClient(sock).List(t.Context())
		res <- err
	}()
	serveNode(t, testNode(t), sock) // a new daemon
	if err := ClearTakeover(sock); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("List while the takeover was marked: %v", err)
	}
}
