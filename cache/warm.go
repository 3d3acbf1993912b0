package cache

import (
	"path"

	"github.com/mlfsd/mlfsd/backends"
)

// Directory warming: datasets of many small files are read a whole
// directory per epoch, in shuffled order, so the next file cannot be
// predicted but the set can. Once WarmAfter small files of one directory
// have been opened that the cache did not hold, the rest of that directory's small files are fetched
// whole, WarmRequests at a time, into the disk tier, as long as they fit
// without evicting anything.

// maxTrackedDirs bounds the per-directory open counters; past it they are
// reset (a directory seen again simply counts anew).
const maxTrackedDirs = 100_000

// maxWarmFiles bounds the files one directory warm fetches.
const maxWarmFiles = 100_000

type dirKey struct {
	backend string
	dir     string // prefix, "" or ending in '/'
}

// noteSmallOpen counts an open of a small object the cache did not hold,
// and starts warming its directory when the count reaches WarmAfter.
func (c *Cache) noteSmallOpen(src source) {
	if c.opt.WarmAfter <= 0 || c.opt.Dir == "" {
		return
	}
	b := src.b
	dir := path.Dir(src.key)
	if dir == "." {
		dir = ""
	} else {
		dir += "/"
	}
	k := dirKey{b.ID(), dir}
	c.warmMu.Lock()
	if len(c.dirOpens) >= maxTrackedDirs {
		c.dirOpens = map[dirKey]int{}
	}
	n := c.dirOpens[k]
	if n < 0 {
		// Warmed (or warming) already: never again. (Warming again on
		// every later open listed the directory and queued a pass over
		// all its files per open: 151 passes in flight, 0.7x the epoch
		// without warming.)
		c.warmMu.Unlock()
		return
	}
	n++
	start := n >= c.opt.WarmAfter
	if start {
		n = -1
	}
	c.dirOpens[k] = n
	c.warmMu.Unlock()
	if !start {
		return
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.wg.Add(1)
	}
	c.mu.Unlock()
	if closed {
		return
	}
	go func() {
		defer c.wg.Done()
		if err := c.warmDir(b, src.view, dir); err != nil && c.ctx.Err() == nil {
			c.log.Warn("cache: warming directory", "dir", dir, "err", err)
		}
	}()
}

// warmDir lists dir and fetches its small objects whole, in parallel; what
// it fetches counts to the view whose opens set it off.
func (c *Cache) warmDir(b backends.Backend, v *View, dir string) error {
	opt := backends.ListOptions{Prefix: dir}
	files := 0
	for {
		page, err := b.List(c.ctx, opt)
		if err != nil {
			return err
		}
		for _, o := range page.Objects {
			if o.IsDir || o.Size == 0 || o.Size > c.opt.SmallFileBytes {
				continue
			}
			if err := c.warmSem.Acquire(c.ctx, 1); err != nil {
				return nil // closing
			}
			if files >= maxWarmFiles || !c.reserveWarm(o.Size) {
				c.warmSem.Release(1)
				return nil
			}
			files++
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer c.warmSem.Release(1)
				c.warmOne(b, v, o)
				c.mu.Lock()
				c.warmPending -= o.Size
				c.mu.Unlock()
			}()
		}
		if page.NextToken == "" {
			return nil
		}
		opt.Token = page.NextToken
	}
}

// warmOne fetches one object whole unless it is cached or being fetched.
func (c *Cache) warmOne(b backends.Backend, v *View, o backends.ObjectInfo) {
	id := objectID(b.ID(), o.Key, o.Version)
	c.mu.Lock()
	known := c.entries[id]
	busy := known != nil && known.pins > 0 // being read or fetched already
	if known != nil && !busy {
		known.mu.Lock()
		busy = known.complete
		known.mu.Unlock()
	}
	c.mu.Unlock()
	if busy {
		return
	}
	e, err := c.pin(id, o.Size, b.ID())
	if err != nil {
		return
	}
	defer c.release(e)
	// A request slot, taken behind every reader's own fetch, before the
	// file is marked in flight (see source.slotHeld), and after the pin
	// created its disk file (which costs more than a millisecond on a
	// busy disk: not time to hold a slot for).
	if err := c.total.acquire(c.ctx, true); err != nil {
		return // closing
	}
	// Blocks still in memory (a reader fetched them and the disk tier
	// skipped them) are not fetched again.
	fs := e.ensure(source{b: b, key: o.Key, version: o.Version, view: v, warm: true, slotHeld: true}, 0, e.nblocks-1, e.nblocks, true)
	for _, f := range fs {
		select {
		case <-f.done:
		case <-c.ctx.Done():
			return
		}
	}
	if len(fs) > 0 {
		c.stats.warmedFiles.Add(1)
	}
}

// reserveWarm counts n bytes about to be warmed if they fit in the disk
// tier, with the warming already under way, without evicting anything:
// warming never pushes out data already cached.
func (c *Cache) reserveWarm(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fitsLocked(c.warmPending + n) {
		return false
	}
	c.warmPending += n
	return true
}

// completeLater fetches, in the background, the blocks of e the disk tier
// is missing (skipped while the disk was busy, or never read), so that the
// next open gets the complete file and FUSE passthrough, if that fits without
// evicting anything. The caller holds a pin, which completeLater takes over.
func (c *Cache) completeLater(e *entry, src source) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.release(e)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer c.release(e)
		e.mu.Lock()
		missing := (e.nblocks - e.npresent - int64(len(e.writing))) * c.opt.BlockSize
		e.mu.Unlock()
		if !c.reserveWarm(missing) {
			return // it would evict other data: not worth it
		}
		defer func() {
			c.mu.Lock()
			c.warmPending -= missing
			c.mu.Unlock()
		}()
		src.background, src.warm = true, true
		c.writeFromMemory(e)
		fs := e.ensure(src, 0, e.nblocks-1, c.opt.MaxRequestBytes/c.opt.BlockSize, false)
		for _, f := range fs {
			select {
			case <-f.done:
			case <-c.ctx.Done():
				return
			}
		}
	}()
}

// writeFromMemory writes to the disk tier the blocks of e it is missing
// that the memory tier still holds (skipped while the write queue was
// full), so that completing the file fetches only what memory lost: a cold
// read of 512 MiB on a busy disk fetched 783 MB before this. The caller
// holds a pin.
func (c *Cache) writeFromMemory(e *entry) {
	for bi := int64(0); bi < e.nblocks; bi++ {
		e.mu.Lock()
		_, writing := e.writing[bi]
		noDisk := e.file == nil && !e.whole
		complete := e.complete
		skip := complete || noDisk || e.present.has(bi) || writing || e.inflight[bi] != nil
		e.mu.Unlock()
		if skip {
			if complete || noDisk {
				return
			}
			continue
		}
		r, ok := c.memGet(c.blockKey(e.id, bi))
		if !ok {
			continue
		}
		n := r.cost()
		if int64(len(r.data())) != e.blockLen(bi) || c.writeQueue.Acquire(c.ctx, n) != nil {
			r.unref()
			continue
		}
		e.mu.Lock()
		_, writing = e.writing[bi]
		ok = !e.complete && (e.file != nil || e.whole) && !e.present.has(bi) && !writing
		if ok {
			e.writing[bi] = r // our reference passes to the write queue
		}
		e.mu.Unlock()
		if !ok {
			r.unref()
			c.writeQueue.Release(n)
			continue
		}
		c.stats.writtenFromMemory.Add(1)
		e.writeBlock(bi, r, false)
		c.writeQueue.Release(n)
	}
}
