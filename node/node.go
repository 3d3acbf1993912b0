// Package node is the service layer of mlfsd: the mounts of one host. A Node
// owns the backends (one client per store location and credentials), one
// block cache shared by every input mount, one write-back store per output
// mount, the mount / drain / unmount lifecycle, the mount table kept in a
// state directory, and the Prometheus registry. `mlfsd mount`, `mlfsd run`
// and `mlfsd daemon` are thin callers of it.
//
// Lock order: Node.mu, then mount.mu. Node.cacheMu is a leaf. No lock is
// held while mounting, unmounting, draining or talking to a store.
// mount.refreshing is taken with no other lock held; identity.mu is a leaf
// (held across a call to an STS, which no other lock waits behind).
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/cache"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/node/nasroots"
	"github.com/mlfsd/mlfsd/writeback"
)

// Errors callers can test for with errors.Is.
var (
	// ErrNotMounted: no mount of this node at that target.
	ErrNotMounted = errors.New("not mounted by this mlfsd")
	// ErrTargetBusy: the target holds a different mount of this node.
	ErrTargetBusy = errors.New("target already mounted")
	// ErrClosed: the node is shutting down.
	ErrClosed = errors.New("mlfsd node is shutting down")
)

// Options configure a Node.
type Options struct {
	// Settings are the node's own settings (cache, staging root) and the
	// defaults of every mount. Start from Defaults().
	Settings Settings
	// StateDir, when set, keeps the mount table there, so that a node
	// started again after a crash serves the same mounts again (Restore).
	StateDir string
	// CacheFallback lets input mounts run with a memory-only cache when the
	// cache directory is locked by another process, instead of failing.
	CacheFallback bool
	// Log receives diagnostics (nil: discarded).
	Log *slog.Logger
	// Progress receives progress lines of long steps: the index of a large
	// disk cache at start, and drains (nil: none).
	Progress io.Writer
	// FUSEDebug logs every FUSE request (very verbose).
	FUSEDebug bool
	// OpenCache opens the shared cache in New rather than at the first
	// input mount, so that a busy or unusable cache directory fails at
	// start (a daemon).
	OpenCache bool
	// NASRoots, when set, is the administrator's list of host directories
	// a mount request may name with nas:// (its channel, or a shared
	// cache tier given in its options); an empty policy allows none. A
	// node that takes requests from others (the daemon, the CSI plugin)
	// sets it; nil leaves a local caller's own requests unchecked.
	NASRoots *nasroots.Policy
}

// MountRequest asks for one mount.
type MountRequest struct {
	// URI is the channel: oss://, s3://, hdfs://, nas:// or file://. An output
	// must be a directory URI (ending in '/').
	URI string
	// Target is the mountpoint: an existing empty directory.
	Target string
	// ReadOnly mounts an input channel (cached, read-only); otherwise an
	// output channel (write-back).
	ReadOnly bool
	// Options override mount-scope options of the table by name
	// ("oss-part-size": "16MiB"); each is validated.
	Options map[string]string
	// Credentials to reach the store; empty fields use the node's own.
	Credentials Credentials
}

// MountInfo describes a live mount.
type MountInfo struct {
	Target    string            `json:"target"`
	URI       string            `json:"uri"`
	ReadOnly  bool              `json:"read_only"`
	Options   map[string]string `json:"options,omitempty"`
	MountedAt time.Time         `json:"mounted_at"`
}

// States of a mount in Status.
const (
	// StateMounted: the mount is served.
	StateMounted = "mounted"
	// StateWaitingCredentials: restored after a restart, the mount waits
	// for its client to bring the credentials it was made with (they are
	// not kept); it is not served meanwhile.
	StateWaitingCredentials = "waiting_for_credentials"
)

// MountStatus is a mount's figures.
type MountStatus struct {
	MountInfo
	// State is StateMounted or StateWaitingCredentials.
	State string `json:"state"`
	// ReadBytes: bytes the daemon served to readers of an input mount
	// (reads the kernel serves itself by passthrough are not seen here).
	ReadBytes int64 `json:"read_bytes"`
	// BackendReadBytes and BackendRequests: what this mount asked of its store.
	BackendReadBytes int64 `json:"backend_read_bytes"`
	BackendRequests  int64 `json:"backend_requests"`
	// CacheHitBytes: of this mount's reads, the bytes found in each tier
	// (memory, disk), and the sizes of files handed to the kernel for
	// passthrough (counted at open: the kernel reads those without us).
	CacheHitBytes map[string]int64 `json:"cache_hit_bytes,omitempty"`
	// Upload queue of an output mount.
	UploadPendingFiles int64 `json:"upload_pending_files"`
	UploadPendingBytes int64 `json:"upload_pending_bytes"`
	UploadFailedFiles  int64 `json:"upload_failed_files"`
}

// Node is the set of mounts of one host. It is safe for concurrent use.
type Node struct {
	opt   Options
	log   *slog.Logger
	reg   *prometheus.Registry
	pool  *backendPool
	state *stateFile // nil without Options.StateDir
	// shared are the shared cache tiers input mounts read through.
	shared *sharedTiers

	cacheMu sync.Mutex
	cache   *cache.Cache // GUARDED_BY(cacheMu): made by the first input mount

	mu     sync.Mutex
	mounts map[string]*mount // GUARDED_BY(mu): by target, including mounts under way
	closed bool              // GUARDED_BY(mu)
	// waiting are mounts of the mount table that were made with a
	// client's credentials, which are not kept: after a restart they wait
	// for their client (a pod's republish) to bring credentials again,
	// rather than run on the node's identity. GUARDED_BY(mu), by target.
	waiting map[string]stateMount
	// handover: the mounts are frozen for a new daemon (handover.go);
	// mount and unmount requests are refused meanwhile.
	handover bool // GUARDED_BY(mu)
}

// mount is one mount of the node.
type mount struct {
	req MountRequest // as first asked, credentials included (memory only)
	// set are the settings the mount runs with: the node's, with the
	// request's options (buildMount).
	set Settings
	// id holds the credentials the mount runs on, as last given (a
	// republish refreshes them); nil for the node's own identity.
	id *identity
	// refreshing serialises refreshes of id (each may roll back to the
	// credentials it found).
	refreshing sync.Mutex
	// probe asks the store for one entry of the mount's root: whether
	// the credentials of a refresh are good. Set before ready is closed.
	probe func(context.Context) error
	info  MountInfo
	ready chan struct{} // closed when mounting finished (err set on failure)
	err   error

	// Set before ready is closed, read-only afterwards.
	srv            *mfs.Server
	store          *writeback.Store // outputs
	view           *cache.View      // inputs: this mount's view of the node's cache
	metrics        *mountMetrics
	releaseBackend func()
	done           chan struct{} // closed once unmounted and released

	mu         sync.Mutex
	unmounting *unmountAttempt // GUARDED_BY(mu): an Unmount under way (not an external umount)
	// detaching: the unmount under way drained and is detaching the
	// mount; a handover is refused from then on. GUARDED_BY(mu)
	detaching bool
}

// unmountAttempt is one Unmount of a mount; a concurrent Unmount of the
// same mount waits for it and answers as it does.
type unmountAttempt struct {
	done chan struct{} // closed when the attempt ended
	err  error         // set before done is closed
}

// live reports whether m finished mounting successfully.
func (m *mount) live() bool {
	select {
	case <-m.ready:
		return m.err == nil
	default:
		return false
	}
}

// New makes a node. Nothing is mounted until Mount (or Restore).
func New(ctx context.Context, opt Options) (*Node, error) {
	if err := opt.Settings.Validate(); err != nil {
		return nil, err
	}
	if sh := opt.Settings.Shared; sh.URI != "" || sh.KeyFile != "" {
		// Refused here, not at the first mount: a daemon set up without
		// the tier's key, or with a bad one, says so when it starts.
		if _, err := tierKey(sh); err != nil {
			return nil, err
		}
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	n := &Node{opt: opt, log: opt.Log, pool: newBackendPool(opt.Log), mounts: map[string]*mount{}, waiting: map[string]stateMount{}}
	n.reg = newNodeRegistry(n)
	n.shared = newSharedTiers(n.log, n.reg)
	if opt.OpenCache {
		if _, err := n.sharedCache(); err != nil {
			return nil, err
		}
	}
	if opt.StateDir != "" {
		st, err := openState(opt.StateDir)
		if err != nil {
			return nil, err
		}
		n.state = st
	}
	return n, nil
}

// Registry is the node-wide metrics registry; every mount's metrics are
// served beside it by Handler.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// sameRequest reports whether req asks for mount m: the same channel,
// mode and options, and credentials if m was made with some (fresh ones:
// a republish brings a new token, or keys rotated in a Secret). A mount
// made on the node's own identity takes no credentials, nor the reverse.
func sameRequest(m *mount, req MountRequest) bool {
	a := m.req
	if a.URI != req.URI || a.ReadOnly != req.ReadOnly || !maps.Equal(a.Options, req.Options) {
		return false
	}
	return (m.id == nil) == req.Credentials.IsZero()
}

// ErrNeedsCredentials refuses a request without credentials for a mount
// that was made with a client's (they are not kept across a restart).
var ErrNeedsCredentials = errors.New("the mount was made with a client's credentials; it waits for them and never runs on the node's own")

func kind(readOnly bool) string {
	if readOnly {
		return "input (read-only)"
	}
	return "output (write-back)"
}

// Mount mounts req and returns once the mount is up. The same request again
// for the same target returns the live mount; a different one is refused
// with ErrTargetBusy. On error nothing stays mounted or open.
func (n *Node) Mount(ctx context.Context, req MountRequest) (_ MountInfo, err error) {
	if req.Target == "" {
		return MountInfo{}, errors.New("mount: a target (mountpoint) is required")
	}
	target, err := filepath.Abs(req.Target)
	if err != nil {
		return MountInfo{}, fmt.Errorf("mount: target %q: %w", req.Target, err)
	}
	req.Target = target
	if len(req.Options) == 0 {
		req.Options = nil
	}
	u, set, err := n.mountSettings(req)
	if err != nil {
		return MountInfo{}, err
	}

	n.mu.Lock()
	// Handing over comes first: a committed handover closes the node,
	// and a client must then wait for the new daemon, not give up.
	if n.handover {
		n.mu.Unlock()
		return MountInfo{}, ErrHandingOver
	}
	if n.closed {
		n.mu.Unlock()
		return MountInfo{}, ErrClosed
	}
	if w, ok := n.waiting[target]; ok {
		if w.URI != u.String() || w.ReadOnly != req.ReadOnly || !maps.Equal(w.Options, req.Options) {
			n.mu.Unlock()
			return MountInfo{}, fmt.Errorf("%w: %s waits for its client's credentials to serve %s as an %s again; unmount it first", ErrTargetBusy, target, w.URI, kind(w.ReadOnly))
		}
		if req.Credentials.IsZero() {
			n.mu.Unlock()
			return MountInfo{}, fmt.Errorf("%s (%s): %w: send the mount request again with its credentials (a CSI republish does)", target, w.URI, ErrNeedsCredentials)
		}
		delete(n.waiting, target) // mounted below; back to waiting if that fails
		defer func() {
			n.mu.Lock()
			if _, live := n.mounts[target]; !live && err != nil {
				n.waiting[target] = w
			}
			n.mu.Unlock()
		}()
	}
	if m, ok := n.mounts[target]; ok {
		n.mu.Unlock()
		if !sameRequest(m, req) {
			return MountInfo{}, fmt.Errorf("%w: %s holds %s as an %s; unmount it first", ErrTargetBusy, target, m.req.URI, kind(m.req.ReadOnly))
		}
		select {
		case <-m.ready:
		case <-ctx.Done():
			return MountInfo{}, ctx.Err()
		}
		if m.err != nil {
			return MountInfo{}, m.err
		}
		if m.id != nil {
			if err := m.refresh(ctx, req.Credentials, n.log); err != nil {
				return MountInfo{}, err
			}
		}
		return m.info, nil
	}
	m := &mount{req: req, ready: make(chan struct{}), done: make(chan struct{})}
	n.mounts[target] = m
	n.mu.Unlock()

	err = n.mountNow(ctx, m, u, set)
	if err != nil {
		m.err = err
		n.mu.Lock()
		delete(n.mounts, target)
		n.mu.Unlock()
		close(m.ready)
		return MountInfo{}, err
	}
	close(m.ready)
	go n.watch(m)
	n.saveState()
	n.log.Info("mounted", "source", u.String(), "mountpoint", target, "read_only", req.ReadOnly)
	return m.info, nil
}

// checkNASRoots refuses a request naming a host directory the
// administrator did not allow (Options.NASRoots): its nas:// channel, or a
// nas:// shared cache tier in its options (the node writes the tier).
// It returns the channel and the settings with those paths resolved, so
// that a link changed after the check does not move the mount.
func (n *Node) checkNASRoots(req MountRequest, u backends.URI, set Settings) (backends.URI, Settings, error) {
	p := n.opt.NASRoots
	if p == nil {
		return u, set, nil
	}
	u, err := p.Check(u, !req.ReadOnly)
	if err != nil {
		return u, set, fmt.Errorf("mount %s: %w", req.Target, err)
	}
	if tier, ok := req.Options["shared-cache"]; ok && tier != "" {
		tu, err := backends.ParseURI(tier)
		if err != nil {
			return u, set, err
		}
		if tu, err = p.Check(tu, true); err != nil {
			return u, set, fmt.Errorf("mount %s: shared cache tier: %w", req.Target, err)
		}
		set.Shared.URI = tu.String()
	}
	return u, set, nil
}

// mountSettings resolves what req asks for: its channel and the
// settings it runs with (the node's, with the request's options), host
// directories checked against the NAS roots. A fresh mount and one taken
// over (or restored) resolve it here alike.
func (n *Node) mountSettings(req MountRequest) (backends.URI, Settings, error) {
	u, err := backends.ParseURI(req.URI)
	if err != nil {
		return u, Settings{}, err
	}
	set, err := n.opt.Settings.WithMountOptions(req.Options)
	if err != nil {
		return u, set, err
	}
	if !req.ReadOnly && !u.IsDir() {
		return u, set, fmt.Errorf("output channel %s must be a directory URI (end it with '/')", u)
	}
	return n.checkNASRoots(req, u, set)
}

// built is a mount made ready to be served, by buildMount, the same for a
// fresh mount and one taken over: what differs between them is only how
// the FUSE connection is had (mounted, or adopted from the old daemon)
// and when the cache and an output's Store open.
type built struct {
	// b is the mount's store, instrumented with its metrics.
	b backends.Backend
	// mopt are the FUSE server's options.
	mopt mfs.MountOptions
	// Inputs: in is the store read through the shared tier, if any, and
	// iopt the tree's options (the caller sets Source).
	in   backends.Backend
	iopt mfs.InputOptions
	// Outputs: the Store's options and the tree's (the caller opens the
	// Store and sets it).
	wopt writeback.Options
	oopt mfs.OutputOptions
}

// buildMount sets up mount m of channel u with settings set (from
// mountSettings): the backend from the pool under the mount's identity,
// its metrics, the FUSE server's options, an output's options or an
// input's shared tier. It records on m what it made (id, metrics, probe,
// the effective settings, the backend's release). check obtains the
// credentials' keys now (a fresh mount); a mount taken over gets them at
// its first request, since every mount is frozen until all are adopted.
// On error m holds nothing to release.
func (n *Node) buildMount(ctx context.Context, m *mount, u backends.URI, set Settings, check bool) (built, error) {
	var bm built
	raw, key, release, id, err := n.backendFor(ctx, u, set, m.req, check)
	if err != nil {
		return bm, err
	}
	m.id, m.set = id, set
	m.metrics = newMountMetrics(m.req.Target)
	bm.b = instrument(raw, m.metrics)
	m.probe = probeOf(bm.b)
	bm.mopt = mfs.MountOptions{FSName: u.String(), Log: n.log, Observe: m.metrics.observe, Debug: n.opt.FUSEDebug, ReadOnly: m.req.ReadOnly}
	if m.req.ReadOnly {
		// The cache's misses read the source through the shared tier, if any.
		if bm.in, err = n.shared.through(ctx, bm.b, set); err != nil {
			release()
			return bm, err
		}
		bm.iopt = mfs.InputOptions{Key: key, Log: n.log, KeepOpens: !set.Input.NoOpen}
	} else if bm.wopt, bm.oopt, err = n.outputOptions(set, m); err != nil {
		release()
		return bm, err
	}
	m.releaseBackend = release
	return bm, nil
}

// mountNow does the mounting of m; on error it leaves nothing behind.
func (n *Node) mountNow(ctx context.Context, m *mount, u backends.URI, set Settings) (err error) {
	target := m.req.Target
	if err := PrepareMountpoint(target, n.log); err != nil {
		return err
	}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	if !m.req.ReadOnly && u.Scheme == backends.SchemeNAS {
		// An output directory need not exist yet (an OSS prefix never has
		// to); the NAS backend opens only existing roots.
		if err := os.MkdirAll(u.Path, 0o755); err != nil {
			return fmt.Errorf("create output directory %s: %w", u.Path, err)
		}
	}
	bm, err := n.buildMount(ctx, m, u, set, true)
	if err != nil {
		return err
	}
	undo = append(undo, m.releaseBackend)

	if m.req.ReadOnly {
		c, err := n.sharedCache()
		if err != nil {
			return err
		}
		// Cached data is served to this mount once the store authorized
		// its credentials for the object (cache/authz.go).
		m.view = c.ViewAs(m.req.Credentials.fingerprint())
		m.metrics.serveFrom(m.view)
		bm.iopt.Source = m.view
		srv, err := mfs.MountInput(target, bm.in, bm.iopt, bm.mopt)
		if err != nil {
			return err
		}
		m.srv = srv
	} else {
		st, err := writeback.Open(ctx, bm.b, bm.wopt)
		if err != nil {
			return err
		}
		undo = append(undo, func() { st.Close() })
		bm.oopt.Store = st
		srv, err := mfs.MountOutput(ctx, target, bm.oopt, bm.mopt)
		if err != nil {
			return err
		}
		m.store = st
		m.srv = srv
	}
	m.info = MountInfo{Target: target, URI: u.String(), ReadOnly: m.req.ReadOnly, Options: m.req.Options, MountedAt: time.Now().UTC()}
	return nil
}

// outputOptions are the Store and tree options of output mount m (its
// Store is left to the caller).
func (n *Node) outputOptions(set Settings, m *mount) (writeback.Options, mfs.OutputOptions, error) {
	o := set.Output
	wopt := writeback.Options{
		StagingDir:      o.StagingDir,
		Concurrency:     o.Concurrency,
		StagingSync:     o.StagingSync,
		MaxAttempts:     o.Retries,
		BandwidthLimit:  o.BandwidthLimit,
		StreamThreshold: o.StreamThreshold,
		Registry:        prometheus.WrapRegistererWith(prometheus.Labels{"mount": m.req.Target}, m.metrics.reg),
		Log:             n.log,
	}
	oopt := mfs.OutputOptions{FsyncDurable: o.FsyncDurable, NoPassthrough: !o.Passthrough, Log: n.log}
	if o.Owner != "" {
		owner, err := ParseOwner(o.Owner) // validated by the table
		if err != nil {
			return wopt, oopt, err
		}
		oopt.Owner = &owner
	}
	return wopt, oopt, nil
}

// sharedCache returns the node's block cache, making it on first use.
func (n *Node) sharedCache() (*cache.Cache, error) {
	n.cacheMu.Lock()
	defer n.cacheMu.Unlock()
	if n.cache != nil {
		return n.cache, nil
	}
	c := n.opt.Settings.Cache
	opt := cache.Options{
		Dir:            c.Dir,
		MemoryBytes:    c.MemoryBytes,
		DiskBytes:      c.DiskBytes,
		FreeFloorBytes: c.FreeFloorBytes,
		MaxWindow:      c.MaxWindow,
		TotalRequests:  c.Requests,
		NoPassthrough:  c.NoPassthrough,
		Log:            n.log,
		Progress:       n.opt.Progress,
	}
	if c.NoWarm {
		opt.WarmAfter = -1
	}
	if opt.FreeFloorBytes == 0 {
		opt.FreeFloorBytes = 1 // 0 would mean "default"; the user asked for none
	}
	sc, err := cache.New(opt)
	if errors.Is(err, cache.ErrDirBusy) && n.opt.CacheFallback {
		// Another process owns that disk cache: serve from memory rather
		// than refuse to mount.
		n.log.Warn("disk cache in use by another process; running without one (give --cache-dir, or mount through `mlfsd daemon` to share one cache)", "dir", c.Dir, "err", err)
		opt.Dir = ""
		sc, err = cache.New(opt)
	}
	if err != nil {
		return nil, fmt.Errorf("read cache: %w", err)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The block arena (--cache-memory plus a block per request in
		// flight) is mapped outside the Go heap, so the heap's soft limit
		// bounds only the rest (FUSE request buffers, listings, upload
		// parts, heap blocks when the arena runs dry): the 256 MiB the
		// --cache-memory help promises.
		debug.SetMemoryLimit(256 << 20)
	}
	n.cache = sc
	return sc, nil
}

// cacheFigures returns the cache's per-tier figures, if there is a cache.
func (n *Node) cacheFigures() (tierFigures, bool) {
	n.cacheMu.Lock()
	c := n.cache
	n.cacheMu.Unlock()
	if c == nil {
		return tierFigures{}, false
	}
	return cacheTierFigures(c.Stats()), true
}

// countWaiting counts the mounts waiting for their client's credentials.
func (n *Node) countWaiting() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.waiting)
}

func (n *Node) countMounts() (in, out int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.mounts {
		if !m.live() {
			continue
		}
		if m.req.ReadOnly {
			in++
		} else {
			out++
		}
	}
	return in, out
}

// watch waits for m's mount to go away, by Unmount or externally (someone
// ran umount). An output unmounted externally is still drained, so closed
// files are not left behind. Then it releases what the mount held.
func (n *Node) watch(m *mount) {
	m.srv.Wait()
	m.mu.Lock()
	external := m.unmounting == nil
	m.mu.Unlock()
	if external {
		n.log.Warn("unmounted externally", "mountpoint", m.info.Target)
		if m.store != nil {
			n.log.Warn("output mount was unmounted externally; uploading what was closed", "mountpoint", m.info.Target)
			if err := m.store.Drain(context.Background(), n.progress(m)); err != nil {
				n.log.Error("drain after external unmount", "mountpoint", m.info.Target, "err", err)
			}
		}
	}
	if m.store != nil {
		if p := m.store.Pending(); p > 0 {
			n.log.Warn("files closed after the drain stay journaled in the staging dir; they are uploaded at the next mount of this channel",
				"files", p, "staging_dir", m.store.StagingDir())
		}
		m.store.Close()
	}
	m.releaseBackend()
	n.mu.Lock()
	if n.mounts[m.info.Target] == m {
		delete(n.mounts, m.info.Target)
	}
	n.mu.Unlock()
	n.saveState()
	close(m.done)
}

func (n *Node) progress(m *mount) func(writeback.Progress) {
	if n.opt.Progress == nil {
		return nil
	}
	return writeback.PrintProgress(n.opt.Progress, m.info.URI)
}

// find returns the live mount at target.
func (n *Node) find(ctx context.Context, target string) (*mount, error) {
	abs, err := filepath.Abs(target)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", target, err)
	}
	n.mu.Lock()
	m, ok := n.mounts[abs]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s: %w", abs, ErrNotMounted)
	}
	select {
	case <-m.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if m.err != nil {
		return nil, fmt.Errorf("%s: %w", abs, ErrNotMounted)
	}
	return m, nil
}

// Done returns a channel closed once the mount at target is gone (by
// Unmount or externally) and released. Unknown targets: ErrNotMounted.
func (n *Node) Done(target string) (<-chan struct{}, error) {
	m, err := n.find(context.Background(), target)
	if err != nil {
		return nil, err
	}
	return m.done, nil
}

// Drain waits until every file closed so far on the output mount at target
// is durable in its store (a no-op for an input).
func (n *Node) Drain(ctx context.Context, target string) error {
	m, err := n.find(ctx, target)
	if err != nil {
		return err
	}
	if m.store == nil {
		return nil
	}
	err = m.store.Drain(ctx, n.progress(m))
	if err != nil && n.handingOver() {
		// Cut by the handover: the new daemon uploads the rest from
		// the journal; the client drains again there.
		return fmt.Errorf("drain %s: %w", m.info.Target, ErrHandingOver)
	}
	return err
}

// handingOver reports whether a handover is under way (or committed).
func (n *Node) handingOver() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.handover
}

// Detach unmounts without draining first: an output's closed files not yet
// uploaded stay journaled and are uploaded at the next mount of the channel
// (for callers that drained already, such as a job runner).
func (n *Node) Detach(ctx context.Context, target string) error {
	return n.unmount(ctx, target, false)
}

// Unmount drains an output mount (until ctx is done: what is not uploaded
// by then stays journaled for the next mount of the channel), then
// detaches the mount and releases what it held. A handover that starts
// while it drains cuts it: nothing is unmounted, and it returns
// ErrHandingOver (the new daemon drains and unmounts when asked again).
func (n *Node) Unmount(ctx context.Context, target string) error {
	return n.unmount(ctx, target, true)
}

func (n *Node) unmount(ctx context.Context, target string, drain bool) error {
	if n.dropWaiting(target) {
		return nil
	}
	m, err := n.find(ctx, target)
	if err != nil {
		return err
	}
	n.mu.Lock()
	if n.handover {
		n.mu.Unlock()
		return ErrHandingOver
	}
	m.mu.Lock()
	prev := m.unmounting
	a := &unmountAttempt{done: make(chan struct{})}
	if prev == nil {
		m.unmounting = a
	}
	m.mu.Unlock()
	n.mu.Unlock()
	if prev != nil {
		select {
		case <-prev.done:
			return prev.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	detached, err := n.unmountOnce(ctx, m, drain)
	a.err = err
	if detached {
		<-m.done
		n.log.Info("unmounted", "mountpoint", m.info.Target)
	} else {
		// Still mounted: a later Unmount may try again.
		m.mu.Lock()
		m.unmounting = nil
		m.mu.Unlock()
	}
	close(a.done)
	return a.err
}

// unmountOnce drains m (if asked) and detaches it, unless a handover
// started meanwhile: then m stays mounted (the new daemon's) and the
// error is ErrHandingOver. detached reports whether m was detached (a
// drain error is returned even then).
func (n *Node) unmountOnce(ctx context.Context, m *mount, drain bool) (detached bool, err error) {
	var derr error
	if drain && m.store != nil {
		n.log.Info("draining", "mountpoint", m.info.Target)
		if derr = m.store.Drain(ctx, n.progress(m)); derr != nil {
			derr = fmt.Errorf("drain %s: %w", m.info.Target, derr)
		}
	}
	// Decided under n.mu, which FreezeForHandover holds to look at
	// detaching: either the handover takes m (and m is not detached
	// here) or it is refused because m is being detached.
	n.mu.Lock()
	if n.handover {
		n.mu.Unlock()
		n.log.Info("unmount cut by a handover; the new daemon unmounts when asked again", "mountpoint", m.info.Target)
		return false, fmt.Errorf("unmount %s: %w", m.info.Target, ErrHandingOver)
	}
	m.mu.Lock()
	m.detaching = true
	m.mu.Unlock()
	n.mu.Unlock()
	if err := m.srv.Unmount(); err != nil {
		m.mu.Lock()
		m.detaching = false
		m.mu.Unlock()
		return false, errors.Join(derr, err)
	}
	return true, derr
}

// List returns the live mounts, by target.
func (n *Node) List() []MountInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []MountInfo
	for _, m := range n.mounts {
		if m.live() {
			out = append(out, m.info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}

// Status returns every live mount's figures, by target.
func (n *Node) Status() []MountStatus {
	n.mu.Lock()
	ms := make([]*mount, 0, len(n.mounts))
	for _, m := range n.mounts {
		if m.live() {
			ms = append(ms, m)
		}
	}
	n.mu.Unlock()
	out := make([]MountStatus, 0, len(ms))
	for _, m := range ms {
		s := MountStatus{MountInfo: m.info, State: StateMounted}
		s.BackendReadBytes, s.BackendRequests = m.metrics.backendFigures()
		if m.view != nil {
			v := m.view.Stats()
			s.ReadBytes = v.BytesServed
			s.CacheHitBytes = map[string]int64{"memory": v.MemoryHitBytes, "disk": v.DiskHitBytes, "passthrough": v.PassthroughBytes}
		}
		if m.store != nil {
			u := m.store.UploadStats()
			s.UploadPendingFiles, s.UploadPendingBytes, s.UploadFailedFiles = u.PendingFiles, u.PendingBytes, u.FailedFiles
		}
		out = append(out, s)
	}
	out = append(out, n.waitingStatus()...)
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}

func (n *Node) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// Close unmounts everything (draining outputs until ctx is done), then
// closes the cache. The node cannot be used afterwards.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true
	var targets []string
	for t := range n.mounts {
		targets = append(targets, t)
	}
	n.mu.Unlock()
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Unmount(ctx, t); err != nil && !errors.Is(err, ErrNotMounted) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	n.cacheMu.Lock()
	if n.cache != nil {
		if err := n.cache.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing cache: %w", err))
		}
		n.cache = nil
	}
	n.cacheMu.Unlock()
	// After the cache: its fetches in flight read through the tiers.
	if err := n.shared.close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
