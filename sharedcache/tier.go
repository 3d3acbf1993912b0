// Package sharedcache is a cluster-wide block-cache tier that sits between a
// node's local cache (memory, then disk) and the source: the nodes of a
// cluster that read one dataset fetch each block of it from the source
// once, and from then on from the tier, which lives on a store the cluster
// already runs (an in-region bucket such as an OSS accelerator, or an
// in-cluster S3-compatible store such as MinIO or SeaweedFS), reached
// through the backends.Backend contract like any source.
//
// The node's cache plugs it in by reading its source through Through(b): a
// ranged read of b asks the tier for each block first; a block the tier
// lacks, holds corrupt, or cannot deliver within Options.Timeout is read
// from b, and a block read whole from b is written to the tier behind the
// reader (a bounded queue; dropped, and counted, when full). The tier never
// turns a read that the source can answer into an error, and never serves a
// block whose header, checksum and MAC (under the key the cluster's nodes
// share) do not match what was asked, or that is shorter than the range
// read says the object is there (format.go).
//
// Blocks are keyed by (source identity, key, version, block index), so a
// changed object is never served stale. An object no larger than a block is
// one block: stored whole, in one object. The tier's size is bounded at
// write time by each node's count of it (bound.go), and by a sweep that one
// node at a time runs under a lease (sweep.go), or by the store's own
// lifecycle rule. On a store with a conditional create, nodes
// that miss the same blocks at once read each from the source once: one
// claims it, the others wait for it in the tier (flight.go).
//
// Lock order: Tier.mu and bound.mu are leaves.
package sharedcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/mlfsd/mlfsd/backends"
)

// Options configure a Tier. Zero fields take the defaults of DefaultOptions.
type Options struct {
	// Key is the secret the cluster's nodes share, under which every
	// block carries a MAC (format.go): required, at least MinKeyLen
	// bytes. A block whose MAC does not verify is a miss, and is
	// overwritten by the reader's fetch from the source. LoadKey reads it
	// from a file.
	Key []byte
	// BlockSize is the unit stored in the tier. Give it the node cache's
	// block size, so that every read the cache sends maps onto whole blocks.
	BlockSize int64
	// MaxBytes bounds the bytes the tier holds. It is kept at write time:
	// a node counts the tier's blocks when it starts (a listing) and adds
	// what it writes; a block that would take that count past MaxBytes
	// is not written (counted in Stats.Full), and the node runs a sweep
	// at once (or, when another node holds the sweep lease, counts
	// again). The periodic sweep deletes the oldest blocks beyond it,
	// the safety net for what other nodes write. 0: no bound (the
	// store's lifecycle rule bounds it).
	MaxBytes int64
	// Timeout bounds one block read from the tier, body included; past it
	// the block is read from the source. Keep it well under the source's
	// own deadline: the tier is there to be faster than the source.
	Timeout time.Duration
	// WriteTimeout bounds one block write to the tier.
	WriteTimeout time.Duration
	// Backoff: after the tier failed (an error or a timeout, not a plain
	// miss), reads skip it for this long, so a tier that is down costs one
	// failed request per Backoff, not one per block.
	Backoff time.Duration
	// QueueBytes bounds the blocks waiting to be written to the tier.
	QueueBytes int64
	// Writers is the number of block writes in flight.
	Writers int
	// SweepEvery is how often a node tries to take the sweep lease; the
	// lease lasts LeaseTTL. A node that crashes mid-sweep holds the lease
	// until it expires.
	SweepEvery, LeaseTTL time.Duration
	// Holder names this node in the lease and in its single-flight claims
	// (default: host name, pid and a random suffix, distinct per Tier).
	Holder string
	// Log receives state changes (tier down, sweeps); nil discards.
	Log *slog.Logger

	// NoSingleFlight turns off the cluster-wide single flight (flight.go):
	// every node that misses a block reads it from the source. Without
	// ExclusiveWriter on the store it is off anyway.
	NoSingleFlight bool
	// FlightTTL is how long a claim on a block holds (default 30 s);
	// FlightWait bounds the wait for a block another node is fetching
	// (default 2 s), after which the block is read from the source.
	FlightTTL, FlightWait time.Duration

	// noVerify serves blocks without checking header and checksum,
	// noVerifyDirect skips the checksum of blocks read straight into the
	// caller's buffer, and noVersion keys blocks without the version: the
	// mutants that prove the conformance suite catches them (tests only).
	// noMAC serves blocks whose MAC does not verify, noLengthCheck
	// blocks shorter than the range read says the object is there, and
	// noBound writes past MaxBytes (the sweep alone bounds the tier).
	noVerify, noVerifyDirect, noVersion, noMAC, noLengthCheck, noBound bool
	// noAuthz serves tier blocks to any source without asking it
	// (authz.go): the mutant of the per-credentials check (tests only).
	noAuthz bool
	// clock is the time of leases and claims (tests move it).
	clock func() time.Time
}

// DefaultTimeout is the default deadline of one block read from the tier,
// set from the distribution of that read on a loaded node
// (BenchmarkTierReadLatency: tier on an OSS emulator over loopback, a
// 2-core VM with a busy loop per core and other work, load average 8-11;
// loaded figures): with 64 reads in flight, the node cache's default, p50
// 0.12 s, p99 0.59-0.79 s, max 0.94-0.98 s over 2,100 reads; with 16 in
// flight p99 0.15-0.22 s. The former 1 s cut that tail, and each read cut
// also stops the tier for Backoff, so that against MinIO under load it
// stored 29 of about 420 blocks (5 s: 298). 3 s is about 4x the loaded
// p99 and 3x the largest read seen; a tier slower than that is down.
const DefaultTimeout = 3 * time.Second

// DefaultOptions returns the defaults of every zero field of Options.
func DefaultOptions() Options {
	return Options{
		BlockSize:    1 << 20,
		Timeout:      DefaultTimeout,
		WriteTimeout: 30 * time.Second,
		Backoff:      5 * time.Second,
		QueueBytes:   128 << 20,
		Writers:      8,
		SweepEvery:   5 * time.Minute,
		LeaseTTL:     10 * time.Minute,
		FlightTTL:    defaultFlightTTL,
		FlightWait:   defaultFlightWait,
	}
}

func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.BlockSize == 0 {
		o.BlockSize = d.BlockSize
	}
	if o.Timeout == 0 {
		o.Timeout = d.Timeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = d.WriteTimeout
	}
	if o.Backoff == 0 {
		o.Backoff = d.Backoff
	}
	if o.QueueBytes == 0 {
		o.QueueBytes = d.QueueBytes
	}
	if o.Writers == 0 {
		o.Writers = d.Writers
	}
	if o.SweepEvery == 0 {
		o.SweepEvery = d.SweepEvery
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = d.LeaseTTL
	}
	if o.FlightTTL == 0 {
		o.FlightTTL = d.FlightTTL
	}
	if o.FlightWait == 0 {
		o.FlightWait = d.FlightWait
	}
	if o.Holder == "" {
		h, _ := os.Hostname()
		o.Holder = fmt.Sprintf("%s/%d/%08x", h, os.Getpid(), rand.Uint32())
	}
	if o.clock == nil {
		o.clock = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	switch {
	case len(o.Key) == 0:
		return o, errors.New("shared cache: no MAC key: every node of the cluster needs the same secret key (mlfsd: --shared-cache-key-file)")
	case len(o.Key) < MinKeyLen:
		return o, fmt.Errorf("shared cache: the MAC key is %d bytes; give at least %d (e.g. head -c 32 /dev/urandom | base64)", len(o.Key), MinKeyLen)
	case o.BlockSize < 4096:
		return o, fmt.Errorf("shared cache: block size %d is below 4096", o.BlockSize)
	case o.MaxBytes < 0:
		return o, fmt.Errorf("shared cache: size bound %d is negative", o.MaxBytes)
	case o.MaxBytes > 0 && o.MaxBytes < 2*(o.BlockSize+maxHeader):
		// Kept at write time, a bound this small would hold no block,
		// or one, swept away at the next.
		return o, fmt.Errorf("shared cache: size bound %d holds fewer than two blocks of %d bytes; give at least %d, or 0 for no bound", o.MaxBytes, o.BlockSize, 2*(o.BlockSize+maxHeader))
	case o.QueueBytes < o.BlockSize:
		return o, fmt.Errorf("shared cache: write queue %d holds no block of %d bytes", o.QueueBytes, o.BlockSize)
	case o.Timeout < 0 || o.WriteTimeout < 0 || o.Backoff < 0 || o.Writers < 0 || o.FlightTTL < 0 || o.FlightWait < 0:
		return o, errors.New("shared cache: negative timeout, backoff or writer count")
	}
	return o, nil
}

// Stats are a Tier's counters since New.
type Stats struct {
	Hits, HitBytes int64 // blocks (and their bytes) served from the tier
	Misses         int64 // blocks the tier did not hold (corrupt ones included)
	Corrupt        int64 // blocks that failed the header, length, checksum or MAC check
	// Unauthenticated counts the corrupt blocks whose MAC did not verify
	// (header and CRC right): written without the cluster's key.
	Unauthenticated int64
	// Fallbacks counts reads that went to the source because the tier
	// failed: an error, its deadline, or its backoff after a failure.
	Fallbacks          int64
	Writes, WriteBytes int64 // blocks (and their bytes) written to the tier
	WriteErrors        int64
	Dropped            int64 // blocks not written: the queue was full or the tier down
	// Full counts the blocks not written because they would have taken
	// the tier past MaxBytes (by this node's count).
	Full       int64
	Sweeps     int64 // sweeps this node ran (holding the lease)
	SweptBytes int64 // bytes those sweeps deleted
	// FlightsWon counts blocks this node claimed (single flight) and read
	// from the source; FlightWaits blocks it waited for while another node
	// read them from the source; FlightTimeouts those waits that ran out
	// (the block then came from the source).
	FlightsWon, FlightWaits, FlightTimeouts int64
	// AuthRequests counts the Stats sent to a source to authorize its
	// credentials for blocks it did not read itself (authz.go), and
	// AuthDenied those refused or finding the object changed.
	AuthRequests, AuthDenied int64
}

type counters struct {
	hits, hitBytes, misses, corrupt, fallbacks atomic.Int64
	unauthenticated, full                      atomic.Int64
	writes, writeBytes, writeErrors, dropped   atomic.Int64
	sweeps, sweptBytes                         atomic.Int64
	flightsWon, flightWaits, flightTimeouts    atomic.Int64
	authRequests, authDenied                   atomic.Int64
}

// Tier is a shared block tier on one store. It is safe for concurrent use.
type Tier struct {
	store  backends.Backend
	opt    Options
	mac    macKey
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	queue  chan writeJob
	room   *semaphore.Weighted // QueueBytes of queued block data
	st     counters
	// lastHit: the last block a range began with was in the tier. A
	// range then asks for all its blocks at once; after a miss, for its
	// first block alone (a node reading cold costs the tier one lookup
	// per range, not one per block).
	lastHit atomic.Bool
	bufs    sync.Pool // *[]byte of BlockSize+4096: block objects read (getBuf)
	// downUntil (Unix nanoseconds): reads skip the tier until then. An
	// atomic, not under mu: every block read checks it.
	downUntil atomic.Int64

	// ew is the store's conditional create, nil without single flight.
	ew backends.ExclusiveWriter
	// claimLat, srcLat: moving averages (ns) of a round of claims and of
	// the source's time to first byte (flight.go).
	claimLat, srcLat atomic.Int64

	mu      sync.Mutex
	pending int // GUARDED_BY(mu): blocks queued or being written
	// written: block bytes this Tier wrote, by source (backend ID).
	// GUARDED_BY(mu)
	written map[string]int64
	idle    chan struct{} // GUARDED_BY(mu): closed when pending drops to 0
	closed  bool          // GUARDED_BY(mu)
	// flights: live claims known, by block name (flight.go).
	flights map[string]flight // GUARDED_BY(mu)
	// dead: holders whose claims let a wait run out, until when.
	dead map[string]time.Time // GUARDED_BY(mu)

	// The size bound at write time (bound.go).
	bound bound
}

type writeJob struct {
	name string
	h    header
	data []byte
}

// New starts a tier on store (a directory of it that only the tier uses).
// The tier owns store: Close closes it.
func New(store backends.Backend, opt Options) (*Tier, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	opt.Key = bytes.Clone(opt.Key)
	ctx, cancel := context.WithCancel(context.Background())
	t := &Tier{
		store:   store,
		opt:     opt,
		mac:     newMACKey(opt.Key),
		ctx:     ctx,
		cancel:  cancel,
		queue:   make(chan writeJob, opt.QueueBytes/opt.BlockSize+1),
		room:    semaphore.NewWeighted(opt.QueueBytes),
		flights: map[string]flight{},
		dead:    map[string]time.Time{},
	}
	if !opt.NoSingleFlight {
		t.ew, _ = backends.As[backends.ExclusiveWriter](store)
	}
	for range opt.Writers {
		t.wg.Add(1)
		go t.writer()
	}
	if opt.MaxBytes > 0 {
		t.bound.init()
		t.wg.Add(1)
		go t.sweeper()
	}
	return t, nil
}

// Store is the backend the tier lives on.
func (t *Tier) Store() backends.Backend { return t.store }

// Stats returns the tier's counters.
func (t *Tier) Stats() Stats {
	return Stats{
		Hits: t.st.hits.Load(), HitBytes: t.st.hitBytes.Load(), Misses: t.st.misses.Load(),
		Corrupt: t.st.corrupt.Load(), Unauthenticated: t.st.unauthenticated.Load(), Fallbacks: t.st.fallbacks.Load(),
		Writes: t.st.writes.Load(), WriteBytes: t.st.writeBytes.Load(), WriteErrors: t.st.writeErrors.Load(), Full: t.st.full.Load(),
		Dropped: t.st.dropped.Load(), Sweeps: t.st.sweeps.Load(), SweptBytes: t.st.sweptBytes.Load(),
		FlightsWon: t.st.flightsWon.Load(), FlightWaits: t.st.flightWaits.Load(), FlightTimeouts: t.st.flightTimeouts.Load(),
		AuthRequests: t.st.authRequests.Load(), AuthDenied: t.st.authDenied.Load(),
	}
}

// Flush waits until every block queued so far is written (or failed), and
// every claim released so far is deleted, for tests and benchmarks that
// need the tier settled.
func (t *Tier) Flush(ctx context.Context) error {
	t.mu.Lock()
	if t.pending == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the writers (blocks still queued are dropped) and the
// sweeper, and closes the store.
func (t *Tier) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	return t.store.Close()
}

// up reports whether reads may try the tier now.
func (t *Tier) up() bool {
	return time.Now().UnixNano() >= t.downUntil.Load()
}

// failed records a failure of the tier: reads skip it for Backoff.
func (t *Tier) failed(op string, err error) {
	now := time.Now()
	wasUp := now.UnixNano() >= t.downUntil.Swap(now.Add(t.opt.Backoff).UnixNano())
	if wasUp {
		t.opt.Log.Warn("shared cache failing; reading from the source", "store", t.store.ID(), "op", op, "err", err, "retry_in", t.opt.Backoff)
	}
}

// get returns block data from the tier, or ok false on a miss, a corrupt
// block or a failure (each counted).
//
// On a hit, data lies in *buf, which the caller hands back with putBuf
// once it no longer reads data.
func (t *Tier) get(ctx context.Context, want header) (data []byte, buf *[]byte, ok bool) {
	return t.lookup(ctx, want, true)
}

// getQuiet is get without counting a miss: a node polling for a block
// another node fetches.
func (t *Tier) getQuiet(ctx context.Context, want header) (data []byte, buf *[]byte, ok bool) {
	return t.lookup(ctx, want, false)
}

func (t *Tier) lookup(ctx context.Context, want header, countMiss bool) (data []byte, buf *[]byte, ok bool) {
	s, ok := t.open(ctx, want, countMiss)
	if !ok {
		return nil, nil, false
	}
	buf = t.getBuf()
	n, ok := s.readInto((*buf)[:cap(*buf)])
	if !ok {
		t.putBuf(buf)
		return nil, nil, false
	}
	return (*buf)[:n], buf, true
}

// stream is one block object of the tier, opened and read past its
// header: its data comes next, to be read (readInto) straight into the
// buffer it ends in, the node cache's block, with no copy on the way
// (measured: that copy was 28% of a node's CPU reading from the tier).
// Its Timeout runs while it is opened and again while its data is read,
// not while it waits, opened ahead, for the reader to get to it.
type stream struct {
	t       *Tier
	name    string
	want    header
	h       header // as stored: Len and CRC32C; Len -1 when unchecked (noVerify)
	rc      io.ReadCloser
	ctx     context.Context
	cancel  context.CancelFunc
	timer   *time.Timer
	expired atomic.Bool
	// countMiss: a miss counts (not a node polling for a block another
	// node fetches).
	countMiss bool
	// skipCRC: the noVerifyDirect mutant (tests only).
	skipCRC bool
}

// open opens block want in the tier and reads its header, or returns ok
// false on a miss, a corrupt header or a failure (each counted). The
// caller reads the data with readInto, or closes the stream.
func (t *Tier) open(ctx context.Context, want header, countMiss bool) (*stream, bool) {
	if t.ctx.Err() != nil { // closed: the source serves what is still read
		return nil, false
	}
	s := &stream{t: t, name: t.name(want), want: want, countMiss: countMiss}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.timer = time.AfterFunc(t.opt.Timeout, func() { s.expired.Store(true); s.cancel() })
	// A bounded range, not the whole object: a block object is at most
	// its header beyond a block, and a ranged read spares the OSS backend
	// its CRC-64 pass over every whole-object read (the block's CRC-32C,
	// checked in readInto, guards it already).
	limit := t.opt.BlockSize + int64(len(magic)) + 4 + maxHeader
	rc, err := t.store.Read(s.ctx, s.name, backends.ReadOptions{Length: limit})
	if err == nil {
		s.rc = rc
		err = s.readHeader()
	}
	if !s.timer.Stop() && err == nil {
		// The deadline passed as the header arrived: the context is
		// cancelled, the data cannot be read.
		s.expired.Store(true)
		err = context.DeadlineExceeded
	}
	if err != nil {
		s.fail(err)
		return nil, false
	}
	return s, true
}

// readHeader reads and checks the header (format.go) of the block object.
func (s *stream) readHeader() error {
	var pre [len(magic) + 4]byte
	if _, err := io.ReadFull(s.rc, pre[:]); err != nil {
		return truncated(err, "no block header")
	}
	verify := !s.t.opt.noVerify
	if verify && string(pre[:len(magic)]) != magic {
		return fmt.Errorf("%w: no block header", errCorrupt)
	}
	hl := binary.BigEndian.Uint32(pre[len(magic):])
	if hl > maxHeader {
		return fmt.Errorf("%w: header length %d", errCorrupt, hl)
	}
	hb := make([]byte, hl)
	if _, err := io.ReadFull(s.rc, hb); err != nil {
		return truncated(err, "header cut short")
	}
	if !verify {
		s.h.Len = -1
		return nil
	}
	h, err := checkHeader(hb, s.want)
	if err != nil {
		return err
	}
	if h.Len < 0 || h.Len > s.t.opt.BlockSize {
		return fmt.Errorf("%w: header says %d bytes, blocks are %d", errCorrupt, h.Len, s.t.opt.BlockSize)
	}
	if h.Len < s.want.need && !s.t.opt.noLengthCheck {
		// Served, it would end the object early: every read of it
		// would fail (ESTALE) on every node.
		return fmt.Errorf("%w: header says %d bytes; the object holds at least %d there", errCorrupt, h.Len, s.want.need)
	}
	if h.MAC == "" || h.Nonce == "" {
		return fmt.Errorf("%w: no MAC", errCorrupt)
	}
	s.h = h
	return nil
}

// truncated makes an object that ends early corrupt; other errors are the
// store's.
func truncated(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s", errCorrupt, what)
	}
	return err
}

// dataLen is the length of the block's data (-1: unknown, noVerify).
func (s *stream) dataLen() int64 { return s.h.Len }

// readInto reads the block's data into p (at least dataLen bytes, or a
// block when dataLen is unknown), checks it, and closes the stream. It
// returns the data's length, or ok false (counted) when the data is not
// the block's: p then holds garbage.
func (s *stream) readInto(p []byte) (int, bool) {
	s.timer.Reset(s.t.opt.Timeout)
	n, err := s.readData(p)
	// Data read whole and checked is served even if the deadline passed
	// just after its last byte.
	s.timer.Stop()
	if err != nil {
		s.fail(err)
		return 0, false
	}
	s.close()
	s.t.st.hits.Add(1)
	s.t.st.hitBytes.Add(int64(n))
	return n, true
}

func (s *stream) readData(p []byte) (int, error) {
	if s.h.Len < 0 { // noVerify: whatever follows the header
		n, err := io.ReadFull(s.rc, p[:min(int64(len(p)), s.t.opt.BlockSize)])
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = nil
		}
		return n, err
	}
	p = p[:s.h.Len]
	if _, err := io.ReadFull(s.rc, p); err != nil {
		return 0, truncated(err, fmt.Sprintf("fewer data bytes than the header's %d", s.h.Len))
	}
	// The MAC alone on the hot path (it covers what the CRC does); the
	// CRC only to tell an accident from a forgery once the MAC failed.
	crcBad := func() bool { return crc32.Checksum(p, castagnoli) != s.h.CRC32C }
	switch {
	case s.skipCRC:
	case s.t.opt.noMAC:
		if crcBad() {
			return 0, fmt.Errorf("%w: checksum mismatch", errCorrupt)
		}
	default:
		if !s.t.mac.verify(s.h, s.t.opt.BlockSize, p) {
			if crcBad() {
				return 0, fmt.Errorf("%w: checksum mismatch", errCorrupt)
			}
			return 0, fmt.Errorf("%w: %w", errCorrupt, errUnauthenticated)
		}
	}
	// The object must end here (and an HTTP body read to its end lets
	// its connection be reused).
	var one [1]byte
	switch k, err := io.ReadFull(s.rc, one[:]); {
	case k > 0:
		return 0, fmt.Errorf("%w: more data bytes than the header's %d", errCorrupt, s.h.Len)
	case err != io.EOF:
		return 0, err
	}
	return len(p), nil
}

// close ends the stream unread, or read.
func (s *stream) close() {
	s.timer.Stop()
	if s.rc != nil {
		s.rc.Close()
		s.rc = nil
	}
	s.cancel()
}

// fail closes the stream and counts why it served nothing.
func (s *stream) fail(err error) {
	t := s.t
	s.close()
	switch {
	case errors.Is(err, errCorrupt):
		t.st.corrupt.Add(1)
		if errors.Is(err, errUnauthenticated) {
			t.st.unauthenticated.Add(1)
		}
		t.st.misses.Add(1)
		t.opt.Log.Warn("shared cache: block ignored", "name", s.name, "err", err)
	case errors.Is(err, backends.ErrNotExist):
		if s.countMiss {
			t.st.misses.Add(1)
		}
	case s.expired.Load() && t.ctx.Err() == nil:
		t.st.fallbacks.Add(1)
		t.failed("read", fmt.Errorf("no block within %v: %w", t.opt.Timeout, err))
	case s.ctx.Err() != nil || t.ctx.Err() != nil:
		// The reader gave up on this block (it missed an earlier one, or
		// closed), or the tier closed.
	default:
		t.st.fallbacks.Add(1)
		t.failed("read", err)
	}
}

// getBuf returns a buffer for one block object read from the tier: reused,
// since a node reading from the tier at 1 GB/s would otherwise allocate a
// block a millisecond for the collector to clear.
func (t *Tier) getBuf() *[]byte {
	if b, ok := t.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, t.opt.BlockSize+4096)
	return &b
}

func (t *Tier) putBuf(b *[]byte) {
	if b != nil {
		t.bufs.Put(b)
	}
}

func (t *Tier) name(h header) string {
	return blockName(h.Source, h.Key, h.Version, h.Block)
}

// offer queues a block read whole from the source for writing to the
// tier; it never waits. data must not change afterwards.
func (t *Tier) offer(h header, data []byte) {
	n := int64(len(data))
	name := t.name(h)
	if !t.up() || !t.room.TryAcquire(n) {
		t.st.dropped.Add(1)
		t.release(name)
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.room.Release(n)
		t.st.dropped.Add(1)
		return
	}
	t.pending++
	t.mu.Unlock()
	select {
	case t.queue <- writeJob{name: name, h: h, data: data}:
	default: // cannot happen: the channel holds more blocks than the room
		t.done(n)
		t.st.dropped.Add(1)
		t.release(name)
	}
}

// done ends one queued write of n bytes (or a claim's release: 0).
func (t *Tier) done(n int64) {
	if n > 0 {
		t.room.Release(n)
	}
	t.mu.Lock()
	t.pending--
	if t.pending == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

func (t *Tier) writer() {
	defer t.wg.Done()
	for {
		select {
		case <-t.ctx.Done():
			for {
				select {
				case j := <-t.queue:
					t.st.dropped.Add(1)
					t.done(int64(len(j.data)))
				default:
					return
				}
			}
		case j := <-t.queue:
			written := false
			if !t.up() {
				t.st.dropped.Add(1)
			} else if err := t.put(j); errors.Is(err, errFull) {
				// Counted in admit.
			} else if err != nil {
				t.st.writeErrors.Add(1)
				if t.ctx.Err() == nil {
					t.failed("write", err)
				}
			} else {
				written = true
				t.st.writes.Add(1)
				t.st.writeBytes.Add(int64(len(j.data)))
				t.countWritten(j.h.Source, int64(len(j.data)))
			}
			// Written: the marker stays until it expires, so that a node
			// that missed the block just before it was written finds the
			// claim and reads the block from the tier, not the source.
			// Not written: nodes waiting for the block go to the source.
			if !written {
				t.releaseNow(j.name)
			} else {
				t.forget(j.name)
			}
			t.done(int64(len(j.data)))
		}
	}
}

// put writes one block object: header, then the data, committed at once
// (a reader never sees a partial object; a torn one fails its checks).
func (t *Tier) put(j writeJob) error {
	ctx, cancel := context.WithTimeout(t.ctx, t.opt.WriteTimeout)
	defer cancel()
	// The header, then the data streamed after it: no copy of the block.
	enc := encodeHeader(t.mac, t.opt.BlockSize, j.h, j.data)
	size := int64(len(enc) + len(j.data))
	if !t.admit(size) {
		return errFull
	}
	err := t.write(ctx, j.name, size, enc, j.data)
	if err != nil && t.opt.MaxBytes > 0 && !t.opt.noBound {
		t.bound.unreserve(size)
	}
	return err
}

// errFull: the block would have taken the tier past MaxBytes.
var errFull = errors.New("shared cache at its size bound")

func (t *Tier) write(ctx context.Context, name string, size int64, enc, data []byte) error {
	w, err := t.store.Write(ctx, name, backends.WriteOptions{SizeHint: size})
	if err != nil {
		return err
	}
	if _, err := w.Write(enc); err != nil {
		w.Abort(ctx)
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort(ctx)
		return err
	}
	_, err = w.Commit(ctx)
	return err
}

func (t *Tier) countWritten(source string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.written == nil {
		t.written = map[string]int64{}
	}
	t.written[source] += n
}

// WrittenBySource returns the block bytes this Tier wrote since it
// started, by source (the backend ID of the objects): what of each
// dataset this node added to the tier. (The tier's blocks are named by
// hashes, so what the tier holds per dataset is not known without
// listing every object of every dataset.)
func (t *Tier) WrittenBySource() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.written)
}
