package sharedcache

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/mlfsd/mlfsd/backends"
)

// forgetParallel bounds the requests Forget has in flight.
const forgetParallel = 16

// ForgetResult is what Forget deleted from the tier.
type ForgetResult struct {
	Blocks int64 `json:"blocks"`
	Bytes  int64 `json:"bytes"`
}

// Forget deletes from the tier the blocks of objs, object versions of
// source (the ID of the backend read through the tier: a dataset), for
// `mlfsd cache clear --shared`. Block objects are named by hashes
// (format.go), so the objects must be listed from the source to find
// them: a HEAD (for its size) and a DELETE per block the tier holds; a
// block it lacks costs the HEAD. This node's count of the tier (MaxBytes)
// drops by what was deleted. Another node that reads a deleted block
// misses it and fetches it from the source, as after a sweep.
func (t *Tier) Forget(ctx context.Context, source string, objs []backends.ObjectInfo) (ForgetResult, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(forgetParallel)
	results := make(chan ForgetResult, forgetParallel)
	var res ForgetResult
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for r := range results {
			res.Blocks += r.Blocks
			res.Bytes += r.Bytes
		}
	}()
	bs := t.opt.BlockSize
	for _, o := range objs {
		if o.IsDir {
			continue
		}
		for bi := int64(0); bi*bs < o.Size; bi++ {
			if gctx.Err() != nil {
				break
			}
			name := blockName(source, o.Key, o.Version, bi)
			g.Go(func() error {
				info, err := t.store.Stat(gctx, name)
				if errors.Is(err, backends.ErrNotExist) {
					return nil
				}
				if err == nil {
					err = t.store.Delete(gctx, name)
				}
				if err != nil && !errors.Is(err, backends.ErrNotExist) {
					return fmt.Errorf("deleting block %d of %q from the shared cache: %w", bi, o.Key, err)
				}
				results <- ForgetResult{Blocks: 1, Bytes: info.Size}
				return nil
			})
		}
	}
	err := g.Wait()
	close(results)
	<-collected
	if t.opt.MaxBytes > 0 && !t.opt.noBound {
		t.bound.drop(res.Bytes)
	}
	if err == nil {
		err = ctx.Err()
	}
	return res, err
}

// drop takes n deleted bytes off the count.
func (b *bound) drop(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used = max(b.used-n, 0)
}
