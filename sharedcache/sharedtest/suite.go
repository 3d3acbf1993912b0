// Package sharedtest is the conformance suite of a shared cache tier: what
// a tier must do for the nodes that read through it, checked on data, not
// on "no error". Run it with a one-line test per store the tier can live on:
//
//	func TestConformance(t *testing.T) { sharedtest.Run(t, harness) }
//
// It checks that reads through the tier return the source's bytes for
// every range (block edges, past the end, unaligned); that a second node
// reads what a first node read without touching the source, but only
// through credentials the source authorizes (one HEAD, then nothing);
// that a new
// version of an object is never served the old one's blocks; that a
// corrupt, truncated or misplaced block in the store is never served, costs
// only a read of the source and is overwritten, and so is a forged one (a
// valid header and checksum but no MAC under the cluster's key, or a valid
// MAC on a block shorter than the object holds there); that a store that is down,
// slow, or dies midway never turns into a read error; and that a store that
// comes back is used again.
package sharedtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// Tier is what the suite needs of a tier: the read hook and a way to wait
// for its background writes.
type Tier interface {
	// Through returns src read through the tier.
	Through(src backends.Backend) backends.Backend
	// Flush waits until the blocks queued for the tier are written.
	Flush(ctx context.Context) error
}

// Harness makes stores and tiers for the suite.
type Harness struct {
	// Store returns a fresh, empty store (a directory of a backend) that
	// the tiers of one sub-test share; it registers its own clean-up.
	Store func(t *testing.T) backends.Backend
	// New opens one node's tier on store as c says; it registers its own
	// clean-up. Its backoff after a failure must be short (StoreComesBack
	// waits for a tier to use its store again).
	New func(t *testing.T, store backends.Backend, c Config) Tier
	// Forge returns block object obj, as the store holds it, with its
	// data replaced by change(data) and a header and checksum that match
	// the new data: a well-formed block. withKey: its MAC is under the
	// tiers' key too (what a node of the cluster could write); else
	// under another key (anyone else who can write to the store).
	Forge func(obj []byte, blockSize int64, withKey bool, change func(data []byte) []byte) []byte
}

// Config is one node's tier as a sub-test asks for it.
type Config struct {
	// BlockSize is the size of the tier's blocks.
	BlockSize int64
	// Timeout is the tier's deadline for one block read from the store.
	Timeout time.Duration
}

// bs is the block size the suite runs with: small, so objects span many
// blocks without costing much.
const bs = 64 << 10

// The two tiers a sub-test makes. healthy is a node whose store works:
// its deadline is a hang guard, since on a busy machine a healthy store
// can take seconds to answer, and a read past the deadline goes to the
// source, which the sub-tests count (SecondNodeSkipsSource and the
// corruption tests failed so under load); a read that fails puts the tier
// in backoff, and the blocks it would have written are dropped. prompt is
// a node whose store is made to fail or hang (the slow store never
// answers): its deadline is short.
var (
	healthy = Config{BlockSize: bs, Timeout: time.Minute}
	prompt  = Config{BlockSize: bs, Timeout: 300 * time.Millisecond}
)

// Run runs every test of the suite.
func Run(t *testing.T, h Harness) {
	t.Run("Ranges", func(t *testing.T) { testRanges(t, h) })
	t.Run("SecondNodeSkipsSource", func(t *testing.T) { testSecondNode(t, h) })
	t.Run("RefusedSourceGetsNothing", func(t *testing.T) { testRefusedSource(t, h) })
	t.Run("NewVersionNotStale", func(t *testing.T) { testNewVersion(t, h) })
	t.Run("CorruptFlipped", func(t *testing.T) { testCorrupt(t, h, flipByte) })
	t.Run("CorruptTruncated", func(t *testing.T) { testCorrupt(t, h, truncate) })
	t.Run("CorruptSwapped", func(t *testing.T) { testCorrupt(t, h, swapped) })
	// Other bytes of the same length, with a valid header and CRC but
	// no MAC under the key: every node would serve them.
	t.Run("ForgedBlock", func(t *testing.T) {
		testCorrupt(t, h, forged(h, false, func(d []byte) []byte { return randBytes(uint64(len(d))+7, int64(len(d))) }))
	})
	// A block cut to half, its MAC valid: served, it would end the
	// object early and every read of the file would fail (ESTALE).
	t.Run("ForgedShortBlock", func(t *testing.T) {
		testCorrupt(t, h, forged(h, true, func(d []byte) []byte { return d[:len(d)/2] }))
	})
	t.Run("StoreDown", func(t *testing.T) {
		testFailing(t, h, func(b backends.Backend) backends.Backend { return &downStore{b} })
	})
	t.Run("StoreSlow", func(t *testing.T) {
		testFailing(t, h, func(b backends.Backend) backends.Backend { return &slowStore{b} })
	})
	t.Run("StoreDiesMidway", func(t *testing.T) { testDiesMidway(t, h) })
	t.Run("StoreComesBack", func(t *testing.T) { testComesBack(t, h) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, h) })
}

// sizes of the objects the suite reads: edges of the block size.
var sizes = []int64{1, bs - 1, bs, bs + 1, 3*bs + bs/2, 8 * bs}

// source is a NAS backend on a temp dir holding the suite's objects, with
// a count of the bytes read from it.
type source struct {
	backends.Backend
	read atomic.Int64
}

func (s *source) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	r, err := s.Backend.Read(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return &countingReader{r, &s.read}, nil
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// object is one object of the source and its content.
type object struct {
	info backends.ObjectInfo
	data []byte
}

func newSource(t *testing.T) *source {
	t.Helper()
	u, err := backends.ParseURI("nas://" + t.TempDir() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nas.New(t.Context(), u, nas.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &source{Backend: b}
}

func put(t *testing.T, b backends.Backend, key string, data []byte) backends.ObjectInfo {
	t.Helper()
	w, err := b.Write(t.Context(), key, backends.WriteOptions{SizeHint: int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	info, err := w.Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func randBytes(seed uint64, n int64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// objects puts one object of each size in src.
func objects(t *testing.T, src *source) []object {
	t.Helper()
	var out []object
	for i, n := range sizes {
		data := randBytes(uint64(i+1), n)
		out = append(out, object{put(t, src, fmt.Sprintf("d/obj-%d", n), data), data})
	}
	return out
}

// readRange reads [off, off+n) of o through b as the node cache does:
// block by block, each into a buffer of its own (which a tier may fill
// directly), then checks that the range ends there.
func readRange(ctx context.Context, b backends.Backend, o object, off, n int64) ([]byte, error) {
	r, err := b.Read(ctx, o.info.Key, backends.ReadOptions{Offset: off, Length: n, IfVersion: o.info.Version})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := []byte{}
	for pos := off; pos < off+n; {
		buf := make([]byte, min(bs-pos%bs, off+n-pos))
		k, err := io.ReadFull(r, buf)
		out = append(out, buf[:k]...)
		pos += int64(k)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return out, nil // the object ends before the range
		}
		if err != nil {
			return out, err
		}
	}
	var one [1]byte
	switch k, err := io.ReadFull(r, one[:]); {
	case k > 0:
		return out, fmt.Errorf("more than the %d bytes asked for", n)
	case !errors.Is(err, io.EOF):
		return out, err
	}
	return out, nil
}

// want is what a read of [off, off+n) of o returns: short at the end.
func want(o object, off, n int64) []byte {
	size := int64(len(o.data))
	if off >= size {
		return []byte{}
	}
	return o.data[off:min(off+n, size)]
}

// readAll reads o through b in block-aligned runs of up to run blocks,
// as the node cache's fetches do, and checks every byte.
func readAll(t *testing.T, b backends.Backend, o object, run int64) {
	t.Helper()
	size := int64(len(o.data))
	for off := int64(0); off < size; off += run * bs {
		n := min(run*bs, size-off)
		got, err := readRange(t.Context(), b, o, off, n)
		if err != nil {
			t.Fatalf("read %s [%d,+%d): %v", o.info.Key, off, n, err)
		}
		if !bytes.Equal(got, want(o, off, n)) {
			t.Fatalf("read %s [%d,+%d): %d bytes, not the source's %d", o.info.Key, off, n, len(got), len(want(o, off, n)))
		}
	}
}

func flush(t *testing.T, tier Tier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func testRanges(t *testing.T, h Harness) {
	src := newSource(t)
	objs := objects(t, src)
	store := h.Store(t)
	tiers := []Tier{h.New(t, store, healthy), h.New(t, store, healthy)}
	for round, tier := range tiers { // cold, then through the blocks the first wrote
		b := tier.Through(src)
		for _, o := range objs {
			size := int64(len(o.data))
			cases := [][2]int64{{0, 1}, {0, size}, {0, size + 100}, {size - 1, 1}, {size - 1, 50},
				{size, 10}, {size + 5, 10}, {bs - 1, 2}, {bs, bs}, {bs / 2, 2 * bs}, {size / 3, size / 3}}
			for _, c := range cases {
				off, n := c[0], c[1]
				if off < 0 || n <= 0 {
					continue
				}
				got, err := readRange(t.Context(), b, o, off, n)
				if err != nil {
					t.Fatalf("round %d: read %s (size %d) [%d,+%d): %v", round, o.info.Key, size, off, n, err)
				}
				if !bytes.Equal(got, want(o, off, n)) {
					t.Fatalf("round %d: read %s (size %d) [%d,+%d): got %d bytes, differing from the source's %d",
						round, o.info.Key, size, off, n, len(got), len(want(o, off, n)))
				}
			}
			readAll(t, b, o, 3)
		}
		flush(t, tier)
	}
}

func testSecondNode(t *testing.T, h Harness) {
	src := newSource(t)
	objs := objects(t, src)
	store := h.Store(t)
	first := h.New(t, store, healthy)
	for _, o := range objs {
		readAll(t, first.Through(src), o, 4)
	}
	flush(t, first)
	before := src.read.Load()
	second := h.New(t, store, healthy)
	for _, o := range objs {
		readAll(t, second.Through(src), o, 2) // other runs than the first node's
	}
	if n := src.read.Load() - before; n != 0 {
		t.Fatalf("the second node read %d bytes from the source; the first node had read every block", n)
	}
}

// asClient is a client of the suite's source with its own answer from
// it (the same ID: the tier keeps one copy for every client), counting
// its HEADs and its reads.
type asClient struct {
	*source
	refused      bool
	stats, reads atomic.Int64
}

func (c *asClient) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	c.stats.Add(1)
	if c.refused {
		return backends.ObjectInfo{}, backends.Wrap("stat", key, backends.ErrPermission, nil)
	}
	return c.source.Stat(ctx, key)
}

func (c *asClient) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	c.reads.Add(1)
	if c.refused {
		return nil, backends.Wrap("read", key, backends.ErrPermission, nil)
	}
	return c.source.Read(ctx, key, opt)
}

// testRefusedSource: blocks a first node put in the tier reach a second
// node's reader only through credentials the source authorizes. Refused
// ones get the source's ErrPermission and no byte, for every object;
// allowed ones are served from the tier after one HEAD per object, read
// nothing from the source, and ask nothing more on a second read.
func testRefusedSource(t *testing.T, h Harness) {
	src := newSource(t)
	objs := objects(t, src)
	store := h.Store(t)
	first := h.New(t, store, healthy)
	for _, o := range objs {
		readAll(t, first.Through(src), o, 4)
	}
	flush(t, first)
	second := h.New(t, store, healthy)
	refused := &asClient{source: src, refused: true}
	through := second.Through(refused)
	for _, o := range objs {
		got, err := readRange(t.Context(), through, o, 0, int64(len(o.data)))
		if !errors.Is(err, backends.ErrPermission) || len(got) != 0 {
			t.Fatalf("refused client read %d bytes of %s (size %d) from the tier: %v", len(got), o.info.Key, len(o.data), err)
		}
	}
	if refused.reads.Load() != 0 {
		t.Fatalf("refused client sent %d reads to the source; its blocks were all in the tier", refused.reads.Load())
	}
	allowed := &asClient{source: src}
	through = second.Through(allowed)
	before := src.read.Load()
	for round := 0; round < 2; round++ {
		for _, o := range objs {
			readAll(t, through, o, 2)
		}
	}
	if n := allowed.stats.Load(); n != int64(len(objs)) {
		t.Fatalf("allowed client sent %d HEADs for %d objects read twice from the tier; want one per object", n, len(objs))
	}
	if n := src.read.Load() - before; n != 0 {
		t.Fatalf("allowed client read %d bytes from the source; the tier held every block", n)
	}
}

func testNewVersion(t *testing.T, h Harness) {
	src := newSource(t)
	store := h.Store(t)
	old := object{data: randBytes(100, 3*bs+7)}
	old.info = put(t, src, "v/obj", old.data)
	first := h.New(t, store, healthy)
	readAll(t, first.Through(src), old, 1)
	flush(t, first)
	// The same key, the same size, other bytes: a new version.
	nw := object{data: randBytes(200, 3*bs+7)}
	nw.info = put(t, src, "v/obj", nw.data)
	if nw.info.Version == old.info.Version {
		t.Fatalf("source gave the rewritten object its old version %q", old.info.Version)
	}
	second := h.New(t, store, healthy)
	readAll(t, second.Through(src), nw, 1)
}

// A corruption rewrites every object of the store.
type corruption func(t *testing.T, store backends.Backend, objs []backends.ObjectInfo)

func storeObjects(t *testing.T, store backends.Backend) []backends.ObjectInfo {
	t.Helper()
	var out []backends.ObjectInfo
	opt := backends.ListOptions{Recursive: true}
	for {
		p, err := store.List(t.Context(), opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Objects {
			if !o.IsDir {
				out = append(out, o)
			}
		}
		if p.NextToken == "" {
			return out
		}
		opt.Token = p.NextToken
	}
}

func get(t *testing.T, store backends.Backend, key string) []byte {
	t.Helper()
	r, err := store.Read(t.Context(), key, backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// flipByte flips one bit in the last quarter of each object (its data).
func flipByte(t *testing.T, store backends.Backend, objs []backends.ObjectInfo) {
	for _, o := range objs {
		b := get(t, store, o.Key)
		if len(b) > 0 {
			b[len(b)-1-len(b)/4] ^= 0x10
		}
		put(t, store, o.Key, b)
	}
}

// truncate cuts each object to half (a torn upload).
func truncate(t *testing.T, store backends.Backend, objs []backends.ObjectInfo) {
	for _, o := range objs {
		b := get(t, store, o.Key)
		put(t, store, o.Key, b[:len(b)/2])
	}
}

// swapped moves each object's content to the next object's name (blocks
// stored under the wrong name).
func swapped(t *testing.T, store backends.Backend, objs []backends.ObjectInfo) {
	if len(objs) < 2 {
		t.Fatalf("the store holds %d objects after a read of several blocks", len(objs))
	}
	var data [][]byte
	for _, o := range objs {
		data = append(data, get(t, store, o.Key))
	}
	for i, o := range objs {
		put(t, store, o.Key, data[(i+1)%len(objs)])
	}
}

// forged rewrites each object with h.Forge.
func forged(h Harness, withKey bool, change func([]byte) []byte) corruption {
	return func(t *testing.T, store backends.Backend, objs []backends.ObjectInfo) {
		if h.Forge == nil {
			t.Fatal("the harness has no Forge: the suite cannot check that forged blocks are refused")
		}
		for _, o := range objs {
			// Objects Forge leaves alone (not blocks) stay untouched: a
			// rewritten single-flight marker would look live again.
			old := get(t, store, o.Key)
			if nw := h.Forge(old, bs, withKey, change); !bytes.Equal(nw, old) {
				put(t, store, o.Key, nw)
			}
		}
	}
}

func testCorrupt(t *testing.T, h Harness, corrupt corruption) {
	src := newSource(t)
	objs := objects(t, src)
	store := h.Store(t)
	first := h.New(t, store, healthy)
	for _, o := range objs {
		readAll(t, first.Through(src), o, 1)
	}
	flush(t, first)
	corrupt(t, store, storeObjects(t, store))
	second := h.New(t, store, healthy)
	for _, o := range objs {
		readAll(t, second.Through(src), o, 1)
	}
	flush(t, second)
	// The corrupt blocks were read from the source and written again.
	before := src.read.Load()
	third := h.New(t, store, healthy)
	for _, o := range objs {
		readAll(t, third.Through(src), o, 1)
	}
	if n := src.read.Load() - before; n != 0 {
		t.Fatalf("after the corrupt blocks were read once, a node still read %d bytes from the source: they were not overwritten", n)
	}
}

// testFailing reads through a tier on a failing store: every byte right,
// no error.
func testFailing(t *testing.T, h Harness, fail func(backends.Backend) backends.Backend) {
	src := newSource(t)
	objs := objects(t, src)
	store := h.Store(t)
	warm := h.New(t, store, healthy) // blocks in the store, so the failing one is asked for them
	readAll(t, warm.Through(src), objs[len(objs)-1], 2)
	flush(t, warm)
	tier := h.New(t, fail(store), prompt)
	for _, o := range objs {
		readAll(t, tier.Through(src), o, 2)
	}
}

func testDiesMidway(t *testing.T, h Harness) {
	src := newSource(t)
	objs := objects(t, src)
	store := h.Store(t)
	first := h.New(t, store, healthy)
	for _, o := range objs {
		readAll(t, first.Through(src), o, 1)
	}
	flush(t, first)
	d := &dyingStore{Backend: store, after: 5}
	second := h.New(t, d, prompt)
	for _, o := range objs {
		readAll(t, second.Through(src), o, 1)
	}
	if d.calls.Load() <= d.after {
		t.Fatalf("the tier made %d calls to the store, the store was to die after %d", d.calls.Load(), d.after)
	}
}

// testComesBack: a tier whose store was down serves blocks again once the
// store is back.
func testComesBack(t *testing.T, h Harness) {
	src := newSource(t)
	objs := objects(t, src)
	o := objs[len(objs)-1]
	store := h.Store(t)
	first := h.New(t, store, healthy)
	readAll(t, first.Through(src), o, 2)
	flush(t, first)
	sw := &switchStore{Backend: store}
	sw.down.Store(true)
	tier := h.New(t, sw, prompt)
	before := src.read.Load()
	readAll(t, tier.Through(src), o, 2)
	if src.read.Load() == before {
		t.Fatal("a tier whose store is down read nothing from the source")
	}
	sw.down.Store(false)
	// The tier's backoff runs on its own clock: read until it is over.
	if err := testwait.Until(testwait.Guard, func() bool {
		before := src.read.Load()
		readAll(t, tier.Through(src), o, 2)
		return src.read.Load() == before // served by the tier again
	}); err != nil {
		t.Fatalf("%v after its store came back, the tier still sent reads to the source", testwait.Guard)
	}
}

// switchStore fails every read and write while down is set.
type switchStore struct {
	backends.Backend
	down atomic.Bool
}

func (s *switchStore) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	if s.down.Load() {
		return nil, errDown
	}
	return s.Backend.Read(ctx, key, opt)
}

func (s *switchStore) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	if s.down.Load() {
		return nil, errDown
	}
	return s.Backend.Write(ctx, key, opt)
}

func testConcurrent(t *testing.T, h Harness) {
	src := newSource(t)
	objs := objects(t, src)
	store := h.Store(t)
	tiers := []Tier{h.New(t, store, healthy), h.New(t, store, healthy)}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := tiers[w%2].Through(src)
			for i := range objs {
				o := objs[(i+w)%len(objs)]
				size := int64(len(o.data))
				for off := int64(0); off < size; off += bs {
					got, err := readRange(context.Background(), b, o, off, bs)
					if err == nil && !bytes.Equal(got, want(o, off, bs)) {
						err = fmt.Errorf("read %s [%d,+%d): wrong bytes", o.info.Key, off, bs)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// errDown is what the failing stores answer.
var errDown = errors.New("store unreachable (injected)")

// downStore fails every call.
type downStore struct{ backends.Backend }

func (s *downStore) Read(context.Context, string, backends.ReadOptions) (io.ReadCloser, error) {
	return nil, errDown
}

func (s *downStore) Write(context.Context, string, backends.WriteOptions) (backends.Writer, error) {
	return nil, errDown
}

func (s *downStore) Stat(context.Context, string) (backends.ObjectInfo, error) {
	return backends.ObjectInfo{}, errDown
}

// slowStore never answers a read before the caller gives up.
type slowStore struct{ backends.Backend }

func (s *slowStore) Read(ctx context.Context, _ string, _ backends.ReadOptions) (io.ReadCloser, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// dyingStore works for its first calls, then fails every one, mid-body
// for a read open at the time.
type dyingStore struct {
	backends.Backend
	after int64
	calls atomic.Int64
}

func (s *dyingStore) dead() bool { return s.calls.Add(1) > s.after }

func (s *dyingStore) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	if s.dead() {
		return nil, errDown
	}
	r, err := s.Backend.Read(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return &dyingReader{r, s}, nil
}

func (s *dyingStore) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	if s.dead() {
		return nil, errDown
	}
	return s.Backend.Write(ctx, key, opt)
}

type dyingReader struct {
	io.ReadCloser
	s *dyingStore
}

func (r *dyingReader) Read(p []byte) (int, error) {
	if r.s.calls.Load() >= r.s.after {
		// Half a buffer, then the connection drops.
		n, _ := r.ReadCloser.Read(p[:max(1, len(p)/2)])
		r.s.calls.Add(1)
		return n, errDown
	}
	return r.ReadCloser.Read(p)
}
