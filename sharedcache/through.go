package sharedcache

import (
	"context"
	"errors"
	"io"

	"github.com/mlfsd/mlfsd/backends"
)

// Through returns src with its versioned ranged reads served through the
// tier: the hook by which a node's cache reads its source on a miss. Every
// other call (Stat, List, writes, and reads without a version or a length,
// which cannot be keyed) goes to src unchanged; optional interfaces of src
// are found with backends.As.
func (t *Tier) Through(src backends.Backend) backends.Backend {
	return &through{Backend: src, t: t}
}

type through struct {
	backends.Backend
	t *Tier
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
// for the rest, whose whole blocks it offers to the tier.
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
	// tier one lookup, a warm one a round trip, not one per block).
	ahead       map[int64]chan tierResult
	cancelAhead context.CancelFunc
	// held is the tier's buffer that cur lies in, handed back once cur is
	// served.
	held *[]byte
}

type tierResult struct {
	data []byte
	buf  *[]byte
	ok   bool
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.eof || r.pos >= r.end {
			return 0, io.EOF
		}
		var err error
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
	h := header{Source: r.b.ID(), Key: r.key, Version: r.version, Block: block}
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
	var data []byte
	var buf *[]byte
	ok := false
	if r.ahead == nil && r.t.up() && r.t.lastHit.Load() {
		// The tier answered the last range's first block: ask for all of
		// this range's blocks at once (one round trip, not two).
		r.readAhead(bi, (r.end-1)/bs)
	}
	if ch, started := r.ahead[bi]; started {
		res := <-ch
		data, buf, ok = res.data, res.buf, res.ok
	} else if r.t.up() {
		data, buf, ok = r.t.get(r.ctx, r.header(bi))
		r.t.lastHit.Store(ok)
		if ok {
			r.readAhead(bi+1, (r.end-1)/bs)
		}
	} else {
		r.t.st.fallbacks.Add(1)
	}
	if !ok {
		r.t.lastHit.Store(false)
		r.stopAhead()
		return r.openSource()
	}
	r.held = buf
	skip := r.pos - bi*bs
	if int64(len(data)) < bs {
		r.eof = true // a short block is the object's last
	}
	if skip < int64(len(data)) {
		r.cur = data[skip:min(int64(len(data)), skip+r.end-r.pos)]
	}
	return nil
}

// readAhead starts tier reads of blocks first..last.
func (r *reader) readAhead(first, last int64) {
	if first > last {
		return
	}
	ctx, cancel := context.WithCancel(r.ctx)
	r.cancelAhead = cancel
	r.ahead = make(map[int64]chan tierResult, last-first+1)
	for bi := first; bi <= last; bi++ {
		ch := make(chan tierResult, 1)
		r.ahead[bi] = ch
		go func() {
			d, buf, ok := r.t.get(ctx, r.header(bi))
			ch <- tierResult{d, buf, ok}
		}()
	}
}

// stopAhead abandons the tier reads started ahead.
func (r *reader) stopAhead() {
	if r.cancelAhead != nil {
		r.cancelAhead()
		r.cancelAhead = nil
	}
	r.ahead = nil
}

// openSource starts the one ranged read of the source that serves the rest.
func (r *reader) openSource() error {
	r.srcEnd = r.end
	if r.end%r.t.opt.BlockSize != 0 {
		// One byte more tells whether the object ends at end, which makes
		// the last block whole (and worth storing) or not.
		r.srcEnd++
	}
	src, err := r.b.Backend.Read(r.ctx, r.key, backends.ReadOptions{Offset: r.pos, Length: r.srcEnd - r.pos, IfVersion: r.version})
	if err != nil {
		return err
	}
	r.src = src
	return nil
}

// fromSource reads the source up to the next block boundary into cur and
// offers the block to the tier when it holds all of it.
func (r *reader) fromSource() error {
	bs := r.t.opt.BlockSize
	bi := r.pos / bs
	start := bi * bs
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
	if r.src != nil {
		return r.src.Close()
	}
	return nil
}
