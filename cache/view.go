package cache

import (
	"context"
	"sync/atomic"

	"github.com/mlfsd/mlfsd/backends"
)

// View is one mount's window on a shared Cache: it opens through the
// cache (one space budget, one eviction, one copy of each object for every
// view) and keeps that mount's own counters. Views of one Cache share
// data across backends instances as long as their IDs match: an object is
// identified by (backend ID, key, version), and a backend's ID names its
// store and root, not the client. Which client may be served that data is
// decided per principal (authz.go).
type View struct {
	c         *Cache
	principal string
	bytes     tierBytes
}

var _ Source = (*View)(nil)

// View returns a new view of the cache, with counters of its own, for the
// principal "" (the one Cache.Open reads as).
func (c *Cache) View() *View { return c.ViewAs("") }

// ViewAs returns a new view whose reads are made as principal: an opaque
// name of the credentials its backends use (the node daemon gives a
// fingerprint of them). Cached data is served to it only once the store
// authorized that principal for the object version (authz.go).
func (c *Cache) ViewAs(principal string) *View { return &View{c: c, principal: principal} }

// Open implements Source through the shared cache, counting to this view.
func (v *View) Open(ctx context.Context, b backends.Backend, info backends.ObjectInfo) (Handle, error) {
	return v.c.open(ctx, v, b, info)
}

// ViewStats are one view's counters.
type ViewStats struct {
	// BytesServed counts the bytes reads through the daemon were answered
	// with; MemoryHitBytes and DiskHitBytes are the parts of it found in
	// the memory and the disk tier (the rest waited for a fetch).
	BytesServed, MemoryHitBytes, DiskHitBytes int64
	// PassthroughBytes counts the sizes of the files this view handed to
	// the kernel for passthrough, at open (the kernel reads them without
	// us: this is what was handed over, not what was read).
	PassthroughBytes int64
	// BackendBytes counts the bytes fetched from backends on this view's
	// behalf (its reads' readahead, its opens' whole-file fetches and the
	// directory warming they set off). A block another view fetched first
	// counts there, not here.
	BackendBytes int64
}

// Stats returns the view's counters.
func (v *View) Stats() ViewStats {
	b := &v.bytes
	return ViewStats{
		BytesServed:      b.served.Load(),
		MemoryHitBytes:   b.memory.Load(),
		DiskHitBytes:     b.disk.Load(),
		PassthroughBytes: b.passthrough.Load(),
		BackendBytes:     b.backend.Load(),
	}
}

// tier is where the bytes of a read came from.
type tier int

const (
	tierMemory      tier = iota // the ready buffer, ristretto or the write queue
	tierDisk                    // the disk tier
	tierFetch                   // a backend fetch the read waited for
	tierPassthrough             // a file handed to the kernel
)

// tierBytes counts bytes by where they came from.
type tierBytes struct {
	served, memory, disk, passthrough, backend atomic.Int64
}

func (b *tierBytes) add(t tier, n int64) {
	switch t {
	case tierMemory:
		b.memory.Add(n)
		b.served.Add(n)
	case tierDisk:
		b.disk.Add(n)
		b.served.Add(n)
	case tierFetch:
		b.served.Add(n)
	case tierPassthrough:
		b.passthrough.Add(n)
	}
}

// account counts n bytes from tier t, cache-wide and to v (when not nil).
func (c *Cache) account(v *View, t tier, n int64) {
	c.stats.bytes.add(t, n)
	if v != nil {
		v.bytes.add(t, n)
	}
}
