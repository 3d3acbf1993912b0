package sharedcache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// fill reads objects of size bytes through tier until the store holds n
// blocks, oldest first, and returns their names in write order.
func fill(t *testing.T, tier *Tier, src backends.Backend, n int, size int64) []string {
	t.Helper()
	var names []string
	for i := range n {
		key := fmt.Sprintf("obj-%d", i)
		w, err := src.Write(t.Context(), key, backends.WriteOptions{SizeHint: size})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(bytes.Repeat([]byte{byte(i)}, int(size)))
		info, err := w.Commit(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		r, err := tier.Through(src).Read(t.Context(), key, backends.ReadOptions{Length: size, IfVersion: info.Version})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r)
		r.Close()
		if err := tier.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		names = append(names, blockName(src.ID(), key, info.Version, 0))
		time.Sleep(2 * time.Millisecond) // distinct write times: the sweep's order
	}
	return names
}

func exists(t *testing.T, store backends.Backend, name string) bool {
	_, err := store.Stat(t.Context(), name)
	return err == nil
}

// plainStore hides the optional interfaces of the store it wraps (no
// Unwrap): a store without ExclusiveWriter.
type plainStore struct{ backends.Backend }

func (plainStore) Close() error { return nil }

// TestSweepUnderLease: of two nodes, only the lease holder sweeps; it
// deletes the oldest blocks down to the low-water mark; the other node
// takes the lease in the next epoch (a store with ExclusiveWriter) or once
// the lease expired (a store without, where the lease is written and read
// back).
func TestSweepUnderLease(t *testing.T) {
	t.Run("exclusive", func(t *testing.T) { testSweepUnderLease(t, true) })
	t.Run("readback", func(t *testing.T) { testSweepUnderLease(t, false) })
}

func testSweepUnderLease(t *testing.T, exclusive bool) {
	store := nasStore(t)
	t.Cleanup(func() { store.Close() })
	src := nasStore(t)
	t.Cleanup(func() { src.Close() })
	var tierStore backends.Backend = nopClose{store}
	if !exclusive {
		tierStore = plainStore{store}
	}
	const size = 10 << 10
	var skew atomic.Int64 // moves both nodes' clocks
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	opt := Options{Key: testKey, noBound: true, BlockSize: 64 << 10, MaxBytes: 50 * size, SweepEvery: time.Hour, LeaseTTL: time.Hour, clock: clock}
	a, b := opt, opt
	a.Holder, b.Holder = "node-a", "node-b"
	ta, err := New(tierStore, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ta.Close()
	tb, err := New(tierStore, b)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()

	names := fill(t, ta, src, 80, size)
	ra, err := ta.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rb, err := tb.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !ra.Ran || rb.Ran {
		t.Fatalf("node a swept: %v, node b swept: %v; want only a, the first to take the lease", ra.Ran, rb.Ran)
	}
	if ra.Blocks != 80 || ra.Bytes-ra.Reclaimed > opt.MaxBytes*9/10 {
		t.Fatalf("sweep of 80 blocks over a bound of %d bytes: %+v", opt.MaxBytes, ra)
	}
	// Oldest first: every deleted block is older than every kept one.
	for i, name := range names {
		if want := int64(i) >= ra.Deleted; exists(t, store, name) != want {
			t.Fatalf("block %d of %d (oldest first): present %v after deleting %d", i, len(names), !want, ra.Deleted)
		}
	}
	if s := ta.Stats(); s.Sweeps != 1 || s.SweptBytes != ra.Reclaimed {
		t.Errorf("node a stats after one sweep: %+v", s)
	}
	// The holder keeps its lease while it lasts.
	if ra, err := ta.Sweep(t.Context()); err != nil || !ra.Ran {
		t.Fatalf("node a again, holding the lease: %+v, %v", ra, err)
	}

	if exclusive {
		if exists(t, store, leaseKey) {
			t.Errorf("a store with ExclusiveWriter got the read-back lease object %s", leaseKey)
		}
		// The next epoch: whoever asks first holds it; node b does.
		skew.Store(int64(opt.LeaseTTL))
	} else {
		// The lease expires (its holder died): node b takes it.
		expired := fmt.Sprintf(`{"holder":"node-a","expires":%q}`, time.Now().Add(-time.Minute).Format(time.RFC3339Nano))
		w, err := store.Write(context.Background(), leaseKey, backends.WriteOptions{SizeHint: int64(len(expired))})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(expired))
		if _, err := w.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	rb, err = tb.Sweep(t.Context())
	if err != nil || !rb.Ran {
		t.Fatalf("node b after node a's lease ended: %+v, %v", rb, err)
	}
	if ra, err := ta.Sweep(t.Context()); err != nil || ra.Ran {
		t.Fatalf("node a while node b holds the lease: %+v, %v", ra, err)
	}
	if exclusive {
		// Two epochs on, the first epoch's lease object is deleted.
		skew.Store(3 * int64(opt.LeaseTTL))
		if rb, err := tb.Sweep(t.Context()); err != nil || !rb.Ran {
			t.Fatalf("node b, two epochs on: %+v, %v", rb, err)
		}
		if exists(t, store, epochLeaseKey(time.Now(), opt.LeaseTTL)) {
			t.Errorf("the lease object of an epoch two periods back is still there")
		}
	}
}

// TestLeaseRace: 8 nodes racing for the lease of one epoch on a store
// with ExclusiveWriter (a NAS directory, an OSS emulator, an HDFS
// emulator): exactly one holds it.
func TestLeaseRace(t *testing.T) {
	for name, open := range map[string]func(*testing.T) backends.Backend{"nas": nasStore, "oss": ossStore, "hdfs": hdfsStore} {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			t.Cleanup(func() { store.Close() })
			const nodes = 8
			tiers := make([]*Tier, nodes)
			for i := range tiers {
				tier, err := New(nopClose{store}, Options{Key: testKey, MaxBytes: 1 << 30, SweepEvery: time.Hour, LeaseTTL: time.Hour, Holder: fmt.Sprintf("node-%d", i)})
				if err != nil {
					t.Fatal(err)
				}
				defer tier.Close()
				tiers[i] = tier
			}
			for round := range 3 {
				results := make([]SweepResult, nodes)
				errs := make([]error, nodes)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i, tier := range tiers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						results[i], errs[i] = tier.Sweep(t.Context())
					}()
				}
				close(start)
				wg.Wait()
				held := []int{}
				for i := range tiers {
					if errs[i] != nil {
						t.Fatalf("round %d, node %d: %v", round, i, errs[i])
					}
					if results[i].Ran {
						held = append(held, i)
					}
				}
				// Round 0: one node takes the lease; later rounds in the
				// same epoch: that node alone keeps it.
				if len(held) != 1 {
					t.Fatalf("round %d: nodes %v swept; want exactly one", round, held)
				}
			}
		})
	}
}
