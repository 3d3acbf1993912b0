package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/mlfsd/mlfsd/job"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// Client talks to a node daemon's API socket. A request the daemon
// refuses or cuts because it is handing its mounts over to a new daemon
// (a takeover: nothing was unmounted) is sent again, on the same socket,
// once the new daemon answers there, for up to TakeoverWait; any other
// error is returned at once.
type Client struct {
	socket string
	http   *http.Client
	// TakeoverWait bounds the wait for the new daemon after a request was
	// cut by a takeover (and the caller's context bounds it too).
	TakeoverWait time.Duration

	mu sync.Mutex
	// takeoverUntil: a daemon answered handing_over, and until then a
	// socket nobody listens on is the gap between the old daemon's exit
	// and the new one's start, waited on by every request of this client
	// (a job runner drains its outputs one after the other). GUARDED_BY(mu)
	takeoverUntil time.Time
}

func (c *Client) sawTakeover() {
	c.mu.Lock()
	c.takeoverUntil = time.Now().Add(c.TakeoverWait)
	c.mu.Unlock()
}

// markedTakeover reports whether a daemon left the socket's
// TakeoverMarker within TakeoverWait (one that let go of its mounts and
// whose successor does not listen yet).
func (c *Client) markedTakeover() bool {
	fi, err := os.Stat(TakeoverMarker(c.socket))
	return err == nil && time.Since(fi.ModTime()) < c.TakeoverWait
}

func (c *Client) inTakeover() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Before(c.takeoverUntil)
}

// DefaultTakeoverWait is a Client's TakeoverWait: a takeover pauses the
// API for well under a second, and 30 s at most before it fails.
const DefaultTakeoverWait = 60 * time.Second

// NewClient returns a client of the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableCompression: true,
	}
	return &Client{socket: socket, http: &http.Client{Transport: tr}, TakeoverWait: DefaultTakeoverWait}
}

// Error is an error the daemon answered with.
type Error struct {
	Status  int
	Message string
	// Code is the reply's code: "handing_over" when the daemon refused
	// or cut the request for a takeover.
	Code string
}

func (e *Error) Error() string { return e.Message }

// Is matches the node's sentinel errors to the reply they were answered
// with, so that callers of the Client test errors as callers of a Node do:
// errors.Is(err, node.ErrNotMounted). The reply's code says which; a reply
// without one (a daemon older than the codes) is matched by its status.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case codeHandingOver:
		return target == node.ErrHandingOver
	case codeNotMounted:
		return target == node.ErrNotMounted
	case codeTargetBusy:
		return target == node.ErrTargetBusy
	case codeNotAllowed:
		return target == nasroots.ErrNotAllowed
	case codeClosed:
		return target == node.ErrClosed
	case "":
		switch e.Status {
		case http.StatusNotFound:
			return target == node.ErrNotMounted
		case http.StatusConflict:
			return target == node.ErrTargetBusy
		case http.StatusForbidden:
			return target == nasroots.ErrNotAllowed
		case http.StatusServiceUnavailable:
			return target == node.ErrClosed
		}
	}
	return false
}

// handingOver reports whether err is a daemon's refusal for a takeover.
func handingOver(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == codeHandingOver
}

// notListeningError is a failure to connect: no daemon listens on the
// socket (between the old daemon's exit and the new one's start, or none
// was ever started there).
type notListeningError struct {
	socket string
	err    error
}

// Error says why nothing answered and what to do, as the first thing a
// user whose daemon is not running sees.
func (e *notListeningError) Error() string {
	start := fmt.Sprintf("start it with `mlfsd daemon --socket %s --state-dir DIR` (as root), or pass --daemon with the socket of the daemon that runs", e.socket)
	switch {
	case errors.Is(e.err, syscall.ENOENT):
		return fmt.Sprintf("no daemon at %s: %s", e.socket, start)
	case errors.Is(e.err, syscall.ECONNREFUSED):
		return fmt.Sprintf("no daemon answers at %s (the socket is left from a daemon that exited): %s", e.socket, start)
	case errors.Is(e.err, syscall.EACCES), errors.Is(e.err, syscall.EPERM):
		return fmt.Sprintf("may not connect to the daemon at %s: its socket is root's only; run this as root", e.socket)
	}
	return fmt.Sprintf("mlfsd daemon at %s: %v", e.socket, e.err)
}
func (e *notListeningError) Unwrap() error { return e.err }

// do sends a request; one refused or cut by a takeover is sent again, with
// backoff, until the new daemon answers it, TakeoverWait passes or ctx is
// done. Only the takeover refusal starts the retries: a request that did
// not reach a daemon, or failed for any other reason, fails at once. While
// waiting, and for TakeoverWait after this client last saw a takeover, a
// socket nobody listens on is waited on too. The requests
// are safe to send again: a daemon that cut one did nothing of it (an
// unmount cut while draining left the mount mounted, and the new daemon
// drains and unmounts it), and a mount of a target that holds the same
// mount already answers with it.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	err := c.doOnce(ctx, method, path, in, out)
	var nl *notListeningError
	cut := handingOver(err)
	if !cut {
		if !errors.As(err, &nl) {
			return err
		}
		if !c.inTakeover() && !c.markedTakeover() {
			// No daemon, or a new one that listens and cleared the
			// marker just after this dial: one more try tells.
			return c.doOnce(ctx, method, path, in, out)
		}
		// The old daemon exited after a takeover and the new one does
		// not listen yet: wait for it.
		c.sawTakeover()
	}
	deadline := time.Now().Add(c.TakeoverWait)
	backoff := 20 * time.Millisecond
	for {
		if handingOver(err) {
			c.sawTakeover()
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the new mlfsd daemon at %s after a takeover: %w (last: %v)", c.socket, ctx.Err(), err)
		case <-t.C:
		}
		err = c.doOnce(ctx, method, path, in, out)
		if err == nil {
			return nil
		}
		var ae *Error
		if cut && errors.As(err, &ae) && errors.Is(ae, node.ErrNotMounted) {
			// The daemon that took over does not hold the target: this
			// request did not drain or unmount it. Not wrapped, so that
			// no caller takes it for an unmount already done.
			return fmt.Errorf("%s (sent again after a daemon takeover: the daemon that answers now does not hold it, so it was not drained or unmounted by this request)", ae.Message)
		}
		if !handingOver(err) && !errors.As(err, &nl) {
			if !cut {
				return err
			}
			return fmt.Errorf("%w (sent again after a daemon takeover)", err)
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("no new mlfsd daemon answered at %s within %v of a takeover: %w", c.socket, c.TakeoverWait, err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (c *Client) doOnce(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://mlfsd"+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ne *net.OpError
		if errors.As(err, &ne) {
			if ne.Op == "dial" {
				return &notListeningError{c.socket, ne.Err}
			}
			return fmt.Errorf("mlfsd daemon at %s: %w", c.socket, ne.Err)
		}
		return fmt.Errorf("mlfsd daemon at %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("mlfsd daemon at %s: %w", c.socket, err)
	}
	if resp.StatusCode/100 != 2 {
		return c.replyError(resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("mlfsd daemon at %s: bad reply: %w", c.socket, err)
		}
	}
	return nil
}

// replyError is the Error of an error reply with this status and body.
func (c *Client) replyError(status int, body []byte) *Error {
	var eb errorBody
	if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
		eb.Error = fmt.Sprintf("mlfsd daemon at %s: HTTP %d %s", c.socket, status, http.StatusText(status))
	}
	return &Error{Status: status, Message: eb.Error, Code: eb.Code}
}

// Mount asks for a mount and returns once it is up. A relative target is
// made absolute here, against the client's working directory.
func (c *Client) Mount(ctx context.Context, req node.MountRequest) (node.MountInfo, error) {
	var info node.MountInfo
	if req.Target != "" {
		abs, err := filepath.Abs(req.Target)
		if err != nil {
			return info, err
		}
		req.Target = abs
	}
	err := c.do(ctx, http.MethodPost, "/v1/mount", MountRequest{URI: req.URI, Target: req.Target, ReadOnly: req.ReadOnly,
		Options: req.Options, Credentials: wireCredentials(req.Credentials)}, &info)
	return info, err
}

// Unmount drains (an output) and unmounts target.
func (c *Client) Unmount(ctx context.Context, target string) error {
	target = absTarget(target)
	return c.do(ctx, http.MethodPost, "/v1/unmount", UnmountRequest{Target: target}, nil)
}

// Detach unmounts target without draining.
func (c *Client) Detach(ctx context.Context, target string) error {
	target = absTarget(target)
	return c.do(ctx, http.MethodPost, "/v1/unmount", UnmountRequest{Target: target, NoDrain: true}, nil)
}

// Drain waits until the output at target has uploaded what was closed.
func (c *Client) Drain(ctx context.Context, target string) error {
	target = absTarget(target)
	return c.do(ctx, http.MethodPost, "/v1/drain", UnmountRequest{Target: target}, nil)
}

// List returns the daemon's mounts.
func (c *Client) List(ctx context.Context) ([]node.MountInfo, error) {
	var out []node.MountInfo
	err := c.do(ctx, http.MethodGet, "/v1/mounts", nil, &out)
	return out, err
}

// Status returns every mount's figures.
func (c *Client) Status(ctx context.Context) ([]node.MountStatus, error) {
	var out []node.MountStatus
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &out)
	return out, err
}

// JobMounter returns a job.Runner Mounter that has the daemon mount a job's
// channels, with opts (mount-scope options) and creds on every request.
func (c *Client) JobMounter(opts map[string]string, creds node.Credentials) job.Mounter {
	return &jobMounter{c: c, opts: opts, creds: creds}
}

type jobMounter struct {
	c     *Client
	opts  map[string]string
	creds node.Credentials
}

func (j *jobMounter) MountInput(ctx context.Context, ch job.Channel, mountpoint string) (job.Mounted, error) {
	return j.mount(ctx, ch, mountpoint, true)
}

func (j *jobMounter) MountOutput(ctx context.Context, ch job.Channel, mountpoint string) (job.Mounted, error) {
	return j.mount(ctx, ch, mountpoint, false)
}

func (j *jobMounter) mount(ctx context.Context, ch job.Channel, mountpoint string, ro bool) (job.Mounted, error) {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil, err
	}
	info, err := j.c.Mount(ctx, node.MountRequest{URI: ch.URI.String(), Target: abs, ReadOnly: ro, Options: j.opts, Credentials: j.creds})
	if err != nil {
		return nil, err
	}
	return &jobMount{c: j.c, target: info.Target}, nil
}

// jobMount is a channel the daemon mounted for a job. The Runner drains
// outputs itself (a second signal aborts that), so Unmount does not drain.
type jobMount struct {
	c      *Client
	target string
}

func (m *jobMount) Drain(ctx context.Context) error { return m.c.Drain(ctx, m.target) }

func (m *jobMount) Unmount() error { return m.c.Detach(context.Background(), m.target) }

// absTarget makes a relative target absolute against the client's working
// directory (the daemon's would be wrong).
func absTarget(t string) string {
	if t == "" {
		return t
	}
	if abs, err := filepath.Abs(t); err == nil {
		return abs
	}
	return t
}
