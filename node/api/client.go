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
	"path/filepath"

	"github.com/mlfsd/mlfsd/job"
	"github.com/mlfsd/mlfsd/node"
)

// Client talks to a node daemon's API socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableCompression: true,
	}
	return &Client{socket: socket, http: &http.Client{Transport: tr}}
}

// Error is an error the daemon answered with.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
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
		var eb errorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error == "" {
			eb.Error = fmt.Sprintf("mlfsd daemon at %s: HTTP %s", c.socket, resp.Status)
		}
		return &Error{Status: resp.StatusCode, Message: eb.Error}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("mlfsd daemon at %s: bad reply: %w", c.socket, err)
		}
	}
	return nil
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
