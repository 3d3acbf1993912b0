package sharedcache

import (
	"bytes"
	"context"
	"fmt"
	"io"
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

// TestSweepUnderLease: of two nodes, only the lease holder sweeps; it
// deletes the oldest blocks down to the low-water mark; the other node
// takes the lease once it expired.
func TestSweepUnderLease(t *testing.T) {
	store := nasStore(t)
	t.Cleanup(func() { store.Close() })
	src := nasStore(t)
	t.Cleanup(func() { src.Close() })
	const size = 10 << 10
	opt := Options{BlockSize: 64 << 10, MaxBytes: 50 * size, SweepEvery: time.Hour, LeaseTTL: time.Hour}
	a, b := opt, opt
	a.Holder, b.Holder = "node-a", "node-b"
	ta, err := New(nopClose{store}, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ta.Close()
	tb, err := New(nopClose{store}, b)
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
	rb, err = tb.Sweep(t.Context())
	if err != nil || !rb.Ran {
		t.Fatalf("node b after node a's lease expired: %+v, %v", rb, err)
	}
	if ra, err := ta.Sweep(t.Context()); err != nil || ra.Ran {
		t.Fatalf("node a while node b holds the lease: %+v, %v", ra, err)
	}
}
