package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

// A client that stalls must not hold a connection (and a goroutine) of the
// daemon: its request line and headers, and then its body, must each
// arrive within a few seconds (bodies are at most maxBody of JSON, written
// at once by every client), and an idle keep-alive connection is closed.
// The body is bounded in the handlers (readBody), not by
// http.Server.ReadTimeout, whose deadline would also run out under a long
// mount or drain and cancel its request context.
const (
	headerTimeout = 5 * time.Second
	bodyTimeout   = 5 * time.Second
	idleTimeout   = 60 * time.Second
)

// Listen makes the API's unix socket at path, mode 0600. A socket left by a
// dead daemon is replaced; one a live daemon answers on is refused.
func Listen(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, 2*time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: another mlfsd daemon is listening there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("socket %s: %w", path, err)
		}
	}
	// The umask makes the socket 0600 from its creation: no window in
	// which another user could connect.
	old := unix.Umask(0o177)
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

type peerKey struct{}

// peer is the credentials of a connection's client.
type peer struct {
	uid, pid int
	err      error
}

// Server answers the API for one node.
type Server struct {
	n   *node.Node
	log *slog.Logger
	// allowed reports whether a peer uid may use the API.
	allowed func(uid int) bool
	http    *http.Server
	// bodyTimeout bounds the reading of a request body (bodyTimeout, but
	// tests shorten it).
	bodyTimeout time.Duration
}

// NewServer returns a server of n's API. Only root may use it (and the
// daemon's own user, which is root when it can mount).
func NewServer(n *node.Node, log *slog.Logger) *Server {
	s := &Server{n: n, log: log, bodyTimeout: bodyTimeout}
	self := os.Geteuid()
	s.allowed = func(uid int) bool { return uid == 0 || uid == self }
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/mount", s.mount)
	mux.HandleFunc("POST /v1/unmount", s.unmount)
	mux.HandleFunc("POST /v1/drain", s.drain)
	mux.HandleFunc("GET /v1/mounts", s.list)
	mux.HandleFunc("GET /v1/status", s.status)
	s.http = &http.Server{
		Handler:           s.checkPeer(mux),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerOf(c))
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s
}

// peerOf reads SO_PEERCRED of a unix connection.
func peerOf(c net.Conn) peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{err: errors.New("not a unix socket connection")}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{err: err}
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{err: err}
	}
	if cerr != nil {
		return peer{err: cerr}
	}
	return peer{uid: int(cred.Uid), pid: int(cred.Pid)}
}

// checkPeer refuses every request of a client that is not root.
func (s *Server) checkPeer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(peerKey{}).(peer)
		if p.err != nil || !s.allowed(p.uid) {
			s.log.Warn("api: refused a client", "uid", p.uid, "pid", p.pid, "err", p.err)
			reply(w, http.StatusForbidden, errorBody{Error: fmt.Sprintf("permission denied: the mlfsd API serves root only (client uid %d)", p.uid)})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Serve answers on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.http.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting requests and waits for those under way.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusBadRequest
	body := errorBody{Error: err.Error()}
	switch {
	case errors.Is(err, node.ErrHandingOver):
		code = http.StatusServiceUnavailable
		body.Code = codeHandingOver
	case errors.Is(err, node.ErrNotMounted):
		code = http.StatusNotFound
		body.Code = codeNotMounted
	case errors.Is(err, node.ErrTargetBusy):
		code = http.StatusConflict
		body.Code = codeTargetBusy
	case errors.Is(err, nasroots.ErrNotAllowed):
		code = http.StatusForbidden
		body.Code = codeNotAllowed
	case errors.Is(err, node.ErrClosed):
		code = http.StatusServiceUnavailable
		body.Code = codeClosed
	case errors.Is(err, context.Canceled):
		code = 499 // the client went away (nginx's convention)
	}
	s.log.Warn("api: request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	reply(w, code, body)
}

// decode reads the JSON body of r into v within s.bodyTimeout. A body that
// does not come in time fails the request, and the connection is closed.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(s.bodyTimeout)); err != nil {
		return fmt.Errorf("reading the request body: %w", err)
	}
	d := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	d.DisallowUnknownFields()
	err := d.Decode(v)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("bad request body: not received within %v", s.bodyTimeout)
		}
		return fmt.Errorf("bad request body: %w", err)
	}
	// The rest of the request (a mount, a drain) may take minutes: only
	// the body had a deadline.
	if err := rc.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("reading the request body: %w", err)
	}
	return nil
}

// checkTarget refuses a target that is not an absolute path: a relative
// one would be resolved against the daemon's working directory, which
// means nothing to the client (Client makes its targets absolute against
// its own).
func checkTarget(op, target string) error {
	switch {
	case target == "":
		return fmt.Errorf("%s: a target is required", op)
	case !filepath.IsAbs(target):
		return fmt.Errorf("%s: target %q is a relative path; give the absolute path of the mountpoint (the daemon cannot know the client's working directory)", op, target)
	}
	return nil
}

func (s *Server) mount(w http.ResponseWriter, r *http.Request) {
	var req MountRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := checkTarget("mount", req.Target); err != nil {
		s.fail(w, r, err)
		return
	}
	nr := node.MountRequest{URI: req.URI, Target: req.Target, ReadOnly: req.ReadOnly, Options: req.Options}
	if req.Credentials != nil {
		nr.Credentials = req.Credentials.Credentials
	}
	s.log.Info("api: mount", "source", req.URI, "mountpoint", req.Target, "read_only", req.ReadOnly, "credentials", nr.Credentials)
	info, err := s.n.Mount(r.Context(), nr)
	if errors.Is(err, oss.ErrNoCredentials) && nr.Credentials.OSSAccessKeyID == "" {
		err = noOwnCredentials(req.URI, err)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reply(w, http.StatusOK, info)
}

// noOwnCredentials explains a mount that brought no OSS key of its own
// and found none in the daemon's configuration: a user who set a key in
// the shell that ran `mount -o daemon=` would otherwise read "set
// OSS_ACCESS_KEY_ID" and find it set.
func noOwnCredentials(uri string, err error) error {
	return backends.Explain(fmt.Sprintf("open %s: no OSS credentials: the mount request brought none of its own (mount -t fuse.mlfsd -o daemon= sends none), so it uses the daemon's, and the daemon has none: "+
		"start the daemon with --oss-credentials-file FILE or with OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET in its environment, "+
		"or mount with `mlfsd mount --daemon SOCKET`, which sends those of its own environment", uri), err, nil)
}

func (s *Server) unmount(w http.ResponseWriter, r *http.Request) {
	var req UnmountRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := checkTarget("unmount", req.Target); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("api: unmount", "mountpoint", req.Target, "drain", !req.NoDrain)
	var err error
	if req.NoDrain {
		err = s.n.Detach(r.Context(), req.Target)
	} else {
		err = s.n.Unmount(r.Context(), req.Target)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reply(w, http.StatusOK, struct{}{})
}

func (s *Server) drain(w http.ResponseWriter, r *http.Request) {
	var req UnmountRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := checkTarget("drain", req.Target); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.n.Drain(r.Context(), req.Target); err != nil {
		s.fail(w, r, err)
		return
	}
	reply(w, http.StatusOK, struct{}{})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	ms := s.n.List()
	if ms == nil {
		ms = []node.MountInfo{}
	}
	reply(w, http.StatusOK, ms)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	reply(w, http.StatusOK, s.n.Status())
}
