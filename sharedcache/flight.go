package sharedcache

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// Cluster-wide single flight. Without it, nodes that start the same blocks
// at the same moment each miss the tier and each read the source: N nodes
// reading together cost the source N times the dataset. With a store that
// has a conditional create (backends.ExclusiveWriter), a node about to
// read blocks from the source first claims them: it creates
// fetching/<block name> with WriteExclusive for each, a small record of
// the holder, an expiry (FlightTTL) and the blocks the holder reads. Of
// nodes racing for a block exactly one creates the marker and reads the
// source; the others find the marker held by another live node and wait
// for the block to appear in the tier (at most FlightWait per block,
// polling), then read it from there, else read the source after all.
//
// What one node alone pays, measured (docs/SHARED-CACHE.md): nothing on
// its read path. The claims of a range's blocks go out in parallel and
// together with the range's one source read, whose time to first byte
// (tens of ms for a remote store) hides their round trip (about a
// millisecond in-cluster); the reader waits for them only before it uses
// the first byte. A node that loses the first block's claim cancels its
// source read before the source sent anything; one that holds only the
// first blocks of the range reads those alone. When claims are measured
// slower than the source's first byte, the node claims first and then
// reads (it is contended anyway), so a loser never costs source bytes.
// A node waits only when a marker of ANOTHER live holder exists.
//
// A holder deletes its markers of blocks it did not write to the tier
// (dropped, or not read after all), so nobody waits for them. The markers
// of written blocks stay until they are swept (sweep.go: older than
// FlightTTL) or a lifecycle rule removes them: a node that missed a block
// just before it was written then finds the claim and reads the tier, not
// the source. A marker past its expiry, torn, or of a holder that this
// node already waited for in vain is overwritten by the next node that
// needs the block.

// flightPrefix holds the claim markers, beside blocksPrefix.
const flightPrefix = "fetching/"

// Single-flight defaults: a claim lives 30 s, far more than one block
// takes; a node waits at most 2 s for a block another node is fetching.
const (
	defaultFlightTTL  = 30 * time.Second
	defaultFlightWait = 2 * time.Second
	// pollMin, pollMax: a waiting node polls the tier for the block,
	// backing off from 2 ms to 25 ms (a 1 MiB block from a 40 MB/s
	// source connection takes ~25 ms).
	pollMin = 2 * time.Millisecond
	pollMax = 25 * time.Millisecond
	// maxFlights bounds the claims a Tier remembers; beyond it expired
	// ones are dropped.
	maxFlights = 1 << 16
)

// claimRecord is the content of a marker.
type claimRecord struct {
	Holder  string    `json:"holder"`
	Expires time.Time `json:"expires"`
	// First and Last are the blocks the holder reads from the source in
	// the read that made this claim.
	First int64 `json:"first"`
	Last  int64 `json:"last"`
}

// ewma folds d into the moving average a (nanoseconds; weight 1/8).
func ewma(a *atomic.Int64, d time.Duration) {
	for {
		old := a.Load()
		v := int64(d)
		if old != 0 {
			v = old + (int64(d)-old)/8
		}
		if a.CompareAndSwap(old, v) {
			return
		}
	}
}

// claimsBeatSource reports whether a round of claims has been answered
// faster than the source's first byte (both moving averages), so the
// source read can start with them: a loser's is cancelled in time. Until
// both are measured, it says no (the first range of a node pays one claim
// round trip).
func (t *Tier) claimsBeatSource() bool {
	c, s := t.claimLat.Load(), t.srcLat.Load()
	return c != 0 && s != 0 && c < s*3/4
}

// flight is what a Tier knows of one block's claim.
type flight struct {
	mine   bool      // this node holds it (and deletes the marker when done)
	holder string    // the holder, when another node
	until  time.Time // the claim's expiry
}

// claimState is the outcome of a claim.
type claimState int

const (
	claimWon     claimState = iota // read the source (also: the tier failed, or the claim is stale)
	claimForeign                   // another live node reads it: wait for the block
)

func flightKey(blockName string) string {
	return flightPrefix + strings.TrimPrefix(blockName, blocksPrefix)
}

// known returns what the Tier knows of a block's claim, if it is live.
func (t *Tier) known(name string) (flight, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.flights[name]
	if !ok {
		return f, false
	}
	if !t.opt.clock().Before(f.until) {
		delete(t.flights, name)
		return f, false
	}
	return f, true
}

// foreign reports whether another live node is known to fetch the block.
func (t *Tier) foreign(name string) bool {
	f, ok := t.known(name)
	return ok && !f.mine
}

func (t *Tier) remember(name string, f flight) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.flights) >= maxFlights {
		now := t.opt.clock()
		for k, v := range t.flights {
			if !now.Before(v.until) {
				delete(t.flights, k)
			}
		}
		if len(t.flights) >= maxFlights {
			clear(t.flights) // every claim live: forget them (costs only requests)
		}
	}
	t.flights[name] = f
}

// rememberIfNew is remember unless a live claim of the block is known.
func (t *Tier) rememberIfNew(name string, f flight) {
	if _, ok := t.known(name); !ok {
		t.remember(name, f)
	}
}

// forget drops a block's claim, returning whether it was this node's.
func (t *Tier) forget(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.flights[name]
	if ok {
		delete(t.flights, name)
	}
	return ok && f.mine
}

// markDead records that a holder let a wait time out: its claims are
// treated as stale until they would have expired.
func (t *Tier) markDead(holder string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dead[holder] = t.opt.clock().Add(t.opt.FlightTTL)
	for k, f := range t.flights {
		if f.holder == holder {
			delete(t.flights, k)
		}
	}
}

func (t *Tier) isDead(holder string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.dead[holder]
	if ok && !t.opt.clock().Before(until) {
		delete(t.dead, holder)
		return false
	}
	return ok
}

// claim claims block name (the first of blocks first..last that the caller
// reads from the source). It returns claimWon when the caller should read
// the source: it created the marker, the marker is its own, stale, or gone,
// or the tier failed (a claim never stands between a reader and the
// source). It returns claimForeign, and remembers the other holder's
// blocks first..last (names from nameOf), when another live node reads it.
// taken, if set, is called as soon as the store says the marker exists,
// before it is read: the caller stops its source read then, one round
// trip earlier, and restarts it in the rare case the claim turns out won.
func (t *Tier) claim(ctx context.Context, name string, first, last int64, nameOf func(int64) string, taken func()) claimState {
	ctx, cancel := context.WithTimeout(ctx, t.opt.Timeout)
	defer cancel()
	now := t.opt.clock()
	rec := claimRecord{Holder: t.opt.Holder, Expires: now.Add(t.opt.FlightTTL), First: first, Last: last}
	body, _ := json.Marshal(rec)
	mine := flight{mine: true, until: rec.Expires}
	for attempt := 0; ; attempt++ {
		_, err := t.ew.WriteExclusive(ctx, flightKey(name), body)
		if err == nil {
			t.st.flightsWon.Add(1)
			t.remember(name, mine)
			return claimWon
		}
		if !errors.Is(err, backends.ErrExist) {
			if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.failed("claim", err)
			}
			return claimWon
		}
		if taken != nil {
			taken()
			taken = nil
		}
		cur, err := t.readClaim(ctx, name)
		switch {
		case errors.Is(err, backends.ErrNotExist) && attempt == 0:
			continue // released between our create and read: try again
		case err != nil:
			return claimWon
		case cur.Holder == t.opt.Holder:
			t.remember(name, mine)
			return claimWon
		case cur.Holder == "" || !now.Before(cur.Expires) || t.isDead(cur.Holder):
			// Stale, or not a marker we can read (torn, foreign, or an
			// HDFS file between its create and close): overwrite it
			// (nodes racing here may both read the source, as without
			// single flight).
			if t.overwriteClaim(ctx, name, body) == nil {
				t.st.flightsWon.Add(1)
				t.remember(name, mine)
			}
			return claimWon
		}
		// Another live holder.
		theirs := flight{holder: cur.Holder, until: cur.Expires}
		t.remember(name, theirs)
		if cur.First <= first && first <= cur.Last {
			// Its per-block markers may have lost some of these to
			// this node: never forget a claim of ours.
			for bi := first + 1; bi <= min(cur.Last, last); bi++ {
				t.rememberIfNew(nameOf(bi), theirs)
			}
		}
		return claimForeign
	}
}

// readClaim reads a marker; a torn or empty one reads as a record with no
// holder.
func (t *Tier) readClaim(ctx context.Context, name string) (claimRecord, error) {
	var rec claimRecord
	r, err := t.store.Read(ctx, flightKey(name), backends.ReadOptions{Length: -1})
	if err != nil {
		return rec, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return rec, err
	}
	if json.Unmarshal(b, &rec) != nil {
		return claimRecord{}, nil
	}
	return rec, nil
}

func (t *Tier) overwriteClaim(ctx context.Context, name string, body []byte) error {
	w, err := t.store.Write(ctx, flightKey(name), backends.WriteOptions{SizeHint: int64(len(body))})
	if err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		w.Abort(ctx)
		return err
	}
	_, err = w.Commit(ctx)
	return err
}

// release deletes this node's marker of a block it will not write to the
// tier (dropped, or not read after all), in the background; Flush waits
// for it.
func (t *Tier) release(name string) {
	if t.ew == nil || !t.forget(name) {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.pending++
	t.wg.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.wg.Done()
		t.deleteClaim(name)
		t.done(0)
	}()
}

// releaseNow is release on a goroutine of the tier's own (a writer).
func (t *Tier) releaseNow(name string) {
	if t.ew != nil && t.forget(name) {
		t.deleteClaim(name)
	}
}

func (t *Tier) deleteClaim(name string) {
	ctx, cancel := context.WithTimeout(t.ctx, t.opt.WriteTimeout)
	defer cancel()
	t.store.Delete(ctx, flightKey(name))
}

// await polls the tier for a block another node is fetching, for at most
// FlightWait. It returns ok false when the wait ran out, the tier failed
// or ctx ended.
func (t *Tier) await(ctx context.Context, want header) (data []byte, buf *[]byte, ok bool) {
	deadline := time.Now().Add(t.opt.FlightWait)
	delay := pollMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		if data, buf, ok = t.getQuiet(ctx, want); ok {
			return data, buf, true
		}
		left := time.Until(deadline)
		if ctx.Err() != nil || !t.up() || left <= 0 {
			return nil, nil, false
		}
		timer.Reset(min(delay, left))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, nil, false
		case <-t.ctx.Done():
			return nil, nil, false
		}
		delay = min(2*delay, pollMax)
	}
}
