package writeback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/mlfsd/mlfsd/backends"
)

// A streamer uploads a file while it is still being written: a checkpoint
// written sequentially from empty starts uploading once StreamThreshold
// bytes are staged, so little is left to upload when it is closed. It
// follows the staged file as it grows and commits only when a close seals
// exactly the bytes it sent.
//
// When writes pass through us, any write that does not extend the file, a
// truncate, a rename or a removal invalidates the stream: the upload is
// aborted (nothing is published) and the ordinary queue uploads the file
// after close. When the kernel writes the staging file directly
// (passthrough), the streamer cannot see writes: it polls the file's size,
// hashes what it sends, and at close re-reads what it sent before the
// close and compares hashes (in parallel with sending the rest); any
// difference aborts the stream the same way.
type streamer struct {
	s      *Store
	e      *entry
	key    string
	b      *blob
	pt     bool // passthrough: follow the file by polling, verify by hash
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{} // capacity 1: new data, a seal, or invalidation

	valid     bool     // GUARDED_BY(s.mu)
	started   bool     // GUARDED_BY(s.mu): an upload is open (threshold reached)
	sentBytes int64    // GUARDED_BY(s.mu): bytes handed to the upload
	v         *version // GUARDED_BY(s.mu): the sealed version to commit
	// committing: Commit is being sent; quiesce waits for it (see
	// upload.committing). GUARDED_BY(s.mu)
	committing bool
}

// errStreamChanged: bytes already streamed were rewritten before close.
var errStreamChanged = errors.New("streamed bytes were rewritten before close")

// pollInterval is how often a passthrough stream looks for new bytes.
const pollInterval = 10 * time.Millisecond

// maybeStreamLocked starts streaming e's current blob. Needs s.mu, with e
// in io or an exclusive operation (so cur is stable).
func (s *Store) maybeStreamLocked(e *entry, pt bool) {
	if s.closed || s.opt.StreamThreshold <= 0 || e.stream != nil || e.cur == nil || e.key == "" {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	st := &streamer{s: s, e: e, key: e.key, b: e.cur, pt: pt, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), wake: make(chan struct{}, 1), valid: true}
	// Cleared only by the streamer itself, in complete or opStreamEnd.
	e.stream = st
	st.b.refs++ // the streamer reads the blob until it ends
	go st.run()
}

// wrote tells the streamer about a write; sequential is false when it did
// not extend the file at its end. Needs s.mu.
func (st *streamer) wrote(sequential bool) {
	if !sequential {
		st.invalidateLocked()
		return
	}
	st.poke()
}

func (st *streamer) invalidateLocked() {
	st.valid = false
	st.cancel()
	st.poke()
}

func (st *streamer) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// adoptLocked hands the sealed version v to the streamer if it is
// streaming v's blob. Needs s.mu.
func (st *streamer) adoptLocked(v *version) bool {
	// Not while an upload of an older version is in flight: it could
	// commit after the stream (uploads of one file never overlap).
	if !st.valid || !st.started || v.blob != st.b || st.v != nil || st.e.up != nil {
		return false
	}
	st.v = v
	st.poke()
	return true
}

func (st *streamer) wait() { <-st.done }

func (st *streamer) run() {
	s := st.s
	defer close(st.done)
	info, err := st.send()
	s.mu.Lock()
	if err != nil {
		st.valid = false // no seal may adopt a failed stream
	}
	s.unrefLocked(st.b)
	v := st.v
	canceled := !st.valid || st.ctx.Err() != nil
	s.mu.Unlock()
	st.cancel()
	if v == nil {
		// Never sealed while valid: the ordinary path uploads after close.
		s.mu.Lock()
		s.beginOpLocked(st.e, opStreamEnd)
		st.e.stream = nil
		s.enqueueLocked(st.e)
		s.endOpLocked(st.e)
		s.mu.Unlock()
		return
	}
	if err != nil {
		if !canceled || errors.Is(err, errStreamChanged) {
			s.log.Info("writeback: streaming upload abandoned; uploading from staging", "key", st.key, "err", err)
		}
		// Not counted as a failed attempt: the queue uploads it from staging.
		canceled = true
	}
	s.complete(st.e, v, st.key, info, err, canceled, func() { st.e.stream = nil })
	if canceled {
		s.mu.Lock()
		s.enqueueLocked(st.e) // the queue uploads it from staging
		s.mu.Unlock()
	}
}

// send follows the blob and uploads it; it commits once a seal adopted
// the bytes it has sent.
func (st *streamer) send() (backends.ObjectInfo, error) {
	s := st.s
	var w backends.Writer
	onUpload, forget := s.trackUploads(st.key)
	abort := func(err error) (backends.ObjectInfo, error) {
		if w != nil && w.Abort(context.WithoutCancel(st.ctx)) == nil {
			forget() // else the next start aborts it
		}
		return backends.ObjectInfo{}, err
	}
	hash := xxhash.New()
	var verify chan error // the check of what was sent before the seal
	buf := make([]byte, 4<<20)
	var sent int64
	for {
		s.mu.Lock()
		valid, size, v := st.valid, st.b.size, st.v
		s.mu.Unlock()
		if !valid || st.ctx.Err() != nil {
			return abort(context.Canceled)
		}
		if v != nil {
			size = v.size
		} else if st.pt {
			bs, err := st.b.stat()
			if err != nil {
				return abort(err)
			}
			size = bs.size
		}
		if size < sent {
			return abort(errStreamChanged) // truncated below what was sent
		}
		if w == nil {
			if v != nil {
				return abort(context.Canceled) // sealed before the threshold
			}
			if size >= s.opt.StreamThreshold {
				var err error
				if w, err = s.b.Write(st.ctx, st.key, backends.WriteOptions{SizeHint: -1, OnUpload: onUpload}); err != nil {
					return abort(err)
				}
				s.mu.Lock()
				st.started = true
				s.mu.Unlock()
				continue
			}
		}
		if v != nil && st.pt && verify == nil {
			verify = make(chan error, 1)
			prefix, sum := sent, hash.Sum64()
			go func() { verify <- verifyPrefix(st.b, prefix, sum) }()
		}
		if w != nil && sent < size {
			n := min(int64(len(buf)), size-sent)
			got, err := st.b.f.ReadAt(buf[:n], sent)
			if int64(got) != n {
				return abort(fmt.Errorf("staged file of %q: read %d of %d bytes at %d: %v", st.key, got, n, sent, err))
			}
			if st.pt {
				hash.Write(buf[:n])
			}
			if err := s.pace(st.ctx, int(n)); err != nil {
				return abort(err)
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return abort(err)
			}
			s.sent.Add(n)
			sent += n
			s.mu.Lock()
			st.sentBytes = sent
			s.mu.Unlock()
			continue
		}
		if v != nil {
			if verify != nil {
				if err := <-verify; err != nil {
					return abort(err)
				}
			}
			if err := checkUnchanged(st.key, v); err != nil {
				return abort(err)
			}
			s.mu.Lock()
			st.committing = st.valid && st.ctx.Err() == nil
			commit := st.committing
			s.mu.Unlock()
			if !commit {
				return abort(context.Canceled)
			}
			// Not cancelled by an invalidation from here (see put).
			info, err := w.Commit(s.ctx)
			if err != nil {
				return abort(err)
			}
			forget()
			if info.Size != v.size {
				return info, backends.Wrap("upload", st.key, backends.ErrTransient,
					fmt.Errorf("backend holds %d bytes after commit, streamed %d", info.Size, v.size))
			}
			return info, nil
		}
		var tick <-chan time.Time
		if st.pt {
			tick = time.After(pollInterval)
		}
		select {
		case <-st.wake:
		case <-tick:
		case <-st.ctx.Done():
		}
	}
}

// verifyPrefix checks that the first n bytes of b still hash to sum.
func verifyPrefix(b *blob, n int64, sum uint64) error {
	h := xxhash.New()
	if _, err := io.CopyBuffer(h, io.NewSectionReader(b.f, 0, n), make([]byte, 4<<20)); err != nil {
		return err
	}
	if h.Sum64() != sum {
		return errStreamChanged
	}
	return nil
}
