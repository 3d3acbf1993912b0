package sharedcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// The size bound. Every node runs a sweeper; a sweep runs only on the node
// that holds the lease.
//
// On a store with a conditional create (backends.ExclusiveWriter: OSS
// x-oss-forbid-overwrite, HDFS create without overwrite, NAS link(2)) the
// lease is one object per lease period, sweep.lease.<epoch> with epoch =
// now / LeaseTTL, created with WriteExclusive: the store lets exactly one
// node create it, so at most one node holds each epoch, and nothing has to
// expire or be read back. Nodes whose clocks disagree across an epoch
// boundary may hold two adjacent epochs at once; that is as harmless as
// the race below.
//
// On a store without one, the lease is the object sweep.lease naming its
// holder and expiry, taken by writing it and reading it back: two nodes
// racing for an expired lease can, rarely, both sweep. That is harmless: a
// sweep only deletes the oldest blocks, and a block deleted twice, or
// deleted while hot, is a miss that the next reader writes again. A store
// with a lifecycle rule (OSS, S3, MinIO: expire objects N days after
// creation) can bound the tier instead: run with MaxBytes 0 and no node
// sweeps.

// leaseKey is the lease object of a store without ExclusiveWriter, and
// leaseKey+".<epoch>" the epochs' lease objects of one with it; both
// outside blocksPrefix.
const leaseKey = "sweep.lease"

// epochLeaseKey names the lease object of the epoch that now falls in.
func epochLeaseKey(now time.Time, period time.Duration) string {
	return fmt.Sprintf("%s.%d", leaseKey, now.UnixNano()/int64(period))
}

// lowWater: a sweep deletes down to this share of MaxBytes, so it does not
// run again at the next block written.
const lowWater = 0.9

type lease struct {
	Holder  string    `json:"holder"`
	Expires time.Time `json:"expires"`
}

// sweeper takes the bound's first count (bound.go), then sweeps every
// SweepEvery, and at once (at most every kickGap) when a write finds the
// tier at its bound: a sweep if this node holds the lease, else a count.
func (t *Tier) sweeper() {
	defer t.wg.Done()
	if !t.countFirst() {
		return
	}
	// Nodes started together spread their first tries over a period.
	next := time.Duration(rand.Int64N(int64(t.opt.SweepEvery)))
	timer := time.NewTimer(next)
	defer timer.Stop()
	var lastKick time.Time
	for {
		kicked := false
		select {
		case <-t.ctx.Done():
			return
		case <-timer.C:
		case <-t.bound.kick:
			if wait := t.kickGap() - time.Since(lastKick); wait > 0 {
				select {
				case <-t.ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			kicked = true
		}
		res, err := t.sweep(t.ctx, kicked)
		if err == nil && kicked && !res.Ran {
			err = t.count(t.ctx)
		}
		if err != nil && t.ctx.Err() == nil {
			t.opt.Log.Warn("shared cache sweep", "store", t.store.ID(), "err", err)
		}
		if kicked {
			lastKick = time.Now()
		} else {
			timer.Reset(t.opt.SweepEvery)
		}
	}
}

// SweepResult says what one Sweep did.
type SweepResult struct {
	Ran                bool  // this node held the lease and swept
	Blocks, Bytes      int64 // what the tier held before
	Deleted, Reclaimed int64 // blocks and bytes deleted
}

// Sweep deletes the oldest blocks beyond MaxBytes if this node gets the
// sweep lease; with MaxBytes 0 it does nothing.
func (t *Tier) Sweep(ctx context.Context) (SweepResult, error) {
	return t.sweep(ctx, false)
}

// sweep is Sweep; makeRoom (a write found the tier at its bound) deletes
// down to the low-water mark from anywhere above it, not only from above
// MaxBytes, so that writes can go on.
func (t *Tier) sweep(ctx context.Context, makeRoom bool) (SweepResult, error) {
	var res SweepResult
	if t.opt.MaxBytes <= 0 {
		return res, nil
	}
	held, err := t.takeLease(ctx)
	if err != nil || !held {
		return res, err
	}
	res.Ran = true
	t.st.sweeps.Add(1)
	if err := t.sweepMarkers(ctx); err != nil {
		return res, err
	}
	mark := t.bound.mark()
	objs, total, err := t.listBlocks(ctx, true)
	if err != nil {
		return res, err
	}
	res.Bytes = total
	res.Blocks = int64(len(objs))
	// The listing (less what this sweep deletes) is the bound's new count.
	defer func() { t.bound.set(res.Bytes-res.Reclaimed, mark) }()
	target := int64(float64(t.opt.MaxBytes) * lowWater)
	if res.Bytes <= t.opt.MaxBytes && (!makeRoom || res.Bytes <= target) {
		return res, nil
	}
	// Oldest written first: stores keep no access time, and a hot block
	// deleted is written again by its next miss.
	sort.Slice(objs, func(i, j int) bool { return objs[i].ModTime.Before(objs[j].ModTime) })
	for _, o := range objs {
		if total <= target {
			break
		}
		err := t.store.Delete(ctx, o.Key)
		if err != nil && !errors.Is(err, backends.ErrNotExist) {
			return res, fmt.Errorf("deleting %s: %w", o.Key, err)
		}
		total -= o.Size
		res.Deleted++
		res.Reclaimed += o.Size
		t.st.sweptBytes.Add(o.Size)
	}
	t.opt.Log.Info("shared cache swept", "store", t.store.ID(), "blocks", res.Blocks, "bytes", res.Bytes, "deleted", res.Deleted, "reclaimed", res.Reclaimed)
	return res, nil
}

// takeLease reports whether this node holds the sweep lease, taking or
// renewing it when it is free, expired, or already this node's.
func (t *Tier) takeLease(ctx context.Context) (bool, error) {
	if ew, ok := backends.As[backends.ExclusiveWriter](t.store); ok {
		return t.takeEpochLease(ctx, ew)
	}
	return t.takeLeaseReadBack(ctx)
}

// takeEpochLease creates the current epoch's lease object, or finds that
// this node created it earlier in the epoch. The winner deletes the lease
// objects of epochs before the last (best effort: a later winner deletes
// what this one could not).
func (t *Tier) takeEpochLease(ctx context.Context, ew backends.ExclusiveWriter) (bool, error) {
	now := t.opt.clock()
	key := epochLeaseKey(now, t.opt.LeaseTTL)
	body, _ := json.Marshal(lease{Holder: t.opt.Holder, Expires: now.Add(t.opt.LeaseTTL)})
	_, err := ew.WriteExclusive(ctx, key, body)
	if errors.Is(err, backends.ErrExist) {
		// Taken: by this node earlier in the epoch, or by another.
		cur, rerr := t.readLeaseKey(ctx, key)
		if rerr != nil {
			return false, nil // torn or gone: not ours to use
		}
		return cur.Holder == t.opt.Holder, nil
	}
	if err != nil {
		return false, err
	}
	t.dropOldLeases(ctx, key)
	return true, nil
}

// dropOldLeases deletes epoch lease objects older than the previous epoch.
func (t *Tier) dropOldLeases(ctx context.Context, current string) {
	page, err := t.store.List(ctx, backends.ListOptions{Prefix: leaseKey + ".", MaxKeys: 1000})
	if err != nil {
		return
	}
	cur, _ := strconv.ParseInt(strings.TrimPrefix(current, leaseKey+"."), 10, 64)
	for _, o := range page.Objects {
		e, err := strconv.ParseInt(strings.TrimPrefix(o.Key, leaseKey+"."), 10, 64)
		if err == nil && e < cur-1 {
			t.store.Delete(ctx, o.Key)
		}
	}
}

// takeLeaseReadBack takes the lease on a store without ExclusiveWriter:
// write it, then read it back (of nodes writing at once, the last wins).
func (t *Tier) takeLeaseReadBack(ctx context.Context) (bool, error) {
	cur, err := t.readLease(ctx)
	if err != nil && !errors.Is(err, backends.ErrNotExist) {
		return false, err
	}
	now := t.opt.clock()
	if err == nil && cur.Holder != t.opt.Holder && now.Before(cur.Expires) {
		return false, nil
	}
	body, _ := json.Marshal(lease{Holder: t.opt.Holder, Expires: now.Add(t.opt.LeaseTTL)})
	w, err := t.store.Write(ctx, leaseKey, backends.WriteOptions{SizeHint: int64(len(body))})
	if err != nil {
		return false, err
	}
	if _, err := w.Write(body); err != nil {
		w.Abort(ctx)
		return false, err
	}
	if _, err := w.Commit(ctx); err != nil {
		return false, err
	}
	// Read back: of nodes writing at once, the last write wins.
	cur, err = t.readLease(ctx)
	if err != nil {
		return false, err
	}
	return cur.Holder == t.opt.Holder, nil
}

func (t *Tier) readLease(ctx context.Context) (lease, error) {
	return t.readLeaseKey(ctx, leaseKey)
}

func (t *Tier) readLeaseKey(ctx context.Context, key string) (lease, error) {
	var l lease
	r, err := t.store.Read(ctx, key, backends.ReadOptions{Length: -1})
	if err != nil {
		return l, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if err != nil {
		return l, err
	}
	if err := json.Unmarshal(b, &l); err != nil {
		// A torn or foreign lease object: treat it as expired.
		return lease{}, nil
	}
	return l, nil
}

// sweepMarkers deletes the single-flight claim markers (flight.go) older
// than FlightTTL: their blocks were written long ago, or their holders
// died. A holder leaves a marker to expire once its block is written.
func (t *Tier) sweepMarkers(ctx context.Context) error {
	old := t.opt.clock().Add(-t.opt.FlightTTL)
	opt := backends.ListOptions{Prefix: flightPrefix, Recursive: true}
	for {
		page, err := t.store.List(ctx, opt)
		if err != nil {
			return fmt.Errorf("listing %s%s: %w", t.store.ID(), flightPrefix, err)
		}
		for _, o := range page.Objects {
			if !o.IsDir && o.ModTime.Before(old) {
				if err := t.store.Delete(ctx, o.Key); err != nil && !errors.Is(err, backends.ErrNotExist) {
					return fmt.Errorf("deleting %s: %w", o.Key, err)
				}
			}
		}
		if page.NextToken == "" {
			return nil
		}
		opt.Token = page.NextToken
	}
}
