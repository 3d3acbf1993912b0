package sharedcache

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/mlfsd/mlfsd/backends"
)

// Through returns src with its versioned ranged reads served through the
// tier: the hook by which a node's cache reads its source on a miss. Every
// other call (Stat, List, writes, and reads without a version or a length,
// which cannot be keyed) goes to src unchanged; optional interfaces of src
// are found with backends.As.
//
// A block from the tier is served only once src's own credentials were
// authorized by the store for that object version (authz.go).
func (t *Tier) Through(src backends.Backend) backends.Backend {
	return &through{Backend: src, t: t, authz: map[string]struct{}{}}
}

type through struct {
	backends.Backend
	t *Tier

	mu     sync.Mutex
	authz  map[string]struct{} // GUARDED_BY(mu): versions the store authorized src for (authz.go)
	flight singleflight.Group  // the HEADs authorizing src, by version (authz.go)
}

// Unwrap implements backends.Unwrapper.
func (b *through) Unwrap() backends.Backend { return b.Backend }

func (b *through) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	if opt.IfVersion == "" || opt.Length <= 0 || opt.Offset < 0 {
		return b.Backend.Read(ctx, key, opt)
	}
	return &reader{
		ctx: ctx, b: b, t: b.t, key: key, version: opt.IfVersion,
		pos: opt.Offset, end: opt.Offset + opt.Length,
	}, nil
}

// reader serves [pos, end) of one object version block by block: from the
// tier while it has the blocks, then from one ranged read of the source
// for the rest, whose whole blocks it offers to the tier. With single
// flight the source read covers only the blocks this node claimed; for a
// block another node claimed the reader goes back to the tier and waits.
type reader struct {
	ctx     context.Context
	b       *through
	t       *Tier
	key     string
	version string

	pos, end int64  // the next byte to serve; the end of the range asked
	cur      []byte // bytes at pos, ready to serve
	eof      bool   // the object ends where cur does
	src      io.ReadCloser
	srcEnd   int64 // end of the source range (end, or end+1 to learn if the object ends at end)

	// ahead holds the tier reads of the range's blocks started in
	// parallel: all of them when the tier's last range began with a hit,
	// else the rest once the first block was a hit (a cold range costs the
	// tier one lookup, a warm one a round trip, not one per block). Each
	// opens its block and reads the header; the data is read when the
	// reader gets to it, into the caller's buffer if it holds the block.
	ahead       map[int64]chan *stream
	cancelAhead context.CancelFunc
	// next is block bi's stream, opened, its data not read yet: Read
	// reads it into p, or into a buffer of the tier's (cur, held).
	next   *stream
	nextBi int64
	// held is the tier's buffer that cur lies in, handed back once cur is
	// served.
	held *[]byte

	// Single flight (flight.go). srcCancel ends the source read (opened
	// under its own context while its blocks were being claimed). won:
	// the blocks this reader claimed; offered: those it offered to the
	// tier. The claims of the others are released at Close.
	srcCancel context.CancelFunc
	won       map[int64]bool
	offered   map[int64]bool

	// authorizedOK: src was authorized for this version (authz.go).
	authorizedOK bool
}

// claimOutcome is one block's claim, as seen by the reader.
type claimOutcome int8

const (
	claimPending claimOutcome = iota
	claimOurs
	claimTheirs
)

func (r *reader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.eof || r.pos >= r.end {
			return 0, io.EOF
		}
		var err error
		if r.next != nil {
			if err = r.authorize(); err != nil {
				r.stopAhead()
				return 0, err
			}
			var n int
			if n, err = r.readNext(p); n > 0 || err != nil {
				return n, err
			}
			continue
		}
		if r.src == nil {
			err = r.fromTier()
		} else {
			err = r.fromSource()
		}
		if err != nil {
			return 0, err
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.pos += int64(n)
	return n, nil
}

func (r *reader) header(block int64) header {
	bs := r.t.opt.BlockSize
	h := header{Source: r.b.ID(), Key: r.key, Version: r.version, Block: block, need: min(bs, r.end-block*bs)}
	if r.t.opt.noVersion {
		h.Version = ""
	}
	return h
}

// fromTier loads the block at pos from the tier into cur, or opens the
// source for the rest of the range.
func (r *reader) fromTier() error {
	bs := r.t.opt.BlockSize
	bi := r.pos / bs
	r.t.putBuf(r.held) // cur is served
	r.held = nil
	var s *stream
	ok := false
	following := r.t.ew != nil && r.t.foreign(r.name(bi))
	if r.ahead == nil && r.t.up() && r.t.lastHit.Load() && !following && r.mayServe() {
		// The tier answered the last range's first block: ask for all of
		// this range's blocks at once (one round trip, not two).
		r.readAhead(bi, (r.end-1)/bs)
	}
	if ch, started := r.ahead[bi]; started {
		delete(r.ahead, bi)
		s = <-ch
		ok = s != nil
	} else if following {
		// Another node is reading this block from the source: wait for it.
		return r.follow(bi)
	} else if r.t.up() {
		s, ok = r.t.open(r.ctx, r.header(bi), true)
		r.t.lastHit.Store(ok)
		if ok {
			// A hit: the source's credentials must be authorized
			// before the tier serves it, and before more is asked of
			// the tier for a reader that may get nothing.
			if err := r.authorize(); err != nil {
				s.close()
				return err
			}
			r.readAhead(bi+1, (r.end-1)/bs)
		}
	} else {
		r.t.st.fallbacks.Add(1)
	}
	if !ok {
		r.t.lastHit.Store(false)
		r.stopAhead()
		return r.missed(bi)
	}
	r.next, r.nextBi = s, bi
	return nil
}

// readNext reads block nextBi's data from its stream: straight into p
// when p takes the whole block and the range wants all of it (the node
// cache reads block by block into its own buffers), else into a buffer
// of the tier's that cur then serves. Data that fails its checks is a
// miss: the block and the rest of the range come from the source.
func (r *reader) readNext(p []byte) (int, error) {
	s, bi := r.next, r.nextBi
	r.next = nil
	bs := r.t.opt.BlockSize
	if n := s.dataLen(); n >= 0 && r.pos == bi*bs && int64(len(p)) >= n && r.end-r.pos >= n {
		s.skipCRC = r.t.opt.noVerifyDirect
		if _, ok := s.readInto(p); !ok {
			return 0, r.tierMissed(bi)
		}
		r.pos += n
		if n < bs {
			r.eof = true // a short block is the object's last
		}
		return int(n), nil
	}
	buf := r.t.getBuf()
	n, ok := s.readInto((*buf)[:cap(*buf)])
	if !ok {
		r.t.putBuf(buf)
		return 0, r.tierMissed(bi)
	}
	r.serve(bi, (*buf)[:n], buf)
	return 0, nil
}

// tierMissed: block bi, which the tier seemed to hold, was not served.
func (r *reader) tierMissed(bi int64) error {
	r.t.lastHit.Store(false)
	r.stopAhead()
	return r.missed(bi)
}

// serve makes block bi's data, in buf, the bytes at pos.
func (r *reader) serve(bi int64, data []byte, buf *[]byte) {
	bs := r.t.opt.BlockSize
	r.held = buf
	skip := r.pos - bi*bs
	if int64(len(data)) < bs {
		r.eof = true // a short block is the object's last
	}
	if skip < int64(len(data)) {
		r.cur = data[skip:min(int64(len(data)), skip+r.end-r.pos)]
	}
}

func (r *reader) name(bi int64) string { return r.t.name(r.header(bi)) }

// missed reads block bi, which the tier lacks, and the rest of the range
// from the source. With single flight it first claims the blocks bi..last
// (in parallel, while the source read starts: the source's time to first
// byte hides the claims' round trip), then reads from the source the run
// of blocks from bi that it holds; if another node holds bi, the reader
// waits for the block in the tier instead. A source read whose range
// turns out to cover another node's block is cancelled before its first
// byte, as a rule, and started again over the run alone.
func (r *reader) missed(bi int64) error {
	if r.t.ew == nil || !r.t.up() {
		return r.openSource(r.ctx)
	}
	bs := r.t.opt.BlockSize
	last := (r.end - 1) / bs
	outs := make([]claimOutcome, last-bi+1)
	var unknown []int64
	for b := bi; b <= last; b++ {
		if f, ok := r.t.known(r.name(b)); !ok {
			unknown = append(unknown, b)
		} else if f.mine {
			outs[b-bi] = claimOurs
		} else {
			outs[b-bi] = claimTheirs
		}
	}
	if outs[0] == claimTheirs {
		return r.follow(bi)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	och := make(chan openedSource, 1)
	pos, end := r.pos, r.end
	// Start the source read with the claims only when they are answered
	// before its first byte (measured): a node that loses them then
	// cancels it before the source sent anything. When the tier answers
	// slower than the source, claim first (that node is contended anyway).
	concurrent := len(unknown) == 0 || r.t.claimsBeatSource()
	open := func(ctx context.Context, end int64) openedSource {
		start := time.Now()
		rc, srcEnd, err := r.b.openRange(ctx, r.key, r.version, pos, end, bs)
		if err == nil {
			ewma(&r.t.srcLat, time.Since(start))
		}
		return openedSource{rc, srcEnd, err}
	}
	if concurrent {
		go func() { och <- open(ctx, end) }()
	} else {
		och <- openedSource{}
	}
	var mu sync.Mutex
	stopped := false
	stop := func() { // block bi is taken: before the source's first byte, as a rule
		mu.Lock()
		stopped = true
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxClaimsInFlight)
	for _, b := range unknown {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			var taken func()
			if b == bi {
				taken = stop
			}
			out := claimOurs
			if r.t.claim(r.ctx, r.name(b), b, last, r.name, taken) == claimForeign {
				out = claimTheirs
			}
			mu.Lock()
			outs[b-bi] = out
			mu.Unlock()
		}()
	}
	t0 := time.Now()
	wg.Wait()
	if len(unknown) > 0 {
		ewma(&r.t.claimLat, time.Since(t0))
	}
	// The run of blocks from bi that this node reads.
	run := bi
	for run < last && outs[run+1-bi] == claimOurs {
		run++
	}
	for b := bi; b <= last; b++ {
		if outs[b-bi] == claimOurs {
			r.markWon(b)
		}
	}
	if outs[0] == claimTheirs {
		cancel()
		go closeOpened(och)
		return r.follow(bi)
	}
	if !concurrent || stopped || run < last {
		// Start (again): over the run alone, or (bi's marker was this
		// node's, or stale) over the same range.
		cancel()
		go closeOpened(och)
		ctx, cancel := context.WithCancel(r.ctx)
		srcEnd := r.end
		if run < last {
			srcEnd = (run + 1) * bs
		}
		o := open(ctx, srcEnd)
		if o.err != nil {
			cancel()
			return o.err
		}
		r.src, r.srcEnd, r.srcCancel = o.rc, o.srcEnd, cancel
		return nil
	}
	o := <-och
	if o.err != nil {
		cancel()
		return o.err
	}
	r.src, r.srcEnd, r.srcCancel = o.rc, o.srcEnd, cancel
	return nil
}

// maxClaimsInFlight bounds one reader's claims in parallel.
const maxClaimsInFlight = 16

// openedSource is the outcome of a source read started in the background.
type openedSource struct {
	rc     io.ReadCloser
	srcEnd int64
	err    error
}

// closeOpened closes the source read that arrives on ch, if any.
func closeOpened(ch <-chan openedSource) {
	if o := <-ch; o.rc != nil {
		o.rc.Close()
	}
}

func (r *reader) markWon(bi int64) {
	if f, ok := r.t.known(r.name(bi)); ok && f.mine {
		if r.won == nil {
			r.won = map[int64]bool{}
		}
		r.won[bi] = true
	}
}

// follow waits for block bi, which another node reads from the source,
// to appear in the tier; if it does not within FlightWait, the reader
// reads the source after all (and no longer waits for that holder).
func (r *reader) follow(bi int64) error {
	r.t.st.flightWaits.Add(1)
	data, buf, ok := r.t.await(r.ctx, r.header(bi))
	if ok {
		r.t.lastHit.Store(true)
		if err := r.authorize(); err != nil {
			r.t.putBuf(buf)
			return err
		}
		r.serve(bi, data, buf)
		return nil
	}
	if err := r.ctx.Err(); err != nil {
		return err
	}
	r.t.st.flightTimeouts.Add(1)
	name := r.name(bi)
	if f, known := r.t.known(name); known && f.holder != "" {
		r.t.markDead(f.holder)
	} else {
		r.t.forget(name)
	}
	return r.openSource(r.ctx)
}

// readAhead starts tier reads of blocks first..last, up to the first that
// another node is known to be fetching (no use asking for it yet).
func (r *reader) readAhead(first, last int64) {
	if r.t.ew != nil {
		for bi := first; bi <= last; bi++ {
			if r.t.foreign(r.name(bi)) {
				last = bi - 1
				break
			}
		}
	}
	if first > last {
		return
	}
	ctx, cancel := context.WithCancel(r.ctx)
	r.cancelAhead = cancel
	r.ahead = make(map[int64]chan *stream, last-first+1)
	for bi := first; bi <= last; bi++ {
		ch := make(chan *stream, 1)
		r.ahead[bi] = ch
		go func() {
			s, _ := r.t.open(ctx, r.header(bi), true)
			ch <- s
		}()
	}
}

// stopAhead abandons the tier reads started ahead, and the stream opened
// for the next block.
func (r *reader) stopAhead() {
	if r.cancelAhead != nil {
		r.cancelAhead()
		r.cancelAhead = nil
	}
	if r.next != nil {
		r.next.close()
		r.next = nil
	}
	if len(r.ahead) > 0 {
		// Close the streams the reads opened (or open yet).
		ahead := r.ahead
		go func() {
			for _, ch := range ahead {
				if s := <-ch; s != nil {
					s.close()
				}
			}
		}()
	}
	r.ahead = nil
}

// openSource starts the one ranged read of the source that serves the rest.
func (r *reader) openSource(ctx context.Context) error {
	src, srcEnd, err := r.b.openRange(ctx, r.key, r.version, r.pos, r.end, r.t.opt.BlockSize)
	if err != nil {
		return err
	}
	r.src, r.srcEnd = src, srcEnd
	// The store answered src's ranged GET of this version: src may be
	// served the tier's blocks of it too.
	r.b.authorized(r.key, r.version)
	r.authorizedOK = true
	return nil
}

// openRange opens the source for [pos, end) of a version, and one byte
// more when end is not on a block boundary: that byte tells whether the
// object ends at end, which makes the last block whole (and worth
// storing) or not.
func (b *through) openRange(ctx context.Context, key, version string, pos, end, bs int64) (io.ReadCloser, int64, error) {
	srcEnd := end
	if end%bs != 0 {
		srcEnd++
	}
	src, err := b.Backend.Read(ctx, key, backends.ReadOptions{Offset: pos, Length: srcEnd - pos, IfVersion: version})
	return src, srcEnd, err
}

// closeSource ends the source read (the reader goes back to the tier).
func (r *reader) closeSource() {
	if r.src != nil {
		r.src.Close()
		r.src = nil
	}
	if r.srcCancel != nil {
		r.srcCancel()
		r.srcCancel = nil
	}
}

// fromSource reads the source up to the next block boundary into cur and
// offers the block to the tier when it holds all of it.
func (r *reader) fromSource() error {
	bs := r.t.opt.BlockSize
	bi := r.pos / bs
	start := bi * bs
	if r.pos >= r.srcEnd {
		// The source read covered the blocks this node claimed; another
		// node reads the next: back to the tier.
		r.closeSource()
		return nil
	}
	want := min(start+bs, r.srcEnd) - r.pos
	buf := make([]byte, want)
	n, err := io.ReadFull(r.src, buf)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		r.eof = true // the object ends at pos+n
	case err != nil:
		return err
	}
	buf = buf[:n]
	// Whole: from the block's start to its end, or to the object's end.
	if r.pos == start && (int64(n) == bs || r.eof) && n > 0 {
		r.t.offer(r.header(bi), buf)
		if r.t.ew != nil {
			if r.offered == nil {
				r.offered = map[int64]bool{}
			}
			r.offered[bi] = true // the writer releases its claim
		}
	}
	r.cur = buf[:min(int64(n), r.end-r.pos)]
	if r.eof && n == 0 {
		return io.EOF
	}
	return nil
}

func (r *reader) Close() error {
	r.stopAhead()
	r.t.putBuf(r.held)
	r.held = nil
	r.cur = nil
	var err error
	if r.src != nil {
		err = r.src.Close()
		r.src = nil
	}
	r.closeSource()
	// Blocks claimed but never offered (the reader stopped early, or the
	// source failed): let waiting nodes go to the source now.
	for bi := range r.won {
		if !r.offered[bi] {
			r.t.release(r.name(bi))
		}
	}
	r.won, r.offered = nil, nil
	return err
}
