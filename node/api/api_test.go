package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/nasroots"
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
	if !errors.Is(err, node.ErrNotMounted) {
		t.Errorf("Unmount of an unknown target is not node.ErrNotMounted: %v", err)
	}
	_, err = c.Mount(ctx, node.MountRequest{URI: "bogus://x/", Target: t.TempDir(), ReadOnly: true})
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("Mount of a bad URI: %v", err)
	}
	for _, sentinel := range sentinels {
		if errors.Is(err, sentinel) {
			t.Errorf("Mount of a bad URI is %v: %v", sentinel, err)
		}
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
	c := Credentials{Credentials: node.Credentials{OSSAccessKeyID: "AKID", OSSAccessKeySecret: "s3cr3t", S3RoleARN: "arn:aws:iam::1:role/r", S3WebIdentityToken: "w3b-t0ken"}}
	for _, s := range []string{c.String(), c.GoString(), fmt.Sprint(c), fmt.Sprintf("%+v", c)} {
		if strings.Contains(s, "s3cr3t") || strings.Contains(s, "w3b-t0ken") {
			t.Errorf("secret in %q", s)
		}
	}
	// On the wire, whole: the daemon needs the secrets.
	data, err := json.Marshal(MountRequest{URI: "s3://b/p/", Target: "/t", Credentials: &c})
	if err != nil {
		t.Fatal(err)
	}
	var back MountRequest
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Credentials.Credentials != c.Credentials {
		t.Errorf("after the wire: %v", back.Credentials)
	}
	// A misspelt key is refused, not ignored (the node's own identity
	// would be used instead).
	err = json.Unmarshal([]byte(`{"uri":"s3://b/p/","target":"/t","credentials":{"s3_acess_key_id":"x"}}`), &back)
	if err == nil || !strings.Contains(err.Error(), "s3_acess_key_id") {
		t.Errorf("misspelt credential: %v", err)
	}
}

// rawConn dials the API socket as a client that speaks HTTP by hand.
func rawConn(t *testing.T, sock string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestStalledClientsAreCut: a client whose body never comes, or whose
// headers never end, does not hold its connection: the daemon answers or
// closes it within its header and body timeouts (5 s each). The read
// deadline of 25 s is only a hang guard (before the timeouts, a stalled
// body held its connection for as long as the client wished, and stalled
// headers for 30 s).
func TestStalledClientsAreCut(t *testing.T) {
	_, sock := startServer(t)
	body := rawConn(t, sock)
	if _, err := io.WriteString(body, "POST /v1/mount HTTP/1.1\r\nHost: mlfsd\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"uri\":"); err != nil {
		t.Fatal(err)
	}
	header := rawConn(t, sock)
	if _, err := io.WriteString(header, "POST /v1/mount HTTP/1.1\r\nHost: mlfsd\r\n"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]net.Conn{"stalled body": body, "stalled headers": header} {
		c.SetReadDeadline(time.Now().Add(25 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil {
			t.Errorf("%s: the daemon did not close the connection: %v (read %q)", name, err, got)
			continue
		}
		if c == body && (!strings.Contains(string(got), "400 Bad Request") || !strings.Contains(string(got), "not received within")) {
			t.Errorf("%s: answer %q, want a 400 saying the body did not come", name, got)
		}
	}
}

// TestRelativeTargetsRefused: a target the daemon would resolve against
// its own working directory is refused with a message saying so, for
// mount, unmount and drain alike; nothing is mounted.
func TestRelativeTargetsRefused(t *testing.T) {
	c, sock := startServer(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	src := t.TempDir()
	for path, body := range map[string]string{
		"/v1/mount":   `{"uri":"nas://` + src + `/","target":"mnt/x","read_only":true}`,
		"/v1/unmount": `{"target":"../mnt"}`,
		"/v1/drain":   `{"target":"mnt"}`,
	} {
		resp, err := hc.Post("http://mlfsd"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), "relative path") || !strings.Contains(string(got), "absolute path") {
			t.Errorf("%s with a relative target: %s %s", path, resp.Status, got)
		}
	}
	ms, err := c.List(t.Context())
	if err != nil || len(ms) != 0 {
		t.Errorf("mounts after the refusals: %v, %v", ms, err)
	}
}

// sentinels are the node errors an Error matches with errors.Is.
var sentinels = []error{node.ErrHandingOver, node.ErrNotMounted, node.ErrTargetBusy, nasroots.ErrNotAllowed, node.ErrClosed}

// TestErrorIsNodeSentinels: a reply of each of the node's sentinel errors,
// as the server writes it, matches that error with errors.Is and no other;
// a reply without a code (a daemon older than the codes) matches by its
// status, and other replies match none.
func TestErrorIsNodeSentinels(t *testing.T) {
	srv := NewServer(testNode(t), slog.New(slog.DiscardHandler))
	c := NewClient("/nowhere.sock")
	for _, want := range sentinels {
		rec := httptest.NewRecorder()
		srv.fail(rec, httptest.NewRequest("POST", "/v1/mount", nil), fmt.Errorf("mount /x: %w", want))
		var err error = c.replyError(rec.Code, rec.Body.Bytes())
		for _, other := range sentinels {
			if got := errors.Is(err, other); got != (other == want) {
				t.Errorf("reply of %q (%d): errors.Is(%q) = %v", want, rec.Code, other, got)
			}
		}
		var ae *Error
		if !errors.As(err, &ae) {
			t.Fatalf("reply of %q is %T", want, err)
		}
		if want == node.ErrHandingOver {
			continue // its code is how clients see it at all; no fallback
		}
		old := &Error{Status: ae.Status, Message: ae.Message}
		if !errors.Is(old, want) {
			t.Errorf("a codeless %d reply does not match %q", ae.Status, want)
		}
	}
	for _, status := range []int{http.StatusBadRequest, http.StatusInternalServerError, 499} {
		e := &Error{Status: status, Message: "x"}
		for _, s := range sentinels {
			if errors.Is(e, s) {
				t.Errorf("a %d reply matches %q", status, s)
			}
		}
	}
}
