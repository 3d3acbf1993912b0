package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/cache"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/writeback"
)

// HandoverMount is one live mount as a node hands it to another process:
// the request it was made with (credentials included: the handover socket
// is root's, in the state directory), what the kernel holds of its server,
// and its /dev/fuse fd (passed beside the message, SCM_RIGHTS).
type HandoverMount struct {
	Request MountRequest `json:"request"` // its Credentials redact themselves in JSON...
	// ...so they travel here.
	Credentials HandoverCredentials `json:"credentials"`
	Info        MountInfo           `json:"info"`
	Snapshot    *mfs.Snapshot       `json:"snapshot"`
	// Staging is an output mount's files open for writing; the rest of
	// its upload queue is the journal in the staging dir.
	Staging *writeback.HandoverState `json:"staging,omitempty"`
	Fd      int                      `json:"-"`
}

// HandoverCredentials are a mount's Credentials on the handover socket
// (the one place besides an API request body they are marshalled whole).
type HandoverCredentials = SecretCredentials

// Handover is a node whose mounts are frozen for another process: every
// request the kernel sends them waits. Abort lets them go on here; Commit
// gives them up for good.
type Handover struct {
	n      *Node
	mounts []*mount
	// Mounts are what to send.
	Mounts []HandoverMount
}

// ErrHandingOver refuses or cuts a mount, unmount or drain request during
// a handover: nothing was unmounted. The request is to be sent again to
// the daemon that answers on the socket next (the new one once it serves,
// or this one if the handover failed), which carries it out.
var ErrHandingOver = errors.New("mlfsd daemon is handing its mounts over to a new daemon; try again")

// FreezeForHandover freezes every mount and describes it for a new
// process. Mount, unmount and drain requests are refused (an unmount or a
// drain under way is cut, its mount left mounted) with ErrHandingOver
// until Abort. It fails, with everything thawed, when a mount cannot be
// handed over (one being detached, for instance).
func (n *Node) FreezeForHandover(ctx context.Context) (*Handover, error) {
	n.mu.Lock()
	if n.closed || n.handover {
		n.mu.Unlock()
		return nil, errors.New("the node is shutting down or already handing over")
	}
	h := &Handover{n: n}
	for _, m := range n.mounts {
		if !m.live() {
			n.mu.Unlock()
			return nil, fmt.Errorf("%s is being mounted; try again", m.req.Target)
		}
		// A mount being drained for an unmount is handed over: its drain
		// is cut and answered ErrHandingOver, and the client sends the
		// unmount again to the new daemon. One being detached is not.
		m.mu.Lock()
		busy := m.detaching
		m.mu.Unlock()
		if busy {
			n.mu.Unlock()
			return nil, fmt.Errorf("%s is being unmounted; try again", m.req.Target)
		}
		h.mounts = append(h.mounts, m)
	}
	n.handover = true
	n.mu.Unlock()

	fail := func(err error) (*Handover, error) {
		h.Abort()
		return nil, err
	}
	// A durable fsync waits for its upload, which may take long. Were a
	// mount frozen while another's fsync ran, it would wait for that
	// upload (a takeover during a durable fsync froze every mount of the
	// node for 13.6 s). So first, with the uploads running and nothing
	// frozen, new fsyncs wait and those running are answered, on every
	// mount at once; no fsync then runs when the mounts freeze.
	if err := h.holdFsyncs(ctx); err != nil {
		return fail(err)
	}

	// The outputs' uploaders take no new file and those uploading finish
	// (for a few seconds at most) before the mounts freeze, so that the
	// mounts are not frozen while they do.
	h.pauseStores()
	for _, m := range h.mounts {
		if err := m.srv.Freeze(ctx); err != nil {
			// Abort thaws them all: those frozen, and the fsyncs held on
			// the others.
			return fail(err)
		}
	}
	for _, m := range h.mounts {
		snap, err := m.srv.Snapshot()
		if err != nil {
			return fail(err)
		}
		hm := HandoverMount{Request: m.req, Credentials: HandoverCredentials{Credentials: m.credentials()},
			Info: m.info, Snapshot: snap, Fd: m.srv.Fd()}
		if m.store != nil {
			// Frozen: no request runs on the Store's handles, and its
			// uploads are paused.
			st := m.store.Handover()
			hm.Staging = &st
		}
		h.Mounts = append(h.Mounts, hm)
	}
	return h, nil
}

// holdFsyncs holds the fsyncs of every mount, side by side, and returns
// once none runs (see fs.Server.HoldFsyncs).
func (h *Handover) holdFsyncs(ctx context.Context) error {
	errs := make([]error, len(h.mounts))
	var wg sync.WaitGroup
	for i, m := range h.mounts {
		wg.Go(func() { errs[i] = m.srv.HoldFsyncs(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pauseStores pauses the uploads of the outputs, side by side, within
// one deadline.
func (h *Handover) pauseStores() {
	ctx, cancel := context.WithTimeout(context.Background(), storeStopTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range h.mounts {
		if m.store != nil {
			wg.Go(func() { m.store.Pause(ctx) })
		}
	}
	wg.Wait()
}

// Abort thaws the mounts: the node serves them on as before.
func (h *Handover) Abort() {
	for _, m := range h.mounts {
		m.srv.Thaw()
		if m.store != nil {
			m.store.Resume()
		}
	}
	h.n.mu.Lock()
	h.n.handover = false
	h.n.mu.Unlock()
}

// storeStopTimeout bounds the wait, at a handover, for uploads in flight
// (before the mounts freeze). An upload still running then is cancelled
// at the commit (never published in part) and the new daemon sends it
// again.
const storeStopTimeout = 3 * time.Second

// Commit gives the mounts up to the new process, which serves them once
// this one exits: the cache is closed (its directory is the new one's) and
// the mounts stay frozen. The passthrough backing files registered with
// the kernel are the new daemon's now. The process must exit next, without unmounting.
func (h *Handover) Commit() error {
	n := h.n
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	var errs []error
	// The output Stores stop (paused before the freeze): an upload still
	// in flight is cancelled, which the journal makes safe; the new daemon
	// opens the staging dirs and uploads what is pending.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	var wg sync.WaitGroup
	stopErrs := make([]error, len(h.mounts))
	for i, m := range h.mounts {
		if m.store == nil {
			continue
		}
		wg.Go(func() {
			if err := m.store.Stop(ctx); err != nil {
				stopErrs[i] = fmt.Errorf("stopping the uploads of %s: %w", m.info.Target, err)
			}
		})
	}
	wg.Wait()
	cancel()
	errs = append(errs, stopErrs...)
	n.cacheMu.Lock()
	if n.cache != nil {
		if err := n.cache.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing the cache: %w", err))
		}
		n.cache = nil
	}
	n.cacheMu.Unlock()
	return errors.Join(errs...)
}

// lateSource is the Source of an adopted input mount. The node's cache
// can be opened only once the old daemon has closed it, and opening it
// (a scan of its directory) may take long: the mounts serve at once, and
// until the cache is open, files are read from their store directly; a
// handle opened meanwhile moves to the cache at its first read after.
type lateSource struct{ v atomic.Pointer[cache.View] }

func (s *lateSource) Open(ctx context.Context, b backends.Backend, info backends.ObjectInfo) (cache.Handle, error) {
	if v := s.v.Load(); v != nil {
		return v.Open(ctx, b, info)
	}
	d, err := cache.DirectSource{}.Open(ctx, b, info)
	if err != nil {
		return nil, err
	}
	return &lateHandle{s: s, b: b, info: info, direct: d}, nil
}

// lateHandle is a file opened before the cache was.
type lateHandle struct {
	s      *lateSource
	b      backends.Backend
	info   backends.ObjectInfo
	direct cache.Handle

	mu     sync.Mutex
	cached cache.Handle // GUARDED_BY(mu): opened from the cache once there is one
	failed bool         // GUARDED_BY(mu): that open failed; stay direct
}

func (h *lateHandle) current(ctx context.Context) cache.Handle {
	v := h.s.v.Load()
	if v == nil {
		return h.direct
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cached == nil && !h.failed {
		c, err := v.Open(ctx, h.b, h.info)
		if err != nil {
			h.failed = true
		} else {
			h.cached = c
		}
	}
	if h.cached != nil {
		return h.cached
	}
	return h.direct
}

func (h *lateHandle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return h.current(ctx).ReadAt(ctx, p, off)
}

func (h *lateHandle) Close() error {
	h.mu.Lock()
	c := h.cached
	h.mu.Unlock()
	err := h.direct.Close()
	if c != nil {
		err = errors.Join(err, c.Close())
	}
	return err
}

// Adopted is the mounts of an old daemon, set up on their connections but
// not serving until Serve.
type Adopted struct {
	n     *Node
	items []adoptedMount
}

type adoptedMount struct {
	m   *mount
	a   *mfs.Adoption
	src *lateSource // inputs

	// Outputs: the Store is opened at Serve, once the old daemon let go
	// of the staging dir.
	b    backends.Backend
	wopt writeback.Options
}

// Adopt sets up servers for mounts handed over by an old daemon. Nothing
// reaches the kernel: on error (or Abort) the old daemon may serve on.
func (n *Node) Adopt(ctx context.Context, mounts []HandoverMount) (*Adopted, error) {
	ad := &Adopted{n: n}
	for i, hm := range mounts {
		if err := ad.add(ctx, hm); err != nil {
			for _, rest := range mounts[i:] {
				unix.Close(rest.Fd)
			}
			ad.Abort()
			return nil, fmt.Errorf("taking over %s: %w", hm.Info.Target, err)
		}
	}
	return ad, nil
}

func (ad *Adopted) add(ctx context.Context, hm HandoverMount) error {
	n := ad.n
	req := hm.Request
	req.Credentials = hm.Credentials.Credentials
	if hm.Snapshot == nil {
		return errors.New("no snapshot of the mount's server")
	}
	// Resolved and built as a fresh mount of the request is: the mount
	// taken over runs with the options it would get from this daemon.
	u, set, err := n.mountSettings(req)
	if err != nil {
		return err
	}
	m := &mount{req: req, info: hm.Info, ready: make(chan struct{}), done: make(chan struct{})}
	bm, err := n.buildMount(ctx, m, u, set, false)
	if err != nil {
		return err
	}
	if !req.ReadOnly {
		wopt := bm.wopt
		if hm.Staging != nil {
			wopt.Handover = hm.Staging
		} else {
			wopt.Handover = &writeback.HandoverState{}
		}
		a, err := mfs.AdoptOutput(hm.Fd, req.Target, hm.Snapshot, bm.b, bm.oopt, bm.mopt)
		if err != nil {
			m.releaseBackend()
			return err
		}
		ad.items = append(ad.items, adoptedMount{m: m, a: a, b: bm.b, wopt: wopt})
		return nil
	}
	// The cache opens once the old daemon let go of it: until then the
	// mount reads its store directly.
	src := &lateSource{}
	bm.iopt.Source = src
	a, err := mfs.AdoptInput(hm.Fd, req.Target, hm.Snapshot, bm.in, bm.iopt, bm.mopt)
	if err != nil {
		m.releaseBackend()
		return err
	}
	ad.items = append(ad.items, adoptedMount{m: m, a: a, src: src})
	return nil
}

// Abort gives up the adoption; the handed-over fds are closed.
func (ad *Adopted) Abort() {
	for _, it := range ad.items {
		it.a.Abort()
		it.m.releaseBackend()
	}
	ad.items = nil
}

// serveOutput opens an adopted output's Store on the staging dir the old
// daemon left (its journal: the uploads pending; the handed-over state:
// the files open for writing) and serves the mount.
func (ad *Adopted) serveOutput(it adoptedMount) (*mfs.Server, error) {
	st, err := writeback.Open(context.Background(), it.b, it.wopt)
	if err != nil {
		return nil, fmt.Errorf("%s: opening the staging dir the old daemon left (what it staged stays there, journaled: a restart of the daemon uploads it): %w", it.m.req.Target, err)
	}
	srv, err := it.a.ServeOutput(st)
	if err != nil {
		st.Close()
		return nil, err
	}
	it.m.store = st
	return srv, nil
}

// Serve serves the adopted mounts, then opens the cache under them. Call
// it once the old daemon exited. A mount that fails here is lost to both
// daemons; its error is returned and the others serve. A cache that cannot
// be opened leaves the mounts reading from their stores.
func (ad *Adopted) Serve() error {
	n := ad.n
	var errs []error
	var served []adoptedMount
	for _, it := range ad.items {
		var srv *mfs.Server
		var err error
		if it.m.req.ReadOnly {
			srv, err = it.a.Serve()
		} else {
			srv, err = ad.serveOutput(it)
		}
		if err != nil {
			it.a.Abort()
			it.m.releaseBackend()
			errs = append(errs, err)
			continue
		}
		it.m.srv = srv
		served = append(served, it)
		n.log.Info("serving a mount taken over", "mountpoint", it.m.info.Target)
	}
	c, err := n.sharedCache()
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: the mounts taken over read from their stores directly", err))
	}
	for _, it := range served {
		m := it.m
		if c != nil && m.req.ReadOnly {
			m.view = c.ViewAs(m.req.Credentials.fingerprint())
			m.metrics.serveFrom(m.view)
			it.src.v.Store(m.view)
		}
		n.mu.Lock()
		n.mounts[m.req.Target] = m
		n.mu.Unlock()
		close(m.ready)
		go n.watch(m)
		n.log.Info("took over mount", "source", m.info.URI, "mountpoint", m.info.Target, "mounted_at", m.info.MountedAt.Format(time.RFC3339))
	}
	n.keepWaiting()
	n.saveState()
	return errors.Join(errs...)
}
