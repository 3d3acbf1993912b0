// Package cache is the read path of mlfsd: a block cache with a memory tier
// (ristretto, bounded in bytes) over a disk tier (sparse files that survive a
// restart, bounded in bytes and by a free-space floor), a prefetcher that
// gives sequential streams a growing window of parallel ranged reads, and
// whole-file materialisation so that a file complete on disk is read by the
// kernel directly (FUSE passthrough).
//
// Data is keyed by (backend ID, key, version, block): a changed object has a
// new version and so new blocks; every backend read carries IfVersion, so a
// change under an open file fails the read instead of mixing bytes.
//
// Lock order: Cache.mu, then entry.mu, then the ready buffer's lock (and
// ristretto's own), then arena.mu; datasetIndex.mu, when held, comes
// before Cache.mu (datasets.go). entry.flushMu is taken with neither
// Cache.mu nor entry.mu held; Cache.warmMu and arena.mu are leaves (a
// block's last reference may be dropped under any of the others, and
// returns it to the arena). Block reference counts are atomic (arena.go).
// Pins (entry.pins) are what keep an entry's files from eviction: every
// open handle and every running fetch or flush holds one. Unpinned entries
// wait in Cache.lru, least recently used first; eviction takes the front,
// so it costs O(1) however many objects the disk tier holds.
package cache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/mlfsd/mlfsd/backends"
)

var (
	_ Source      = (*Cache)(nil)
	_ SliceReader = (*handle)(nil)
)

// writeQueueBytes bounds the blocks waiting for the disk tier. Past it,
// fetched blocks are served but not kept on disk (a later read or a
// background completion fetches them again). A fetch writes up to
// maxWriteRun of its blocks at once, so up to that many per request in
// flight wait here: with 32 MiB and runs of 4, a cold 512 MiB read skipped
// (and fetched again) 20-37 MB; with 64 MiB (an eighth of the default
// memory, at most an eighth of any) none.
const writeQueueBytes = 64 * MiB

// setWaitEvery bounds the ristretto Sets not yet applied.
const setWaitEvery = 16

// Cache is a read-through block cache over any number of backends. It
// implements Source. It is safe for concurrent use.
type Cache struct {
	opt   Options
	log   *slog.Logger
	arena *arena                             // every block buffer comes from here
	mem   *ristretto.Cache[string, blockRef] // each value holds a reference
	ready *readyBuf                          // fetched blocks not yet read; in front of mem
	sets  atomic.Int64                       // Sets offered to mem, for setWaitEvery
	total *requestSlots                      // backend requests in flight, cache-wide; demand first
	// streams counts open handles read as a sequential stream (window > 0):
	// their windows share the memory (handle.streamWindow).
	streams atomic.Int64
	// writeQueue bounds the bytes fetched but not yet written to disk.
	writeQueue *semaphore.Weighted

	ctx    context.Context // cancelled by Close: stops fetches
	cancel context.CancelFunc
	wg     sync.WaitGroup // fetches and background flushes

	stats counters
	// authFlight shares the HEAD that authorizes a principal for an
	// object among its handles asking at once (authz.go).
	authFlight singleflight.Group

	mu      sync.Mutex
	entries map[string]*entry   // GUARDED_BY(mu): by id
	byKey   map[string][]*entry // GUARDED_BY(mu): key prefix -> its versions (almost always one)
	lru     lruList             // GUARDED_BY(mu): the unpinned entries, least recently used first
	used    int64               // GUARDED_BY(mu): disk bytes held by entries
	free    int64               // GUARDED_BY(mu): free bytes at freeAt, minus reservations since
	freeAt  time.Time           // GUARDED_BY(mu)
	closed  bool                // GUARDED_BY(mu)
	// warmPending is the size of warming fetches under way. GUARDED_BY(mu)
	warmPending int64
	// keptOpen lists, oldest first, unpinned complete entries whose file
	// stays open for the next open (see release), nKept of them live: an
	// item whose entry was pinned again since (its keptSeq moved on) is
	// stale and skipped. GUARDED_BY(mu)
	keptOpen    []keptItem
	nKept       int
	keptSeq     uint64
	maxKeptOpen int // how many complete files may stay open unpinned

	warmSem  *semaphore.Weighted // warming fetches in flight
	warmMu   sync.Mutex
	dirOpens map[dirKey]int // GUARDED_BY(warmMu): small opens per directory; -1 once warmed

	lock  *os.File      // holds the exclusive lock on Dir; nil without a disk tier
	index *datasetIndex // which dataset each cached key belongs to (datasets.go)
	aio   *aioWriter    // the disk tier's O_DIRECT writes; nil: synchronous pwritev
	// unsynced: objects were written without fdatasync since the cache
	// opened (createWhole); Close syncs the filesystem before it removes
	// the marker.
	unsynced atomic.Bool
}

// New opens a cache. With Options.Dir set it indexes what an earlier run
// left there, so cached data is served again without fetching it.
func New(opt Options) (*Cache, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	// The memory budget: half holds fetched blocks until they are read,
	// the write queue holds blocks on their way to disk, and the rest is
	// the ristretto tier of blocks worth keeping. Half, so that one stream's
	// window reaches 128 MiB (16 requests of 8 MiB in flight, the ideal
	// reader's shape) with the default 512 MiB: with a quarter (64 MiB,
	// 8 requests) a cold 512 MiB read reached 0.54 of the ideal reader,
	// with half 0.78 (cachebench, busy machine).
	readyLimit := max(opt.MemoryBytes/2, 4*opt.BlockSize)
	// A sequential stream keeps up to a window fetched ahead: the window
	// may not outgrow half of what the ready buffer holds, or readahead
	// would push out its own blocks (or another stream's) before they are
	// read, and they would be fetched again.
	opt.MaxWindow = max(min(opt.MaxWindow, readyLimit/2), opt.MinWindow)
	opt.writeQueueBytes = min(opt.writeQueueBytes, max(opt.MemoryBytes/8, opt.BlockSize))
	mem, err := ristretto.NewCache(&ristretto.Config[string, blockRef]{
		NumCounters:        max(10*opt.MemoryBytes/opt.BlockSize, 1000),
		MaxCost:            max(opt.MemoryBytes-readyLimit-opt.writeQueueBytes, opt.BlockSize),
		BufferItems:        64,
		IgnoreInternalCost: true,
		// Evicted, rejected, replaced or cleared: the tier's reference
		// goes, and with the last one the block returns to the arena.
		OnExit: func(r blockRef) { r.unref() },
	})
	if err != nil {
		return nil, fmt.Errorf("cache memory tier: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The arena holds what the memory budget allows (ready buffer, write
	// queue and ristretto tier) plus one block per request in flight,
	// being filled.
	nblocks := (opt.MemoryBytes + opt.BlockSize - 1) / opt.BlockSize
	nblocks += int64(opt.TotalRequests)
	c := &Cache{
		opt:         opt,
		log:         opt.Log,
		arena:       newArena(int(nblocks), opt.BlockSize, true),
		mem:         mem,
		ready:       newReadyBuf(readyLimit),
		total:       newRequestSlots(opt.TotalRequests),
		writeQueue:  semaphore.NewWeighted(opt.writeQueueBytes),
		warmSem:     semaphore.NewWeighted(int64(opt.WarmRequests)),
		dirOpens:    map[dirKey]int{},
		ctx:         ctx,
		cancel:      cancel,
		entries:     map[string]*entry{},
		byKey:       map[string][]*entry{},
		maxKeptOpen: keptOpenLimit(),
	}
	c.index = newDatasetIndex(opt.Dir, opt.Log, cmp.Or(opt.indexCompactAfter, indexCompactAfter))
	if opt.Dir != "" {
		lock, err := lockDir(opt.Dir)
		if err != nil {
			cancel()
			mem.Close()
			return nil, err
		}
		c.lock = lock
		dropWhole := c.unsyncedMarkerStale()
		if dropWhole {
			c.log.Warn("cache: the disk tier was not closed before a reboot; dropping objects of one block, which may be torn", "dir", opt.Dir)
		}
		found, err := c.scanDir(dropWhole)
		if err == nil {
			err = c.markUnsynced()
		}
		if err != nil {
			lock.Close()
			cancel()
			mem.Close()
			return nil, err
		}
		// The eviction order across a restart: by mtime, oldest first.
		slices.SortStableFunc(found, func(a, b scanned) int { return a.atime.Compare(b.atime) })
		labels, err := readDatasetIndex(opt.Dir)
		if err != nil {
			c.log.Warn("cache: reading which dataset cached objects belong to", "dir", opt.Dir, "err", err)
		}
		c.mu.Lock()
		for _, s := range found {
			e := c.newEntry(s.id, s.size)
			e.dataset = labels[keyPrefix(s.id)]
			e.complete = s.complete
			if !s.complete {
				e.present = s.present
				e.npresent = s.present.count()
				e.metaWritten = true
			}
			e.diskBytes = s.diskBytes
			e.atime = s.atime
			c.addLocked(e)
			c.used += s.diskBytes
		}
		c.makeRoomLocked(0) // the bounds may have shrunk since the last run
		keys := map[string][]string{}
		for _, e := range c.entries {
			keys[e.dataset] = append(keys[e.dataset], keyPrefix(e.id))
		}
		c.mu.Unlock()
		if err := c.index.rewrite(keys); err != nil {
			c.log.Warn("cache: rewriting which dataset cached objects belong to", "dir", opt.Dir, "err", err)
		}
		for i := range 256 {
			if err := os.MkdirAll(c.dirOf(fmt.Sprintf("%02x", i)), 0o700); err != nil {
				c.Close()
				return nil, fmt.Errorf("cache dir: %w", err)
			}
		}
		if a, err := newAIOWriter(); err == nil {
			c.aio = a
		} else {
			c.log.Info("cache: no AIO context; disk writes are synchronous", "err", err)
		}
		c.log.Info("cache: disk tier opened", "dir", opt.Dir, "objects", len(found), "bytes", c.used)
	}
	return c, nil
}

// Stats is a snapshot of the cache's counters.
type Stats struct {
	// BackendRequests and BackendBytes count ranged reads sent to backends.
	BackendRequests, BackendBytes int64
	// Reads counts ReadAt calls (reads that entered the daemon), and
	// RandomReads those that were not part of a sequential stream.
	Reads, RandomReads int64
	// MemoryHits, DiskHits and FetchWaits count blocks served from each
	// tier, or by waiting for a fetch in flight.
	MemoryHits, DiskHits, FetchWaits int64
	// BytesServed counts the bytes reads through the daemon were answered
	// with, from any tier or a fetch; MemoryHitBytes and DiskHitBytes are
	// the parts of it found in the memory and the disk tier.
	BytesServed, MemoryHitBytes, DiskHitBytes int64
	// PassthroughBytes counts the sizes of the files handed to the kernel
	// for passthrough, at open: the kernel reads those without us, so this
	// is what was handed over, not what was read.
	PassthroughBytes int64
	// PassthroughOpens counts opens that offered a passthrough fd.
	PassthroughOpens int64
	// Evictions counts objects removed from the disk tier.
	Evictions int64
	// WarmedFiles counts small objects fetched ahead by directory warming.
	WarmedFiles int64
	// DiskBytes is what the disk tier holds now, MemoryBytes what the
	// memory tier holds now (blocks waiting to be read and blocks kept).
	DiskBytes, MemoryBytes int64
	// HeapBlocks counts block buffers taken from the heap because every
	// block of the arena was in use (each costs fresh pages).
	HeapBlocks int64
	// AuthRequests counts the Stat requests made to authorize a view's
	// principal for an object it had not fetched itself (authz.go), and
	// AuthDenied those refused (or finding the object changed).
	AuthRequests, AuthDenied int64
	// ArenaBytes is the part of the block arena ever used, whose pages
	// the process holds from then on: it grows from 0 as reads first
	// need blocks, up to MemoryBytes plus a block per request in flight.
	ArenaBytes int64
}

type counters struct {
	backendRequests, backendBytes    atomic.Int64
	reads, randomReads               atomic.Int64
	memoryHits, diskHits, fetchWaits atomic.Int64
	passthroughOpens, evictions      atomic.Int64
	warmedFiles                      atomic.Int64
	authRequests, authDenied         atomic.Int64
	writtenFromMemory                atomic.Int64 // blocks completeLater wrote from memory (tests)
	bytes                            tierBytes
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	used := c.used
	c.mu.Unlock()
	s := &c.stats
	return Stats{
		BackendRequests:  s.backendRequests.Load(),
		BackendBytes:     s.backendBytes.Load(),
		Reads:            s.reads.Load(),
		RandomReads:      s.randomReads.Load(),
		MemoryHits:       s.memoryHits.Load(),
		DiskHits:         s.diskHits.Load(),
		FetchWaits:       s.fetchWaits.Load(),
		BytesServed:      s.bytes.served.Load(),
		MemoryHitBytes:   s.bytes.memory.Load(),
		DiskHitBytes:     s.bytes.disk.Load(),
		PassthroughBytes: s.bytes.passthrough.Load(),
		PassthroughOpens: s.passthroughOpens.Load(),
		Evictions:        s.evictions.Load(),
		WarmedFiles:      s.warmedFiles.Load(),
		DiskBytes:        used,
		MemoryBytes:      c.memoryBytes(),
		HeapBlocks:       c.arena.heap.Load(),
		AuthRequests:     s.authRequests.Load(),
		AuthDenied:       s.authDenied.Load(),
		ArenaBytes:       int64(c.arena.used()) * c.opt.BlockSize,
	}
}

// memoryBytes is what the memory tier holds: the ready buffer and the
// ristretto tier's admitted cost (its bound less what remains).
func (c *Cache) memoryBytes() int64 {
	return c.ready.size() + c.mem.MaxCost() - c.mem.RemainingCost()
}

// Open implements Source: it pins the object's cache entry for the life
// of the handle and, for a small object, starts fetching it whole. Its
// reads are counted in the cache's Stats only; a mount that wants its own
// counters opens through a View.
func (c *Cache) Open(ctx context.Context, b backends.Backend, info backends.ObjectInfo) (Handle, error) {
	return c.open(ctx, nil, b, info)
}

func (c *Cache) open(ctx context.Context, v *View, b backends.Backend, info backends.ObjectInfo) (Handle, error) {
	if info.IsDir {
		return nil, backends.Wrap("open", info.Key, backends.ErrIsDir, nil)
	}
	if info.Size == 0 {
		return emptyHandle{}, nil
	}
	src := source{b: b, key: info.Key, version: info.Version, view: v}
	e, err := c.pin(objectID(b.ID(), info.Key, info.Version), info.Size, b.ID())
	if err != nil {
		return nil, err
	}
	h := &handle{c: c, e: e, src: src, ptFd: -1}
	e.readers.Add(1)
	e.mu.Lock()
	complete := e.complete
	passthrough := complete && e.file != nil && !c.opt.NoPassthrough
	e.mu.Unlock()
	if passthrough {
		// The kernel will read the file without us: the principal must
		// be authorized for it now (authz.go).
		if err := h.authorize(ctx); err != nil {
			e.readers.Add(-1)
			c.release(e)
			return nil, err
		}
		e.mu.Lock()
		if e.file != nil {
			// The kernel reads this fd directly: the complete file, which
			// nothing writes and which stays open while we hold our pin.
			h.ptFd = int(e.file.Fd())
		}
		e.mu.Unlock()
	}
	if info.Size <= c.opt.SmallFileBytes && !complete {
		// Small objects: one whole-object request, started now, so that
		// small files opened by parallel readers load in parallel; and
		// a directory whose files keep missing the cache is warmed.
		// Blocks memory holds (fetched ahead by directory warming, or
		// by an earlier open, and not on disk: the write queue was full)
		// are read from there, not fetched again.
		e.ensure(src, 0, e.nblocks-1, e.nblocks, true)
		c.noteSmallOpen(src)
	}
	return h, nil
}

// Close stops fetches, records what is on disk, and releases the memory
// tier. Handles still open keep working only from the disk tier.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	var errs []error
	c.mu.Lock()
	var pinned []*entry
	for _, e := range c.entries {
		if e.pins > 0 {
			pinned = append(pinned, e)
		}
	}
	c.mu.Unlock()
	for _, e := range pinned {
		if err := e.flush(); err != nil {
			errs = append(errs, err)
		}
	}
	c.mu.Lock()
	var kept []*os.File
	for _, it := range c.keptOpen {
		if f := c.closeKeptLocked(it.e); f != nil {
			kept = append(kept, f)
		}
	}
	c.keptOpen = nil
	c.mu.Unlock()
	for _, f := range kept {
		f.Close()
	}
	c.mem.Close()
	c.ready.clear()
	if c.aio != nil {
		c.aio.close()
	}
	c.index.close()
	if c.lock != nil {
		if err := c.clearUnsynced(); err != nil {
			errs = append(errs, err)
		}
		c.lock.Close()
	}
	st := c.Stats()
	c.log.Info("cache: closed", "backend_requests", st.BackendRequests, "backend_bytes", st.BackendBytes,
		"daemon_reads", st.Reads, "random_reads", st.RandomReads, "memory_hits", st.MemoryHits, "disk_hits", st.DiskHits,
		"memory_hit_bytes", st.MemoryHitBytes, "disk_hit_bytes", st.DiskHitBytes,
		"passthrough_opens", st.PassthroughOpens, "passthrough_bytes", st.PassthroughBytes, "evictions", st.Evictions, "warmed_files", st.WarmedFiles, "disk_bytes", st.DiskBytes,
		"heap_blocks", st.HeapBlocks)
	return errors.Join(errs...)
}

// quiesce waits for the fetches and flushes running now (tests use it to see
// a file complete on disk). No new ones may start meanwhile.
func (c *Cache) quiesce() { c.wg.Wait() }

// keepInMemory holds a block just fetched until it is read; blocks pushed
// out of the ready buffer get a chance in the ristretto tier. The caller's
// reference passes to the memory tier.
func (c *Cache) keepInMemory(key string, r blockRef) {
	for _, it := range c.ready.put(key, r) {
		c.memSet(it.key, it.r)
	}
}

// memSet offers a block to the ristretto tier, with the caller's
// reference. Its Sets are applied by one goroutine through a buffer of 32k
// items; on a starved CPU that buffer could hold far more than the tier's
// bound, so every setWaitEvery Sets we wait for it to drain.
func (c *Cache) memSet(key string, r blockRef) {
	if !c.mem.Set(key, r, r.cost()) {
		r.unref() // dropped, not queued: ristretto will not call OnExit
	}
	if c.sets.Add(1)%setWaitEvery == 0 {
		c.mem.Wait()
	}
}

// memGet finds a block in the memory tier (ready buffer or ristretto) and
// returns it with a reference for the caller.
func (c *Cache) memGet(key string) (blockRef, bool) {
	if r, ok := c.ready.get(key); ok {
		return r, true
	}
	if r, ok := c.mem.Get(key); ok && r.tryRef() {
		return r, true
	}
	return blockRef{}, false
}

// memHas reports whether the memory tier holds a block.
func (c *Cache) memHas(key string) bool {
	if c.ready.has(key) {
		return true
	}
	_, ok := c.mem.Get(key)
	return ok
}

func (c *Cache) blockKey(id string, block int64) string {
	return id + "/" + strconv.FormatInt(block, 10)
}

// addLocked indexes a new, unpinned entry as the most recently used.
func (c *Cache) addLocked(e *entry) {
	c.entries[e.id] = e
	kp := keyPrefix(e.id)
	c.byKey[kp] = append(c.byKey[kp], e)
	c.lru.pushBack(e)
}

// removeLocked forgets an unpinned entry and deletes its files.
func (c *Cache) removeLocked(e *entry) {
	delete(c.entries, e.id)
	kp := keyPrefix(e.id)
	vs := slices.DeleteFunc(c.byKey[kp], func(o *entry) bool { return o == e })
	if len(vs) == 0 {
		delete(c.byKey, kp)
	} else {
		c.byKey[kp] = vs
	}
	c.lru.remove(e)
	c.used -= e.diskBytes
	if f := c.closeKeptLocked(e); f != nil {
		f.Close()
	}
	if c.opt.Dir != "" {
		os.Remove(c.completePath(e.id))
		os.Remove(c.partPath(e.id))
		os.Remove(c.metaPath(e.id))
		// The space came back; the next statfs (at most 250ms away)
		// corrects the estimate. Not measured now: an eviction of many
		// small objects would pay a statfs per victim.
		c.free += e.diskBytes
	}
	e.diskBytes = 0
}

// pinLocked adds a pin, taking an unpinned entry out of the eviction order.
func (c *Cache) pinLocked(e *entry) {
	if e.pins == 0 {
		c.lru.remove(e)
	}
	e.pins++
}

// pin finds or creates the entry for id and pins it, opening its disk file
// on the first pin. Unpinned entries for other versions of the same key are
// dropped: nothing will read them again.
func (c *Cache) pin(id string, size int64, dataset string) (*entry, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed
	}
	e := c.entries[id]
	if e != nil && e.size != size {
		if e.pins > 0 {
			c.mu.Unlock()
			return nil, backends.Wrap("open", id, backends.ErrVersionMismatch,
				fmt.Errorf("cached size %d, listed size %d", e.size, size))
		}
		c.removeLocked(e)
		e = nil
	}
	label := false // a key not in the dataset index yet
	if e == nil {
		e = c.newEntry(id, size)
		label = len(c.byKey[keyPrefix(id)]) == 0
		c.addLocked(e)
	}
	if e.dataset == "" && dataset != "" {
		e.dataset = dataset
		label = true
	}
	for _, o := range slices.Clone(c.byKey[keyPrefix(id)]) {
		if o == e {
			continue
		}
		if o.pins == 0 {
			c.removeLocked(o)
		} else {
			o.superseded = true // removed when its last pin goes
		}
	}
	c.pinLocked(e)
	e.atime = time.Now()
	openFiles := false
	if e.pins == 1 {
		e.opened = make(chan struct{})
		openFiles = c.opt.Dir != "" && !e.kept
		if e.kept {
			// Its file was kept open (release): use it. Its item in
			// keptOpen goes stale.
			e.kept = false
			e.keptSeq = 0
			c.nKept--
		}
		if !openFiles {
			close(e.opened)
		}
	}
	opened := e.opened
	c.mu.Unlock()
	if label && c.index.add(dataset, keyPrefix(id)) {
		c.mu.Lock()
		closed := c.closed
		if !closed {
			c.wg.Add(1)
		}
		c.mu.Unlock()
		if !closed {
			go func() {
				defer c.wg.Done()
				c.compactIndex()
			}()
		}
	}
	// Files are opened outside c.mu (an open can take a millisecond on a
	// busy disk, and every open of every file would queue behind it);
	// later pinners wait for the first one's open.
	if openFiles {
		c.openFile(e)
		close(opened)
	} else {
		<-opened
	}
	return e, nil
}

// openFile opens the entry's disk file: read-only when complete, else the
// sparse .part (created if new). On failure the entry runs without a disk
// file (memory and backend only). The caller holds the first pin.
func (c *Cache) openFile(e *entry) {
	e.mu.Lock()
	complete := e.complete
	e.mu.Unlock()
	if complete {
		f, err := os.Open(c.completePath(e.id))
		if err == nil {
			e.mu.Lock()
			e.file = f
			e.mu.Unlock()
			return
		}
		// Deleted behind our back: start over.
		c.log.Warn("cache: complete file vanished", "id", e.id, "err", err)
		c.mu.Lock()
		c.used -= e.diskBytes
		e.diskBytes = 0
		c.mu.Unlock()
		e.mu.Lock()
		e.complete = false
		e.present = newBitmap(e.nblocks)
		e.npresent = 0
		e.mu.Unlock()
	}
	e.mu.Lock()
	if e.nblocks == 1 && e.npresent == 0 && !e.metaWritten {
		// One block: written whole when it arrives (writeWhole), so no
		// .part is created now.
		e.whole = true
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	path := c.partPath(e.id)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, os.ErrNotExist) { // someone removed our directories
		if err = os.MkdirAll(c.dirOf(e.id), 0o700); err == nil {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		}
	}
	if err == nil && e.nblocks > 1 {
		// Sparse at its full size, so blocks land at their offsets. (A
		// one-block object is written whole in one go: no need.)
		err = f.Truncate(e.size)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		c.log.Warn("cache: disk tier unavailable", "id", e.id, "err", err)
		return
	}
	// Whole blocks of large objects are written with O_DIRECT where the
	// filesystem allows it: a buffered write costs a page-cache copy per
	// byte, CPU that the reader we are serving needs (measured: ~1.5 s per
	// GiB on a busy 2-core VM, against almost none for direct I/O). Small
	// objects do not pay for the second open.
	var direct *os.File
	if e.size > c.opt.SmallFileBytes {
		if d, err := os.OpenFile(path, os.O_WRONLY|syscall.O_DIRECT, 0); err == nil {
			direct = d
		}
	}
	e.mu.Lock()
	e.file, e.direct = f, direct
	e.mu.Unlock()
}

// release drops one pin. The last pin flushes the presence bitmap first,
// closes the disk file, and forgets an entry that holds nothing on disk.
func (c *Cache) release(e *entry) {
	c.mu.Lock()
	for e.pins == 1 && e.dirtyBlocks() > 0 {
		c.mu.Unlock()
		err := e.flush()
		c.mu.Lock()
		if err != nil {
			c.log.Warn("cache: recording cached blocks", "id", e.id, "err", err)
			break
		}
	}
	e.pins--
	if e.pins > 0 {
		c.mu.Unlock()
		return
	}
	e.atime = time.Now()
	if c.entries[e.id] == e {
		c.lru.pushBack(e)
	}
	e.opened = nil
	e.mu.Lock()
	keep := e.complete && e.file != nil && !e.superseded && c.entries[e.id] == e && c.maxKeptOpen > 0 && !c.closed
	files := []*os.File{e.direct}
	if !keep {
		files = append(files, e.file)
		e.file = nil
	}
	e.direct, e.whole = nil, false
	empty := !e.complete && e.npresent == 0
	e.mu.Unlock()
	if keep {
		// The next open of a complete file (an epoch over small files
		// opens each again) skips opening it: the file stays open,
		// among the maxKeptOpen most recently released.
		c.keptSeq++
		e.kept, e.keptSeq = true, c.keptSeq
		c.nKept++
		c.keptOpen = append(c.keptOpen, keptItem{e, c.keptSeq})
		for c.nKept > c.maxKeptOpen {
			it := c.keptOpen[0]
			c.keptOpen = c.keptOpen[1:]
			if it.e.keptSeq == it.seq {
				if f := c.closeKeptLocked(it.e); f != nil {
					files = append(files, f)
				}
			}
		}
		if len(c.keptOpen) > 2*c.maxKeptOpen+64 {
			// Mostly stale (files opened and released again and
			// again): keep the live items only.
			c.keptOpen = slices.DeleteFunc(c.keptOpen, func(it keptItem) bool { return !it.e.kept || it.e.keptSeq != it.seq })
		}
	}
	if (e.superseded || empty && e.diskBytes == 0) && c.entries[e.id] == e {
		c.removeLocked(e)
	}
	c.mu.Unlock()
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// keptItem is one release of an entry whose file was kept open.
type keptItem struct {
	e   *entry
	seq uint64 // the entry's keptSeq then
}

// closeKeptLocked takes the file of an entry kept open unpinned, for the
// caller to close; nil when e holds none (pinned again, or closed).
func (c *Cache) closeKeptLocked(e *entry) *os.File {
	if !e.kept || e.pins > 0 {
		return nil
	}
	e.kept = false
	c.nKept--
	e.mu.Lock()
	f := e.file
	e.file = nil
	e.mu.Unlock()
	return f
}

// keptOpenLimit is how many complete files stay open unpinned: 4,096, or
// an eighth of the open-file limit if that is lower.
func keptOpenLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return int(min(4096, r.Cur/8))
}

// reserve accounts n more disk bytes to e, evicting unpinned entries to make
// room when mayEvict. It reports false when the bounds leave no room: the
// block is then served without being kept on disk.
func (c *Cache) reserve(e *entry, n int64, mayEvict bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if mayEvict && !c.makeRoomLocked(n) || !mayEvict && !c.fitsLocked(n) {
		return false
	}
	c.used += n
	c.free -= n
	e.diskBytes += n
	return true
}

// unreserve gives back a reservation whose write failed.
func (c *Cache) unreserve(e *entry, n int64) {
	c.mu.Lock()
	c.used -= n
	c.free += n
	e.diskBytes -= n
	c.mu.Unlock()
}

// makeRoomLocked evicts least recently used unpinned entries until n more
// bytes fit under both the disk bound and the free-space floor.
func (c *Cache) makeRoomLocked(n int64) bool {
	if c.opt.Dir == "" {
		return false
	}
	for !c.fitsLocked(n) {
		victim := c.lru.front()
		if victim == nil {
			return false
		}
		c.log.Debug("cache: evicting", "id", victim.id, "bytes", victim.diskBytes)
		c.removeLocked(victim)
		c.stats.evictions.Add(1)
	}
	return true
}

func (c *Cache) fitsLocked(n int64) bool {
	if c.opt.DiskBytes > 0 && c.used+n > c.opt.DiskBytes {
		return false
	}
	// statfs at most every 250ms; reservations since are subtracted.
	if time.Since(c.freeAt) > 250*time.Millisecond {
		free, err := freeBytes(c.opt.Dir)
		if err != nil {
			c.log.Warn("cache: statfs", "dir", c.opt.Dir, "err", err)
			return false
		}
		c.free, c.freeAt = free, time.Now()
	}
	return c.free-n >= c.opt.FreeFloorBytes
}
