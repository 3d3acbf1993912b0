package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/node"
)

// startServer serves a fresh node's API on a socket in a temp dir.
func startServer(t *testing.T) (*Client, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	serveNode(t, testNode(t), sock)
	return NewClient(sock), sock
}

// testNode is a fresh node with no disk cache and its staging in a temp
// dir.
func testNode(t *testing.T) *node.Node {
	t.Helper()
	s := node.Defaults()
	s.Cache.Dir = ""
	s.Output.StagingDir = t.TempDir()
	n, err := node.New(t.Context(), node.Options{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// serveNode serves n's API on sock until the test ends, then closes n.
func serveNode(t *testing.T, n *node.Node, sock string) {
	t.Helper()
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(n, slog.New(slog.DiscardHandler))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		n.Close(context.Background())
	})
}

func TestListenRefusesALiveSocket(t *testing.T) {
	_, sock := startServer(t)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v, %v", fi.Mode(), err)
	}
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "another mlfsd daemon") {
		t.Errorf("Listen on a live socket: %v", err)
	}
	// A socket left by a dead daemon is replaced.
	dead := filepath.Join(t.TempDir(), "dead.sock")
	l, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l2, err := Listen(dead)
	if err != nil {
		t.Fatalf("Listen on a dead socket: %v", err)
	}
	l2.Close()
}

func TestErrorsAreClear(t *testing.T) {
	c, sock := startServer(t)
	ctx := context.Background()
	var ae *Error
	err := c.Unmount(ctx, "/nowhere/mounted")
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || !strings.Contains(err.Error(), "/nowhere/mounted") {
		t.Errorf("Unmount of an unknown target: %v", err)
	}
	_, err = c.Mount(ctx, node.MountRequest{URI: "bogus://x/", Target: t.TempDir(), ReadOnly: true})
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("Mount of a bad URI: %v", err)
	}
	ms, err := c.List(ctx)
	if err != nil || len(ms) != 0 {
		t.Errorf("List: %v, %v", ms, err)
	}
	st, err := c.Status(ctx)
	if err != nil || len(st) != 0 {
		t.Errorf("Status: %v, %v", st, err)
	}
	// A body with an unknown field is refused, not half-read.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Post("http://mlfsd/v1/mount", "application/json", strings.NewReader(`{"uri":"nas:///x/","target":"/t","readonly":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "readonly") {
		t.Errorf("unknown field: %s %s", resp.Status, body)
	}
}

func TestWireCredentialsRedacted(t *testing.T) {
	c := Credentials{OSSAccessKeyID: "AKID", OSSAccessKeySecret: "s3cr3t", HDFSPrincipal: "alice@R", HDFSKeytab: []byte("\x05\x02k3ytab")}
	for _, s := range []string{c.String(), c.GoString()} {
		if strings.Contains(s, "s3cr3t") || strings.Contains(s, "k3ytab") || strings.Contains(s, base64.StdEncoding.EncodeToString(c.HDFSKeytab)) {
			t.Errorf("secret in %q", s)
		}
	}
	// The keytab's bytes survive the trip to node.Credentials and back.
	if back := wireCredentials(c.node()); !bytes.Equal(back.HDFSKeytab, c.HDFSKeytab) || back.HDFSPrincipal != "alice@R" {
		t.Errorf("keytab round trip: %q %q", back.HDFSPrincipal, back.HDFSKeytab)
	}
}
