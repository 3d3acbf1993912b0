package node

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/cache"
	"github.com/mlfsd/mlfsd/sharedcache"
)

// The node's cache commands: `mlfsd cache du`, `clear` and `warm`, in
// process and through the daemon's API.
//
// Lock order: warmJobs.mu and warmJob.mu are leaves.

// CacheUsage is what `mlfsd cache du` shows of a node's cache.
type CacheUsage struct {
	// Dir is the disk tier's directory ("" when memory only).
	Dir string `json:"dir,omitempty"`
	// Datasets are what the cache holds, per dataset (a backend ID:
	// store and root, e.g. oss://bucket.endpoint/prefix/).
	Datasets []cache.DatasetUsage `json:"datasets"`
	// Mounts are the input mounts and the dataset each reads (mounts of
	// one dataset share its cached data).
	Mounts []MountUsage `json:"mounts"`
	// Shared are the shared cache tiers the node's mounts read through.
	Shared []SharedTierUsage `json:"shared,omitempty"`
	// Warms are the warm-ups running, and the last ones done.
	Warms []WarmStatus `json:"warms,omitempty"`
}

// MountUsage is one input mount in CacheUsage.
type MountUsage struct {
	Target  string `json:"target"`
	URI     string `json:"uri"`
	Dataset string `json:"dataset"`
	// ReadBytes, and of them MemoryHitBytes and DiskHitBytes: what its readers
	// were served, and from which tier (MountStatus has more).
	ReadBytes      int64 `json:"read_bytes"`
	MemoryHitBytes int64 `json:"memory_hit_bytes"`
	DiskHitBytes   int64 `json:"disk_hit_bytes"`
}

// SharedTierUsage is one shared cache tier in CacheUsage.
type SharedTierUsage struct {
	URI string `json:"uri"`
	// Bytes is what the tier holds by this node's count (kept only with
	// --shared-cache-size; 0 otherwise). The tier's blocks are named by
	// hashes, so it is not split by dataset: WrittenBytes is.
	Bytes int64 `json:"bytes"`
	// WrittenBytes is what this node wrote to the tier since it started,
	// by dataset.
	WrittenBytes map[string]int64 `json:"written_bytes,omitempty"`
}

// CacheUsage reports what the node's cache holds.
func (n *Node) CacheUsage() CacheUsage {
	u := CacheUsage{Dir: n.opt.Settings.Cache.Dir, Datasets: []cache.DatasetUsage{}, Mounts: []MountUsage{}}
	n.cacheMu.Lock()
	c := n.cache
	n.cacheMu.Unlock()
	if c == nil {
		u.Dir = "" // not opened: no input mount yet
	} else {
		u.Datasets = c.Usage()
	}
	n.mu.Lock()
	for _, m := range n.mounts {
		if m.live() && m.view != nil {
			v := m.view.Stats()
			mu := MountUsage{Target: m.info.Target, URI: m.info.URI, ReadBytes: v.BytesServed, MemoryHitBytes: v.MemoryHitBytes, DiskHitBytes: v.DiskHitBytes}
			if m.source != nil {
				mu.Dataset = m.source.ID()
			}
			u.Mounts = append(u.Mounts, mu)
		}
	}
	n.mu.Unlock()
	slices.SortFunc(u.Mounts, func(a, b MountUsage) int { return strings.Compare(a.Target, b.Target) })
	u.Shared = n.shared.usage()
	u.Warms = n.warms.list()
	return u
}

// ClearRequest asks to drop cached data.
type ClearRequest struct {
	// URI names the datasets to clear: those under it (e.g.
	// oss://bucket/prefix/ clears oss://bucket.endpoint/prefix/ and
	// oss://bucket/prefix/train/). "" clears everything.
	URI string `json:"uri,omitempty"`
	// Shared also deletes URI's blocks from the shared cache tier (for
	// every node of the cluster): URI is listed, through the store
	// reached as a mount request with Options and Credentials would
	// (empty: the node's own), and each object's blocks deleted from the
	// tier those options (or the node's settings) name.
	Shared      bool              `json:"shared,omitempty"`
	Options     map[string]string `json:"options,omitempty"`
	Credentials Credentials       `json:"-"`
}

// ClearResult is what ClearCache dropped.
type ClearResult struct {
	cache.ClearResult
	// Shared is what was deleted from the shared tier (ClearRequest.Shared).
	Shared sharedcache.ForgetResult `json:"shared"`
}

// ClearCache drops cached data of the datasets req names from the node's
// memory and disk tiers (and, with req.Shared, from the shared tier). It
// is safe while mounts are live: files open now keep reading right, and
// their cached copies go when they are closed.
func (n *Node) ClearCache(ctx context.Context, req ClearRequest) (ClearResult, error) {
	var res ClearResult
	match, err := DatasetMatcher(req.URI)
	if err != nil {
		return res, err
	}
	if n.isClosed() {
		return res, ErrClosed // or the cache would open again
	}
	if req.Shared && req.URI == "" {
		return res, errors.New("clearing the shared tier needs a URI: its blocks are found by listing the dataset (the tier's other datasets are other nodes' too)")
	}
	c, err := n.sharedCache()
	if err != nil {
		return res, err
	}
	if req.Shared {
		st, err := n.storeFor(ctx, "clear", req.URI, req.Options, req.Credentials)
		if err != nil {
			return res, err
		}
		defer st.release()
		if st.tier == nil {
			return res, fmt.Errorf("clear %s: no shared cache tier is configured (give --shared-cache, or the daemon's)", req.URI)
		}
		objs, err := warmList(ctx, st.b, st.key, nil)
		if err != nil {
			return res, fmt.Errorf("listing %s: %w", req.URI, err)
		}
		res.Shared, err = st.tier.Forget(ctx, st.b.ID(), objs)
		n.log.Info("shared cache cleared", "uri", req.URI, "blocks", res.Shared.Blocks, "bytes", res.Shared.Bytes, "err", err)
		if err != nil {
			return res, err
		}
	} else if req.URI != "" && !slices.ContainsFunc(c.Usage(), func(u cache.DatasetUsage) bool { return match(u.Dataset) }) {
		return res, fmt.Errorf("the cache holds no dataset under %s (`mlfsd cache du` lists them)", req.URI)
	}
	res.ClearResult = c.Clear(match)
	n.log.Info("cache cleared", "uri", req.URI, "objects", res.Objects, "disk_bytes", res.DiskBytes, "memory_bytes", res.MemoryBytes, "deferred", res.Deferred)
	return res, nil
}

// DatasetMatcher returns whether a dataset (a backend ID) lies under uri:
// same store, path under uri's (a directory URI) or equal to it. An
// endpoint, region or profile uri leaves out matches any. "" matches every
// dataset (nil).
func DatasetMatcher(uri string) (func(dataset string) bool, error) {
	if uri == "" {
		return nil, nil
	}
	u, err := backends.ParseURI(uri)
	if err != nil {
		return nil, err
	}
	return func(dataset string) bool {
		d, err := backends.ParseURI(dataset)
		if err != nil || d.Scheme != u.Scheme || d.Bucket != u.Bucket {
			return false
		}
		if u.Endpoint != "" && d.Endpoint != u.Endpoint || u.Region != "" && d.Region != u.Region || u.Profile != "" && d.Profile != u.Profile {
			return false
		}
		if len(u.Hosts) > 0 && !slices.Equal(d.Hosts, u.Hosts) {
			return false
		}
		if u.IsDir() {
			return strings.HasPrefix(d.Path, u.Path)
		}
		return d.Path == u.Path || d.Path == path.Dir(u.Path)+"/"
	}, nil
}

// WarmRequest asks the node to fetch a dataset into its cache (and the
// shared tier its mounts use, if any) before it is read.
type WarmRequest struct {
	// URI is a prefix (everything under it is warmed) or one object.
	URI string `json:"uri"`
	// Files, when given, are the keys to warm, relative to URI (a
	// directory URI), instead of everything under it.
	Files []string `json:"files,omitempty"`
	// Parallel is the number of objects fetched at once (default 8).
	Parallel int `json:"parallel,omitempty"`
	// Target, when set, warms through the input mount there: with its
	// credentials, its shared tier, and counting to it. URI may then be
	// left out (the mount's).
	Target string `json:"target,omitempty"`
	// Options and Credentials reach the store as a mount request's do
	// (without Target).
	Options     map[string]string `json:"options,omitempty"`
	Credentials Credentials       `json:"-"`
}

// DefaultWarmParallel is the objects a warm-up fetches at once by default.
const DefaultWarmParallel = 8

// Warm-up states.
const (
	WarmListing   = "listing"
	WarmRunning   = "warming"
	WarmDone      = "done"
	WarmFailed    = "failed"
	WarmCancelled = "cancelled"
)

// WarmStatus is the progress of one warm-up.
type WarmStatus struct {
	ID     string `json:"id"`
	URI    string `json:"uri"`
	Target string `json:"target,omitempty"`
	// State is WarmListing, WarmRunning, WarmDone, WarmFailed (some
	// objects could not be fetched: Error says the first) or
	// WarmCancelled.
	State string `json:"state"`
	// Files and Bytes are what was asked for (known once listed);
	// FilesDone and BytesDone what is done of it, of which FilesCached
	// were complete in the cache already (nothing fetched) and
	// BytesFetched came from the store.
	Files        int64     `json:"files"`
	Bytes        int64     `json:"bytes"`
	FilesDone    int64     `json:"files_done"`
	BytesDone    int64     `json:"bytes_done"`
	FilesCached  int64     `json:"files_cached"`
	FilesFailed  int64     `json:"files_failed"`
	BytesFetched int64     `json:"bytes_fetched"`
	Error        string    `json:"error,omitempty"`
	Started      time.Time `json:"started"`
	Finished     time.Time `json:"finished,omitzero"`
}

// Ended reports whether the warm-up ended (in any state).
func (s WarmStatus) Ended() bool {
	return s.State == WarmDone || s.State == WarmFailed || s.State == WarmCancelled
}

// keptWarms is how many ended warm-ups stay listed.
const keptWarms = 16

// warmJobs are the node's warm-ups.
type warmJobs struct {
	ctx    context.Context // cancelled by stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	seq  int
	jobs []*warmJob // GUARDED_BY(mu): oldest first
}

type warmJob struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	st     WarmStatus // GUARDED_BY(mu)
}

func newWarmJobs() *warmJobs {
	ctx, cancel := context.WithCancel(context.Background())
	return &warmJobs{ctx: ctx, cancel: cancel}
}

func (w *warmJobs) status(j *warmJob) WarmStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.st
}

func (w *warmJobs) list() []WarmStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]WarmStatus, 0, len(w.jobs))
	for _, j := range w.jobs {
		out = append(out, w.status(j))
	}
	return out
}

// add registers a new job, forgetting the oldest ended ones past keptWarms.
func (w *warmJobs) add(uri, target string) (*warmJob, context.Context, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return nil, nil, ErrClosed
	}
	ended := 0
	for _, j := range w.jobs {
		if w.status(j).Ended() {
			ended++
		}
	}
	w.jobs = slices.DeleteFunc(w.jobs, func(j *warmJob) bool {
		if ended >= keptWarms && w.status(j).Ended() {
			ended--
			return true
		}
		return false
	})
	w.seq++
	ctx, cancel := context.WithCancel(w.ctx)
	j := &warmJob{cancel: cancel, st: WarmStatus{ID: "warm-" + strconv.Itoa(w.seq), URI: uri, Target: target, State: WarmListing, Started: time.Now().UTC()}}
	w.jobs = append(w.jobs, j)
	return j, ctx, nil
}

func (w *warmJobs) find(id string) (*warmJob, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.jobs {
		if j.st.ID == id {
			return j, true
		}
	}
	return nil, false
}

// stop cancels every warm-up and waits for them.
func (w *warmJobs) stop() {
	w.cancel()
	w.wg.Wait()
}

// ErrNoWarm: no warm-up of that ID (ended long ago, or never started).
var ErrNoWarm = errors.New("no such warm-up")

// WarmStatus returns the progress of the warm-up id.
func (n *Node) WarmStatus(id string) (WarmStatus, error) {
	j, ok := n.warms.find(id)
	if !ok {
		return WarmStatus{}, fmt.Errorf("%w: %q", ErrNoWarm, id)
	}
	return n.warms.status(j), nil
}

// CancelWarm stops the warm-up id; what it fetched stays cached, and a
// warm-up of the same objects later fetches only the rest.
func (n *Node) CancelWarm(id string) (WarmStatus, error) {
	j, ok := n.warms.find(id)
	if !ok {
		return WarmStatus{}, fmt.Errorf("%w: %q", ErrNoWarm, id)
	}
	j.cancel()
	return n.warms.status(j), nil
}

// Warm starts warming the node's cache with what req names, in the
// background, and returns its first status (WarmStatus follows it). The
// store is reached as req says (its Target mount's, or its own
// credentials, else the node's), before Warm returns: bad credentials or
// a bad URI fail the call.
func (n *Node) Warm(ctx context.Context, req WarmRequest) (WarmStatus, error) {
	if req.Parallel < 0 {
		return WarmStatus{}, fmt.Errorf("warm: parallel %d: give a positive number of objects fetched at once", req.Parallel)
	}
	if req.Parallel == 0 {
		req.Parallel = DefaultWarmParallel
	}
	if n.isClosed() {
		return WarmStatus{}, ErrClosed // or the cache would open again
	}
	c, err := n.sharedCache()
	if err != nil {
		return WarmStatus{}, err
	}
	var (
		b       backends.Backend
		key     string
		view    *cache.View
		release = func() {}
		mdone   <-chan struct{} // the Target mount's: the warm-up stops with it
		u       backends.URI
	)
	if req.Target != "" {
		m, err := n.find(ctx, req.Target)
		if err != nil {
			return WarmStatus{}, err
		}
		if m.view == nil || m.source == nil {
			return WarmStatus{}, fmt.Errorf("warm: %s is not a cached input mount (an output, or an input taken over without a cache)", m.info.Target)
		}
		if req.URI != "" && req.URI != m.info.URI {
			return WarmStatus{}, fmt.Errorf("warm: %s mounts %s, not %s", m.info.Target, m.info.URI, req.URI)
		}
		req.URI, req.Target = m.info.URI, m.info.Target
		if u, err = backends.ParseURI(req.URI); err != nil {
			return WarmStatus{}, err
		}
		b, view, mdone = m.source, m.view, m.done
		if !u.IsDir() {
			key = u.Base()
		}
	} else {
		st, err := n.storeFor(ctx, "warm", req.URI, req.Options, req.Credentials)
		if err != nil {
			return WarmStatus{}, err
		}
		u, b, key, release = st.u, st.b, st.key, st.release
		view = c.ViewAs(req.Credentials.fingerprint())
	}
	if len(req.Files) > 0 && !u.IsDir() {
		release()
		return WarmStatus{}, fmt.Errorf("warm: a file list names keys under a directory URI; %s is one object (end it with '/')", req.URI)
	}
	j, jctx, err := n.warms.add(u.String(), req.Target)
	if err != nil {
		release()
		return WarmStatus{}, err
	}
	n.warms.wg.Add(1)
	go func() {
		defer n.warms.wg.Done()
		defer release()
		defer j.cancel()
		if mdone != nil {
			go func() {
				select {
				case <-mdone:
					j.cancel()
				case <-jctx.Done():
				}
			}()
		}
		n.runWarm(jctx, j, c, view, b, key, req)
	}()
	return n.warms.status(j), nil
}

// runWarm lists what j warms, then warms it.
func (n *Node) runWarm(ctx context.Context, j *warmJob, c *cache.Cache, view *cache.View, b backends.Backend, key string, req WarmRequest) {
	finish := func(state string, err error) {
		j.mu.Lock()
		j.st.State, j.st.Finished = state, time.Now().UTC()
		if err != nil && j.st.Error == "" {
			j.st.Error = err.Error()
		}
		st := j.st
		j.mu.Unlock()
		n.log.Info("cache warm-up ended", "id", st.ID, "uri", st.URI, "state", st.State, "files", st.FilesDone, "cached", st.FilesCached,
			"failed", st.FilesFailed, "fetched_bytes", st.BytesFetched, "err", st.Error)
	}
	objs, err := warmList(ctx, b, key, req.Files)
	if ctx.Err() != nil {
		finish(WarmCancelled, nil)
		return
	}
	if err != nil {
		finish(WarmFailed, fmt.Errorf("listing %s: %w", req.URI, err))
		return
	}
	j.mu.Lock()
	j.st.State = WarmRunning
	for _, o := range objs {
		j.st.Files++
		j.st.Bytes += o.Size
	}
	j.mu.Unlock()
	err = c.Warm(ctx, view, b, objs, req.Parallel, func(o cache.WarmOutcome) {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.st.FilesDone++
		j.st.BytesDone += o.Object.Size
		j.st.BytesFetched += o.Fetched
		switch {
		case o.Err != nil:
			j.st.FilesFailed++
			if j.st.Error == "" {
				j.st.Error = fmt.Sprintf("%s: %v", o.Object.Key, o.Err)
			}
		case o.Cached:
			j.st.FilesCached++
		}
	})
	j.mu.Lock()
	failed := j.st.FilesFailed > 0
	j.mu.Unlock()
	switch {
	case err != nil:
		finish(WarmCancelled, nil)
	case failed:
		finish(WarmFailed, nil)
	default:
		finish(WarmDone, nil)
	}
}

// warmList returns the objects a warm-up fetches: key alone (a URI of one
// object), files (keys under the root), or everything under the root.
func warmList(ctx context.Context, b backends.Backend, key string, files []string) ([]backends.ObjectInfo, error) {
	if key != "" {
		files = []string{key}
	}
	if len(files) > 0 {
		out := make([]backends.ObjectInfo, 0, len(files))
		for _, f := range files {
			info, err := b.Stat(ctx, strings.TrimPrefix(f, "/"))
			if err != nil {
				return nil, err
			}
			if !info.IsDir {
				out = append(out, info)
			}
		}
		return out, nil
	}
	var out []backends.ObjectInfo
	opt := backends.ListOptions{Recursive: true}
	for {
		page, err := b.List(ctx, opt)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Objects {
			if !o.IsDir {
				out = append(out, o)
			}
		}
		if page.NextToken == "" {
			return out, nil
		}
		opt.Token = page.NextToken
	}
}

// store is a dataset's store reached outside a mount (a warm-up, a clear
// of the shared tier), through the shared tier its settings name.
type store struct {
	u       backends.URI
	b       backends.Backend // through the tier, if any
	key     string           // the object of a single-object URI, else ""
	tier    *sharedcache.Tier
	release func()
}

// storeFor opens the store of uri as an input mount with opts and creds
// would (creds empty: the node's own), for op.
func (n *Node) storeFor(ctx context.Context, op, uri string, opts map[string]string, creds Credentials) (store, error) {
	u, err := backends.ParseURI(uri)
	if err != nil {
		return store{}, err
	}
	set, err := n.opt.Settings.WithMountOptions(opts)
	if err != nil {
		return store{}, err
	}
	mreq := MountRequest{URI: uri, Target: op + " " + uri, ReadOnly: true, Options: opts, Credentials: creds}
	if u, set, err = n.checkNASRoots(op, mreq, u, set); err != nil {
		return store{}, err
	}
	raw, key, release, _, err := n.backendFor(ctx, u, set, mreq, true)
	if err != nil {
		return store{}, err
	}
	b, err := n.shared.through(ctx, raw, set)
	if err != nil {
		release()
		return store{}, err
	}
	return store{u: u, b: b, key: key, tier: n.shared.tier(set.Shared.URI), release: release}, nil
}
