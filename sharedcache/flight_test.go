package sharedcache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// flightSource is a source OSS emulator modelling a remote store (time to
// first byte 40 ms, 80 MB/s per connection) holding files of size bytes, with
// their content.
type flightSource struct {
	srv   *ossemu.Server
	b     backends.Backend
	infos []backends.ObjectInfo
	data  [][]byte
}

func newFlightSource(t *testing.T, files int, size int64) *flightSource {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "src", "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fs := &flightSource{}
	for i := range files {
		d := make([]byte, size)
		for j := range d {
			d[j] = byte(i*131 + j*7 + j>>12)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%d", i)), d, 0o644); err != nil {
			t.Fatal(err)
		}
		fs.data = append(fs.data, d)
	}
	srv, ep := ossemutest.Start(t, root, ossemu.Options{TTFB: 40 * time.Millisecond, ConnBandwidth: 80e6})
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	u, err := backends.ParseURI("oss://src/data/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := oss.New(t.Context(), u, oss.Options{Endpoint: ep}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	for i := range files {
		info, err := b.Stat(t.Context(), fmt.Sprintf("shard-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		fs.infos = append(fs.infos, info)
	}
	fs.srv, fs.b = srv, b
	return fs
}

func (fs *flightSource) bytesOut() int64 { return fs.srv.Stats()["bytes.out"] }

func (fs *flightSource) dataset() int64 {
	var n int64
	for _, d := range fs.data {
		n += int64(len(d))
	}
	return n
}

// readShards reads every file through b as a node cache does: one
// sequential reader per file, all files at once, in ranges of rangeSize,
// and checks every byte.
func (fs *flightSource) readShards(t *testing.T, b backends.Backend, rangeSize int64) {
	var wg sync.WaitGroup
	for i, info := range fs.infos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := int64(0); off < info.Size; off += rangeSize {
				n := min(rangeSize, info.Size-off)
				r, err := b.Read(t.Context(), info.Key, backends.ReadOptions{Offset: off, Length: n, IfVersion: info.Version})
				if err != nil {
					t.Errorf("%s at %d: %v", info.Key, off, err)
					return
				}
				got, err := io.ReadAll(r)
				r.Close()
				if err != nil {
					t.Errorf("%s at %d: %v", info.Key, off, err)
					return
				}
				if !bytes.Equal(got, fs.data[i][off:off+n]) {
					t.Errorf("%s at %d: %d bytes, not the source's %d", info.Key, off, len(got), n)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// flightOptions are a node's options for the single-flight tests. The
// deadlines are hang guards: on a loaded machine (CI runs four packages at
// once on two CPUs) a tier read past a 2 s deadline sent its node to the
// source for 5 s, and a wait past 2 s did too, so three nodes cost the
// source 2x the dataset although every flight was won once.
func flightOptions(holder string) Options {
	return Options{Key: testKey, BlockSize: 256 << 10, Timeout: time.Minute, FlightWait: time.Minute, Holder: holder, QueueBytes: 64 << 20}
}

// markers lists the claim markers left in the store.
func markers(t *testing.T, store backends.Backend) []string {
	t.Helper()
	var keys []string
	opt := backends.ListOptions{Prefix: flightPrefix, Recursive: true}
	for {
		page, err := store.List(t.Context(), opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			if !o.IsDir {
				keys = append(keys, o.Key)
			}
		}
		if page.NextToken == "" {
			return keys
		}
		opt.Token = page.NextToken
	}
}

// TestNodesTogether: three nodes (Tiers, each its own holder) over one
// shared store (OSS emulator, NAS directory, HDFS emulator) read the same
// dataset from one source at the same moment.
// With single flight the source sends about the dataset once (counted by
// the source emulator), not three times, and every byte read is right.
// The same run without single flight shows what it saves.
func TestNodesTogether(t *testing.T) {
	for _, store := range []struct {
		name string
		open func(*testing.T) backends.Backend
	}{{"oss", ossStore}, {"nas", nasStore}, {"hdfs", hdfsStore}} {
		t.Run(store.name, func(t *testing.T) {
			fs := newFlightSource(t, 3, 6<<20)
			for _, flight := range []bool{true, false} {
				s := store.open(t)
				t.Cleanup(func() { s.Close() })
				const nodes = 3
				tiers := make([]*Tier, nodes)
				for i := range tiers {
					opt := flightOptions(fmt.Sprintf("node-%d", i))
					opt.NoSingleFlight = !flight
					tier, err := New(nopClose{s}, opt)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { tier.Close() })
					tiers[i] = tier
				}
				before := fs.bytesOut()
				var wg sync.WaitGroup
				for _, tier := range tiers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						fs.readShards(t, tier.Through(fs.b), 1<<20)
					}()
				}
				wg.Wait()
				sent := fs.bytesOut() - before
				var won, waits, timeouts int64
				for _, tier := range tiers {
					if err := tier.Flush(t.Context()); err != nil {
						t.Fatal(err)
					}
					st := tier.Stats()
					won, waits, timeouts = won+st.FlightsWon, waits+st.FlightWaits, timeouts+st.FlightTimeouts
				}
				ratio := float64(sent) / float64(fs.dataset())
				t.Logf("single flight %v: the source sent %.2fx the dataset to %d nodes reading together; flights won %d, waits %d, timeouts %d",
					flight, ratio, nodes, won, waits, timeouts)
				if flight {
					if ratio > 1.2 {
						t.Errorf("with single flight, 3 nodes reading together cost the source %.2fx the dataset; want about 1x", ratio)
					}
					if waits == 0 || won == 0 {
						t.Errorf("with single flight: %d flights won, %d waits; want both", won, waits)
					}
					// One marker per block at most, left to expire: a node
					// that missed a block just before it was written finds
					// the claim, not a free block to fetch again.
					if m := markers(t, s); int64(len(m)) > fs.dataset()/(256<<10) {
						t.Errorf("%d claim markers for %d blocks", len(m), fs.dataset()/(256<<10))
					}
				} else if won+waits+timeouts != 0 {
					t.Errorf("single flight off, yet %d flights won, %d waits, %d timeouts", won, waits, timeouts)
				}
			}
		})
	}
}

// putMarker writes a claim marker for block 0 of a source object as
// another node would.
func putMarker(t *testing.T, store backends.Backend, tier *Tier, src backends.Backend, info backends.ObjectInfo, rec claimRecord) {
	t.Helper()
	name := blockName(src.ID(), info.Key, info.Version, 0)
	body, _ := json.Marshal(rec)
	w, err := store.Write(t.Context(), flightKey(name), backends.WriteOptions{SizeHint: int64(len(body))})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(body)
	if _, err := w.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestStaleMarker: a marker past its expiry (its holder died) is taken
// over at once, without a wait; a live marker of a holder that never
// delivers costs one bounded wait, then the source, and that holder's
// other claims are no longer waited for. Every byte arrives right.
func TestStaleMarker(t *testing.T) {
	fs := newFlightSource(t, 2, 2<<20)
	store := ossStore(t)
	t.Cleanup(func() { store.Close() })
	opt := flightOptions("node-a")
	opt.FlightWait = 300 * time.Millisecond
	tier, err := New(nopClose{store}, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	now := time.Now()
	putMarker(t, store, tier, fs.b, fs.infos[0], claimRecord{Holder: "dead", Expires: now.Add(-time.Second), First: 0, Last: 7})
	putMarker(t, store, tier, fs.b, fs.infos[1], claimRecord{Holder: "stuck", Expires: now.Add(time.Hour), First: 0, Last: 7})

	fs.readShards(t, tier.Through(fs.b), 1<<20)
	st := tier.Stats()
	if st.FlightWaits != 1 || st.FlightTimeouts != 1 {
		t.Errorf("one live marker of a holder that never delivers: %d waits, %d timed out; want 1 and 1", st.FlightWaits, st.FlightTimeouts)
	}
	if st.FlightsWon == 0 {
		t.Errorf("no claim won: the stale marker was not taken over (%+v)", st)
	}
	// The node's /metrics says the same.
	reg := prometheus.NewRegistry()
	reg.MustRegister(tier.Collector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		got[f.GetName()] = f.GetMetric()[0].GetCounter().GetValue()
	}
	for name, want := range map[string]int64{MetricFlightsWon: st.FlightsWon, MetricFlightWaits: st.FlightWaits, MetricFlightTimeouts: st.FlightTimeouts} {
		if v, ok := got[name]; !ok || v != float64(want) {
			t.Errorf("metric %s = %v (exported: %v); Stats say %d", name, v, ok, want)
		}
	}
	if sent := fs.bytesOut(); sent < fs.dataset() {
		t.Errorf("the source sent %d bytes of a %d-byte dataset", sent, fs.dataset())
	}
	if err := tier.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Every block has a live marker: ours (the stale one overwritten, and
	// the stuck holder's block taken over after the wait, beside it) and
	// the stuck holder's.
	if m := markers(t, store); len(m) != int(fs.dataset()/(256<<10)) {
		t.Errorf("%d markers for %d blocks", len(m), fs.dataset()/(256<<10))
	}
}

// TestSweepDropsOldMarkers: the sweep deletes claim markers older than
// FlightTTL (their blocks were written long ago, or their holders died)
// and keeps live ones.
func TestSweepDropsOldMarkers(t *testing.T) {
	store := nasStore(t)
	t.Cleanup(func() { store.Close() })
	var skew atomic.Int64
	opt := Options{Key: testKey, MaxBytes: 1 << 30, SweepEvery: time.Hour, LeaseTTL: time.Hour, Holder: "node-a",
		clock: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}
	tier, err := New(nopClose{store}, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	write := func(key string) {
		w, err := store.Write(t.Context(), key, backends.WriteOptions{SizeHint: 2})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("{}"))
		if _, err := w.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	write(flightPrefix + "ab/old.1")
	write(flightPrefix + "cd/old.2")
	skew.Store(int64(2 * defaultFlightTTL)) // both are now older than FlightTTL
	if res, err := tier.Sweep(t.Context()); err != nil || !res.Ran {
		t.Fatalf("sweep: %+v, %v", res, err)
	}
	if m := markers(t, store); len(m) != 0 {
		t.Fatalf("markers older than FlightTTL after the sweep: %q", m)
	}
	write(flightPrefix + "ab/young.1")
	skew.Store(0)
	if res, err := tier.Sweep(t.Context()); err != nil || !res.Ran {
		t.Fatalf("sweep: %+v, %v", res, err)
	}
	if m := markers(t, store); len(m) != 1 || m[0] != flightPrefix+"ab/young.1" {
		t.Fatalf("markers after the sweep: %q; want only the young one", m)
	}
}

// claimFaults fails every conditional create, as a tier store that has
// lost its write path would; reads and plain writes still work.
type claimFaults struct{ backends.Backend }

func (claimFaults) Close() error { return nil }

func (claimFaults) WriteExclusive(ctx context.Context, key string, data []byte) (backends.ObjectInfo, error) {
	return backends.ObjectInfo{}, backends.Wrap("write", key, backends.ErrTransient, errors.New("injected: 503 SlowDown"))
}

// slowClaims never answers a conditional create within the deadline.
type slowClaims struct{ backends.Backend }

func (slowClaims) Close() error { return nil }

func (slowClaims) WriteExclusive(ctx context.Context, key string, data []byte) (backends.ObjectInfo, error) {
	<-ctx.Done()
	return backends.ObjectInfo{}, ctx.Err()
}

// TestClaimFailure: a tier whose claims fail, or never answer, costs a
// reader nothing but the source: no error, every byte right.
func TestClaimFailure(t *testing.T) {
	fs := newFlightSource(t, 2, 2<<20)
	for name, wrap := range map[string]func(backends.Backend) backends.Backend{
		"failing": func(b backends.Backend) backends.Backend { return claimFaults{b} },
		"silent":  func(b backends.Backend) backends.Backend { return slowClaims{b} },
	} {
		t.Run(name, func(t *testing.T) {
			store := ossStore(t)
			t.Cleanup(func() { store.Close() })
			opt := flightOptions("node-a")
			opt.Timeout = 200 * time.Millisecond
			tier, err := New(wrap(store), opt)
			if err != nil {
				t.Fatal(err)
			}
			defer tier.Close()
			fs.readShards(t, tier.Through(fs.b), 1<<20)
			if st := tier.Stats(); st.Fallbacks == 0 || st.FlightWaits != 0 {
				t.Errorf("claims failing: %+v; want fallbacks counted and no waits", st)
			}
		})
	}
}
