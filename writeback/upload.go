package writeback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/mlfsd/mlfsd/backends"
)

// enqueueLocked queues e's pending version for an uploader.
func (s *Store) enqueueLocked(e *entry) {
	if e.queued || e.pend == nil || e.failed != nil || e.paused > 0 || e.key == "" || s.closed {
		return
	}
	e.queued = true
	s.queue = append(s.queue, e)
	s.cond.Broadcast()
}

// worker uploads queued entries until the Store closes.
func (s *Store) worker() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		for !s.closed && (len(s.queue) == 0 || s.stopping) {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		e := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		e.queued = false
		if e.pend == nil || e.up != nil || e.paused > 0 || e.key == "" || e.failed != nil || e.stream != nil {
			// Not uploadable now; whoever holds it re-queues it. A stream
			// in progress, even of an older version, must end first: two
			// uploads of one file never overlap, so an older version can
			// never be published after a newer one.
			s.mu.Unlock()
			continue
		}
		v, key := e.pend, e.key
		ctx, cancel := context.WithCancel(s.ctx)
		up := &upload{v: v, key: key, ctx: ctx, cancel: cancel, done: make(chan struct{})}
		e.up = up
		s.mu.Unlock()

		info, err := s.put(ctx, key, v, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			up.committing = ctx.Err() == nil
			return up.committing
		})
		canceled := ctx.Err() != nil
		cancel()
		s.complete(e, v, key, info, err, canceled, func() { e.up = nil })
		close(up.done)
	}
}

// put uploads version v under key and publishes it with Commit, once
// commit (called just before) agrees: it reports false when the upload was
// cancelled meanwhile.
func (s *Store) put(ctx context.Context, key string, v *version, commit func() bool) (backends.ObjectInfo, error) {
	onUpload, forget := s.trackUploads(key)
	w, err := s.b.Write(ctx, key, backends.WriteOptions{SizeHint: v.size, OnUpload: onUpload})
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	abort := func() {
		if w.Abort(context.WithoutCancel(ctx)) == nil {
			forget() // else the next start aborts it
		}
	}
	if rw, ok := w.(backends.ReaderAtWriter); ok && s.limiter == nil {
		// Parts read straight from the sealed blob, in parallel.
		err = rw.WriteReaderAt(countingReaderAt{v.blob.f, &s.sent}, v.size)
	} else {
		var r io.Reader = countingReader{io.NewSectionReader(v.blob.f, 0, v.size), &s.sent}
		if s.limiter != nil {
			r = &limitedReader{ctx: ctx, r: r, l: s.limiter}
		}
		var n int64
		if rf, ok := w.(io.ReaderFrom); ok {
			n, err = rf.ReadFrom(r) // straight into the backend's buffers
		} else {
			n, err = io.CopyBuffer(w, r, make([]byte, 1<<20))
		}
		if err == nil && n != v.size {
			err = fmt.Errorf("staged file of %q gave %d of %d bytes", key, n, v.size)
		}
	}
	if err != nil {
		abort()
		return backends.ObjectInfo{}, err
	}
	if err := checkUnchanged(key, v); err != nil {
		abort()
		return backends.ObjectInfo{}, err
	}
	if !commit() {
		abort()
		return backends.ObjectInfo{}, ctx.Err()
	}
	// From here only closing the Store cancels: a cancelled request may
	// still be finished by the store after its client gave up, so an
	// unlink or rename waits for this publish instead (see quiesce).
	info, err := w.Commit(s.ctx)
	if err != nil {
		abort()
		return backends.ObjectInfo{}, err
	}
	forget()
	if info.Size != v.size {
		return info, backends.Wrap("upload", key, backends.ErrTransient,
			fmt.Errorf("backend holds %d bytes after commit, uploaded %d", info.Size, v.size))
	}
	return info, nil
}

// errChanged reports a staging file written after its seal, through a
// passthrough descriptor still open: its upload is not published; the
// writer's next close seals the new bytes.
var errChanged = errors.New("staged file changed after close")

// checkUnchanged verifies, just before publishing, that v's blob still
// holds the sealed bytes.
func checkUnchanged(key string, v *version) error {
	st, err := v.blob.stat()
	if err != nil {
		return err
	}
	if st.size != v.size || (v.ctime != 0 && st.ctime != v.ctime) {
		return fmt.Errorf("upload %q: %w", key, errChanged)
	}
	return nil
}

// complete records the end of an upload (or stream) of version v under
// key. clear runs under s.mu and forgets the upload on the entry. A nil err
// means v was published, even if canceled is set (it was cancelled too
// late); canceled with an error means nobody should retry it here.
func (s *Store) complete(e *entry, v *version, key string, info backends.ObjectInfo, err error, canceled bool, clear func()) {
	s.mu.Lock()
	s.beginOpLocked(e, opComplete)
	// Drain waits for this to end, not only for the count below: after
	// a drain the journal and staging hold nothing of what it reported.
	s.completing++
	defer func() {
		s.mu.Lock()
		s.completing--
		s.cond.Broadcast()
		s.mu.Unlock()
	}()
	clear()
	removeRecord, reseal, aside := false, false, false
	var recBlob *blob // the blob the record to remove names
	switch {
	case err == nil:
		s.done.files++
		s.done.bytes += v.size
		s.m.uploads.WithLabelValues("ok").Inc()
		s.m.uploadedBytes.Add(float64(v.size))
		if key == e.key {
			e.base, e.inBackend = info, true
			e.base.Key = key
			if v.gen > e.durable {
				e.durable = v.gen
			}
			if samePendLocked(e, v) {
				old := e.pend
				// The record names old's blob (v's, or a preserved
				// copy's) until it is removed: keep the file until
				// then, or a crash in between finds a record without
				// its data (and sets aside a file that was uploaded).
				recBlob = old.blob
				recBlob.refs++
				s.setPendLocked(e, nil)
				if old != v { // a preserved copy; v itself is dropped below
					s.dropVersionLocked(e, old)
				}
				removeRecord = true
			}
		}
	case canceled || e.key == "" || e.pend != v:
		// A namespace change or Close stopped it, or a newer close
		// superseded it: whoever did that re-queues what is pending.
	case errors.Is(err, errChanged):
		// Still being written through a descriptor that outlived the
		// close: its next close seals again. With none left open, seal now.
		e.dirty = true
		reseal = e.handles == 0
	default:
		e.attempts++
		if isPermanent(err) || e.attempts >= s.opt.MaxAttempts {
			e.failed = fmt.Errorf("upload %q: %w", key, err)
			s.m.uploads.WithLabelValues("failed").Inc()
			s.m.permanentFails.Inc()
			if aside = isPermanent(err); !aside {
				s.log.Error("writeback: giving up on a file; it stays in staging and is retried on the next start",
					"key", key, "attempts", e.attempts, "err", err)
			}
		} else {
			d := s.backoff(e.attempts)
			s.m.uploads.WithLabelValues("retry").Inc()
			s.log.Warn("writeback: upload failed, retrying", "key", key, "attempt", e.attempts, "in", d, "err", err)
			time.AfterFunc(d, func() {
				s.mu.Lock()
				s.enqueueLocked(e)
				s.mu.Unlock()
			})
		}
	}
	s.dropVersionLocked(e, v)
	if e.pend != v {
		s.enqueueLocked(e)
	}
	why := e.failed
	s.cond.Broadcast()
	s.mu.Unlock()
	if removeRecord {
		s.crash(crashCommitted)
		if err := s.jr.remove(e.id); err != nil {
			s.log.Warn("writeback: cannot remove a journal record (the file will be uploaded again at the next start)", "key", key, "err", err)
		}
		s.crash(crashRecordRemoved)
		s.mu.Lock()
		s.unrefLocked(recBlob)
		s.mu.Unlock()
	}
	if aside {
		// Retrying cannot help, now or at the next start.
		s.setAsideVersion(e, v, why)
		s.mu.Lock()
		if e.pend == v {
			s.setPendLocked(e, nil)
			s.dropVersionLocked(e, v)
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.maybeReleaseLocked(e)
	s.endOpLocked(e)
	s.mu.Unlock()
	if reseal {
		if _, err := s.seal(e, false, false); err != nil {
			s.log.Error("writeback: cannot seal a file changed after close", "key", key, "err", err)
		}
	}
}

// backoff is the delay before attempt n+1: doubling from MinBackoff, capped
// at MaxBackoff, with +-20% jitter so retries of many files spread out.
func (s *Store) backoff(n int) time.Duration {
	d := s.opt.MinBackoff
	for i := 1; i < n && d < s.opt.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.opt.MaxBackoff)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// isPermanent says whether retrying err cannot help.
func isPermanent(err error) bool {
	for _, p := range []error{backends.ErrPermission, backends.ErrInvalid, backends.ErrIsDir,
		backends.ErrNotDir, backends.ErrUnsupported, backends.ErrNotEmpty, backends.ErrExist, backends.ErrNameTooLong} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// countingReader counts the bytes read through it (upload progress).
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countingReaderAt counts the bytes read through it (upload progress; a
// retried part counts again).
type countingReaderAt struct {
	r io.ReaderAt
	n *atomic.Int64
}

func (c countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// pace waits until n more bytes may be uploaded (--upload-bwlimit).
func (s *Store) pace(ctx context.Context, n int) error {
	if s.limiter == nil {
		return nil
	}
	for n > 0 {
		k := min(n, s.limiter.Burst())
		if err := s.limiter.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// limitedReader paces reads with a token bucket (--upload-bwlimit).
type limitedReader struct {
	ctx context.Context
	r   io.Reader
	l   *rate.Limiter
}

func (lr *limitedReader) Read(p []byte) (int, error) {
	if b := lr.l.Burst(); len(p) > b {
		p = p[:b]
	}
	n, err := lr.r.Read(p)
	if n > 0 {
		if werr := lr.l.WaitN(lr.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}
