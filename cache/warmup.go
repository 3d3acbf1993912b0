package cache

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/mlfsd/mlfsd/backends"
)

// Warm-up (`mlfsd cache warm`): objects fetched whole into the disk tier
// before anyone reads them, so that a job's first epoch reads at the
// speed of the later ones. Unlike directory warming (warm.go) it is asked
// for: it may evict least recently used data for room, as a read would.
// It is resumable: an object already complete on disk costs no request,
// and of one partly cached only the missing blocks are fetched.

// WarmOutcome is what Warm did with one object.
type WarmOutcome struct {
	Object backends.ObjectInfo
	// Cached: the object was complete on disk already; nothing was asked
	// of the store.
	Cached bool
	// Fetched counts the bytes fetched for it (its blocks missing from
	// the cache).
	Fetched int64
	Err     error
}

// Warm fetches objs of b whole into the cache, parallel at a time (at
// least 1), counting to view v (nil: the cache's own) and made as its
// principal, so its later reads need no authorizing request. done (if not
// nil) is called once per object, from several goroutines. Warm returns
// when every object is done or ctx is cancelled (ctx.Err() then); an
// object that fails is reported to done and does not stop the others.
// Fetches run as a reader's would, through b: a backend read through a
// shared tier (sharedcache) fills the tier too.
func (c *Cache) Warm(ctx context.Context, v *View, b backends.Backend, objs []backends.ObjectInfo, parallel int, done func(WarmOutcome)) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for _, o := range objs {
		if gctx.Err() != nil {
			break
		}
		if o.IsDir {
			continue
		}
		g.Go(func() error {
			out := c.warmObject(gctx, v, b, o)
			if gctx.Err() == nil && done != nil {
				done(out)
			}
			return nil
		})
	}
	g.Wait()
	return ctx.Err()
}

// warmObject fetches what the disk tier lacks of o and waits for it.
func (c *Cache) warmObject(ctx context.Context, v *View, b backends.Backend, o backends.ObjectInfo) WarmOutcome {
	out := WarmOutcome{Object: o}
	if o.Size == 0 {
		out.Cached = true
		return out
	}
	id := objectID(b.ID(), o.Key, o.Version)
	c.mu.Lock()
	known := c.entries[id]
	complete := false
	if known != nil && known.size == o.Size {
		known.mu.Lock()
		complete = known.complete
		known.mu.Unlock()
	}
	c.mu.Unlock()
	if complete {
		out.Cached = true
		return out
	}
	e, err := c.pin(id, o.Size, b.ID())
	if err != nil {
		out.Err = err
		return out
	}
	defer c.release(e)
	// Blocks memory holds go to disk from there; background: blocks wait
	// for room in the disk write queue rather than skip the disk, and
	// stay out of memory (diskOnly).
	c.writeFromMemory(e)
	src := source{b: b, key: o.Key, version: o.Version, view: v, background: true, diskOnly: true}
	fs := e.ensure(src, 0, e.nblocks-1, c.opt.MaxRequestBytes/c.opt.BlockSize, false)
	for _, f := range fs {
		select {
		case <-f.done:
			if f.err != nil && out.Err == nil {
				out.Err = f.err
			}
		case <-ctx.Done():
			out.Err = ctx.Err()
			return out
		case <-c.ctx.Done():
			out.Err = errClosed
			return out
		}
	}
	// Whole blocks but maybe the last, which is shorter.
	out.Fetched = min(int64(len(fs))*c.opt.BlockSize, o.Size)
	return out
}
