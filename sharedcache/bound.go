package sharedcache

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// The size bound at write time. A sweep alone let a tier hold 27 MiB
// against an 8 MiB bound for 171 s: blocks pile up between sweeps. So a
// node counts the tier's bytes once, from a listing, when it starts, and
// adds every block object it writes before writing it; a block that would
// take the count past MaxBytes is not written, and the node sweeps at
// once, or, when another node holds the lease, lists again to learn what
// that node's sweeps freed. Only other nodes' writes since this node's
// last count can take the tier past the bound, each node by less than the
// blocks it writes between two counts; the periodic sweep is the safety
// net for that.

// bound is a node's count of the bytes the tier holds. Lock order: leaf.
type bound struct {
	mu sync.Mutex
	// counted is closed once the first listing is in: writes wait for it.
	counted chan struct{}
	isSet   bool  // GUARDED_BY(mu): counted is closed
	used    int64 // GUARDED_BY(mu): the tier's bytes, by this node's count
	// reserved is every byte this node reserved for a write (less those
	// of writes that failed), so a listing taken while writes went on is
	// topped up with what was reserved since it began.
	reserved int64 // GUARDED_BY(mu)
	// kick asks the sweeper for a sweep or a count now (the bound is hit).
	kick chan struct{}
}

func (b *bound) init() {
	b.counted = make(chan struct{})
	b.kick = make(chan struct{}, 1)
}

// mark returns the reservations so far: take it before a listing.
func (b *bound) mark() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reserved
}

// set makes listed, the bytes of a listing begun at mark, the count.
func (b *bound) set(listed, mark int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used = listed + b.reserved - mark
	if !b.isSet {
		b.isSet = true
		close(b.counted)
	}
}

// reserve counts n bytes about to be written, or reports false when they
// would take the count past max.
func (b *bound) reserve(n, max int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > max {
		return false
	}
	b.used += n
	b.reserved += n
	return true
}

// unreserve takes back a reservation whose write failed.
func (b *bound) unreserve(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.reserved -= n
}

// Used returns the bytes the tier holds by this node's count (0 without
// MaxBytes, or before the first count).
func (t *Tier) Used() int64 {
	if t.opt.MaxBytes <= 0 {
		return 0
	}
	t.bound.mu.Lock()
	defer t.bound.mu.Unlock()
	return t.bound.used
}

// admit reserves room for a block object of n bytes under MaxBytes,
// waiting for the first count; false: not written (counted), and the
// sweeper is asked to make room.
func (t *Tier) admit(n int64) bool {
	if t.opt.MaxBytes <= 0 || t.opt.noBound {
		return true
	}
	select {
	case <-t.bound.counted:
	case <-t.ctx.Done():
		return false
	}
	if t.bound.reserve(n, t.opt.MaxBytes) {
		return true
	}
	t.st.full.Add(1)
	select {
	case t.bound.kick <- struct{}{}:
	default:
	}
	return false
}

// listBlocks lists every block object of the tier and their total size;
// keep: returns them too (a count needs the total alone, and a tier of
// millions of blocks would hold a listing of hundreds of MB).
func (t *Tier) listBlocks(ctx context.Context, keep bool) (objs []backends.ObjectInfo, total int64, err error) {
	opt := backends.ListOptions{Prefix: blocksPrefix, Recursive: true}
	for {
		page, err := t.store.List(ctx, opt)
		if err != nil {
			return nil, 0, fmt.Errorf("listing %s%s: %w", t.store.ID(), blocksPrefix, err)
		}
		for _, o := range page.Objects {
			if !o.IsDir {
				if keep {
					objs = append(objs, o)
				}
				total += o.Size
			}
		}
		if page.NextToken == "" {
			return objs, total, nil
		}
		opt.Token = page.NextToken
	}
}

// count sets the bound's count from a listing of the tier.
func (t *Tier) count(ctx context.Context) error {
	mark := t.bound.mark()
	_, total, err := t.listBlocks(ctx, false)
	if err != nil {
		return err
	}
	t.bound.set(total, mark)
	return nil
}

// countFirst takes the first count, trying again every Backoff while the
// store fails (writes wait for it: unbounded, they could overrun MaxBytes).
func (t *Tier) countFirst() bool {
	for {
		err := t.count(t.ctx)
		if err == nil {
			return true
		}
		if t.ctx.Err() != nil {
			return false
		}
		t.opt.Log.Warn("shared cache: cannot count the tier's bytes; not writing to it until it can", "store", t.store.ID(), "err", err, "retry_in", t.opt.Backoff)
		select {
		case <-t.ctx.Done():
			return false
		case <-time.After(t.opt.Backoff):
		}
	}
}

// kickGap is the least time between two sweeps or counts the bound asks
// for: a node at the bound while another holds the lease lists the tier
// at most this often.
func (t *Tier) kickGap() time.Duration {
	return max(t.opt.SweepEvery/10, 100*time.Millisecond)
}
