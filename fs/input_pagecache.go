package fs

import (
	"sync"
	"sync/atomic"
	"syscall"
)

// A large file read through the daemon (cached mode, FOPEN_KEEP_CACHE) is
// held in the page cache of the mount's inode, while its copy in the disk
// cache, written with O_DIRECT, is not in the page cache at all. Opened
// again by passthrough, the kernel reads the cache file from the disk: the
// page cache of the mount's inode is not used in passthrough mode. That
// made bench/compare's warm seq1 (4 x 64 MiB read again right after the
// cold read, in the same mount) 0.27 of local disk: fincore showed 0 of
// the cache files' 268 MB resident after the cold read, and the first
// warm read ran at the disk's speed, the second at the page cache's. So
// a reopen of a file the kernel still holds stays in cached mode (no READ
// reaches the daemon: TestWarmReopenInSameMount), and a file the kernel
// dropped (memory pressure, a new mount) is opened by passthrough.

// pageCacheSamples is how many pages of a file are looked up in the
// kernel's page cache of the mount before a reopen keeps cached mode:
// the first and the last page (the kernel evicts the oldest pages first,
// the start of a file read sequentially) and evenly spaced ones between.
// Each costs two notify round trips (FUSE_NOTIFY_RETRIEVE: go-fuse's
// ReadCache asks once more for what is past a full buffer), so a reopen of
// a file the kernel holds costs 16; a file it does not hold costs one.
const pageCacheSamples = 8

// samplePage is the size of one sample: a page.
const samplePage = 4096

// stayCached reports whether an open that could be passthrough should stay
// in cached mode because the kernel's page cache of this file in this mount
// holds it (all of pageCacheSamples sampled pages). It answers false
// without asking the kernel where the answer changes nothing: a small file
// (its own rule: inKernel), a handle h that offers no passthrough, a file
// with an open served by the daemon (no passthrough then anyway) or by
// passthrough (the kernel refuses a cached-mode open then).
func (f *inFile) stayCached(h Handle) bool {
	size := f.info.Size
	if size <= inKernelMax {
		return false
	}
	if o, ok := h.(interface{ OffersPassthrough() bool }); ok && !o.OffersPassthrough() {
		return false // not complete in the cache, or --no-passthrough
	}
	f.mu.Lock()
	busy := f.ptOpens > 0 || f.daemonOpens > 0
	f.mu.Unlock()
	if busy {
		return false
	}
	last := (size - 1) &^ (samplePage - 1)
	offs := make([]int64, 0, pageCacheSamples)
	offs = append(offs, 0, last)
	for i := int64(1); i < pageCacheSamples-1; i++ {
		offs = append(offs, (last*i/(pageCacheSamples-1))&^(samplePage-1))
	}
	// The lookups are asked at once: each is two round trips through
	// the kernel, and one after the other they made the open of a held
	// file cost 0.7-2 ms (a sixth of a warm 1 MiB-read pass over 4 x 64
	// MiB shards on a busy 2-core machine); go-fuse matches each answer to
	// its request by a unique id, so they may overlap.
	var held atomic.Int32
	var wg sync.WaitGroup
	for _, off := range offs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf [samplePage]byte
			n, errno := f.ReadCache(off, buf[:min(samplePage, size-off)])
			if errno != 0 && errno != syscall.ENOENT {
				f.fsys.log.Debug("page cache lookup failed", "key", f.info.Key, "off", off, "err", errno)
			}
			if errno == 0 && n > 0 {
				held.Add(1)
			}
		}()
	}
	wg.Wait()
	return held.Load() == int32(len(offs))
}
