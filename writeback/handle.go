package writeback

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// OpenFlags say how a file is opened.
type OpenFlags struct {
	// Write allows WriteAt and Truncate.
	Write bool
	// Truncate empties the file at open (O_TRUNC, or a new file): the
	// backend's copy is never fetched.
	Truncate bool
	// Passthrough asks for a handle whose staging file descriptor
	// (Handle.PassthroughFd) the caller hands to the kernel, which then
	// reads and writes it directly (FUSE passthrough): local-disk speed.
	// A write handle is staged at open for it. The Store grants it only
	// when the kernel can take it (see grantPassthrough).
	Passthrough bool
}

// Handle is one open file. Its methods are safe for concurrent use. A
// Handle follows its file through renames; after the file is removed it
// still reads and writes its data, which is never uploaded.
type Handle struct {
	s     *Store
	e     *entry
	write bool
	pt    bool // counted in e.ptHandles
}

// Open opens key. base describes what the backend holds under key, or is
// nil when the file is new (then flags.Truncate must be set, and the file
// is created: it will be uploaded, even empty, at its first close).
func (s *Store) Open(ctx context.Context, key string, base *backends.ObjectInfo, flags OpenFlags) (*Handle, error) {
	s.mu.Lock()
	if e := s.entries[key]; e != nil && e.removing {
		// An unlink or a rename over key runs: open after it, as the
		// kernel would have, had it ordered the two.
		s.openWaiters++
		s.cond.Broadcast()
		for e.removing {
			s.cond.Wait()
		}
		s.openWaiters--
		if s.entries[key] == nil {
			s.mu.Unlock()
			return nil, backends.Wrap("open", key, backends.ErrNotExist, errors.New("removed while being opened"))
		}
	}
	e := s.entryLocked(key, base)
	e.handles++
	s.mu.Unlock()
	h := &Handle{s: s, e: e, write: flags.Write}
	if flags.Write && flags.Truncate {
		if err := h.Truncate(ctx, 0); err != nil {
			h.Release()
			return nil, err
		}
	}
	if flags.Passthrough {
		if err := s.grantPassthrough(ctx, h, flags.Write); err != nil {
			h.Release()
			return nil, err
		}
	}
	return h, nil
}

// grantPassthrough makes h a passthrough handle when the kernel can take
// one. The kernel keeps one I/O mode per open inode: all its open files
// are passthrough (sharing the staging file registered first) or none
// are. So h is passthrough only if every other open handle of the file
// is, and if there is a staging file to hand over (a write handle stages
// one now; a reader of a file only in the backend reads through us).
func (s *Store) grantPassthrough(ctx context.Context, h *Handle, write bool) error {
	e := h.e
	s.mu.Lock()
	s.beginOpLocked(e, opPassthrough)
	defer s.endOp(e)
	ok := e.handles-1 == e.ptHandles && (write || e.cur != nil)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	if write {
		if err := s.prepareWrite(ctx, e); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e.ptHandles++
	e.adoptedPT = false // counted now
	h.pt = true
	if st := e.stream; st != nil && st.v == nil && !st.pt {
		st.invalidateLocked() // the kernel's writes bypass this streamer
	}
	if write && e.stream == nil && e.cur.size == 0 && !e.cur.sealed {
		// A file written from empty: follow it, to upload before close.
		s.maybeStreamLocked(e, true)
	}
	return nil
}

// PassthroughFd returns the staging file's descriptor for FUSE
// passthrough, when the handle was opened with Passthrough. The kernel
// registers it at the first passthrough open of the file and uses it for
// every later one while any is open: that is why the staging file is never
// replaced while passthrough handles are open.
func (h *Handle) PassthroughFd() (int, bool) {
	if !h.pt {
		return -1, false
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if h.e.cur == nil {
		return -1, false
	}
	return int(h.e.cur.f.Fd()), true
}

// Key returns the file's current key ("" once removed).
func (h *Handle) Key() string {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.e.key
}

// Stat describes the file as this handle sees it.
func (h *Handle) Stat() backends.ObjectInfo {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.s.statLocked(h.e)
}

// ReadAt reads staged bytes, or the backend's copy of a file not staged.
// It returns io.EOF only at the end of the file.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	s, e := h.s, h.e
	s.mu.Lock()
	s.beginIOLocked(e)
	defer func() {
		s.mu.Lock()
		s.endIOLocked(e)
		s.mu.Unlock()
	}()
	s.refreshLocked(e)
	b, key, base := e.cur, e.key, e.base
	var size int64
	if b != nil {
		size = b.size
	} else {
		size = base.Size
	}
	s.mu.Unlock()
	if off >= size {
		return 0, io.EOF
	}
	want := p
	if rest := size - off; int64(len(want)) > rest {
		want = want[:rest]
	}
	var n int
	var err error
	if b == nil && key == "" {
		// Removed with nothing staged: cannot happen (Open waits for
		// an unlink in progress, which copies the file for the
		// descriptors open). Loud, never a short read.
		return 0, backends.Wrap("read", base.Key, backends.ErrNotExist, errors.New("file removed while it was being opened"))
	}
	if b != nil {
		n, err = b.f.ReadAt(want, off)
		if err == io.EOF && n == len(want) {
			err = nil
		}
	} else {
		n, err = readBackend(ctx, s.b, key, want, off)
	}
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

func readBackend(ctx context.Context, b backends.Backend, key string, p []byte, off int64) (int, error) {
	r, err := b.Read(ctx, key, backends.ReadOptions{Offset: off, Length: int64(len(p))})
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n, err := io.ReadFull(r, p)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return n, backends.Wrap("read", key, backends.ErrVersionMismatch, err)
	}
	return n, err
}

// WriteAt writes into the staged copy, staging the file first if needed
// (fetching the backend's copy, or copying a sealed version).
func (h *Handle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	s, e := h.s, h.e
	if !h.write {
		return 0, backends.Wrap("write", h.Key(), backends.ErrPermission, nil)
	}
	s.mu.Lock()
	for {
		s.beginIOLocked(e)
		b := e.cur
		if b != nil && (!b.sealed || (e.ptHandles > 0 && !s.journaledLocked(e, b))) {
			e.dirty = true
			break
		}
		// Staged data to copy or fetch first.
		s.endIOLocked(e)
		s.beginOpLocked(e, opStage)
		s.mu.Unlock()
		err := s.prepareWrite(ctx, e)
		s.mu.Lock()
		s.endOpLocked(e)
		if err != nil {
			s.mu.Unlock()
			return 0, err
		}
	}
	s.refreshLocked(e)
	b := e.cur
	sequential := off == b.size && e.ptHandles == 0
	s.mu.Unlock()
	n, err := b.f.WriteAt(p, off)
	s.mu.Lock()
	s.endIOLocked(e)
	if end := off + int64(n); end > b.size {
		b.size = end
	}
	e.mtime = time.Now()
	if st := e.stream; st != nil {
		if st.b == b && st.v == nil {
			st.wrote(sequential && err == nil)
		}
	} else if sequential && err == nil && s.opt.StreamThreshold > 0 && e.key != "" &&
		b.size >= s.opt.StreamThreshold && b.size-int64(n) < s.opt.StreamThreshold {
		// This write crossed the threshold: start uploading before close.
		s.maybeStreamLocked(e, false)
	}
	s.mu.Unlock()
	if err != nil {
		return n, stagingErr("write", h.Key(), err)
	}
	s.crash(crashStaged)
	return n, nil
}

// prepareWrite makes e.cur a writable blob. Runs in an exclusive
// operation on e, without s.mu.
func (s *Store) prepareWrite(ctx context.Context, e *entry) error {
	s.mu.Lock()
	cur, key, base, inBackend := e.cur, e.key, e.base, e.inBackend
	inPlace := cur != nil && (!cur.sealed || e.ptHandles > 0 || e.adoptedPT)
	s.mu.Unlock()
	if inPlace {
		// The kernel writes this file directly: it cannot be replaced. A
		// closed version still waiting for upload in it is moved aside
		// first, so the journal never names bytes that are about to change.
		return s.preservePending(e, false)
	}
	var nb *blob
	var err error
	switch {
	case cur != nil:
		nb, err = s.copyBlob(key, cur, cur.size)
	case inBackend && base.Size > 0 && key != "":
		nb, err = s.fetchBlob(ctx, key, base)
	default:
		nb, err = s.newBlob(key)
	}
	if err != nil {
		return err
	}
	st, err := nb.stat()
	if err != nil {
		nb.discard()
		return stagingErr("stage", key, err)
	}
	s.mu.Lock()
	e.cur = nb
	e.lastSeal = st // same bytes as before: not a change by itself
	if cur != nil {
		s.unrefLocked(cur)
	}
	s.mu.Unlock()
	return nil
}

// Truncate sets the file's size.
func (h *Handle) Truncate(ctx context.Context, size int64) error {
	s, e := h.s, h.e
	if !h.write {
		return backends.Wrap("truncate", h.Key(), backends.ErrPermission, nil)
	}
	s.mu.Lock()
	s.beginOpLocked(e, opTruncate)
	defer s.endOp(e)
	if st := e.stream; st != nil && st.v == nil {
		st.invalidateLocked()
	}
	cur, key := e.cur, e.key
	fresh := false
	if size == 0 && (cur == nil || cur.sealed) && e.ptHandles == 0 {
		// Emptying a file never needs its old bytes.
		s.mu.Unlock()
		nb, err := s.newBlob(key)
		if err != nil {
			return err
		}
		s.mu.Lock()
		e.cur = nb
		if cur != nil {
			s.unrefLocked(cur)
		}
		fresh = true
	} else {
		s.mu.Unlock()
		if err := s.prepareWrite(ctx, e); err != nil {
			return err
		}
		s.mu.Lock()
	}
	b := e.cur
	s.mu.Unlock()
	// A new blob is empty already. Truncating it anyway would cost the
	// writer's close(2) a synchronous writeback of everything it wrote:
	// ext4 marks a file truncated to 0 (even an empty one) for block
	// allocation at its next release (auto_da_alloc), and the release of
	// a passthrough open's backing file happens inside the writer's close.
	if !fresh {
		if err := b.f.Truncate(size); err != nil {
			return stagingErr("truncate", key, err)
		}
	}
	s.mu.Lock()
	b.size = size
	b.counted = min(b.counted, size) // bytes written again past size count again
	e.dirty = true
	e.mtime = time.Now()
	s.mu.Unlock()
	return nil
}

// Flush is close(2): if the file changed, seal its bytes, journal them and
// queue the upload. When Flush returns nil the file will reach the backend
// even if the daemon is killed and restarted on the same staging dir.
func (h *Handle) Flush(ctx context.Context) error {
	_, err := h.s.seal(h.e, false, false)
	return err
}

// Sync is fsync(2): if durable, Flush and wait until this version (or a
// later one) is in the backend; otherwise Flush with the staged bytes and
// their journal record fsynced to the staging disk. Unlike close, the
// writer goes on writing after fsync: a file the kernel writes in place
// (passthrough) is sealed as a copy, so those writes never touch the
// version fsync made safe.
func (h *Handle) Sync(ctx context.Context, durable bool) error {
	gen, err := h.s.seal(h.e, !durable, true)
	if err != nil || !durable {
		return err
	}
	return h.s.waitDurable(ctx, h.e, gen)
}

// Release closes the handle. Staged data of a durable file is freed with
// its last handle.
func (h *Handle) Release() error {
	s, e := h.s, h.e
	s.mu.Lock()
	last := e.key != "" && e.handles == 1
	failed := e.closeFailed
	s.mu.Unlock()
	var err error
	if last && (h.write || h.pt) && !failed {
		// Release without Flush does not happen with FUSE; seal anyway (a
		// no-op when nothing changed) so written bytes are never dropped.
		_, err = s.seal(e, false, false)
	}
	s.mu.Lock()
	s.beginOpLocked(e, opRelease)
	if h.pt {
		e.ptHandles--
		if st := e.stream; st != nil && st.pt && st.v == nil && e.ptHandles == 0 {
			st.invalidateLocked() // no writer left, and no close adopted it
		}
	}
	e.handles--
	if e.handles == 0 {
		s.cond.Broadcast() // WaitUnstaged
	}
	if e.handles == 0 && e.closeFailed {
		s.discardUnclosedLocked(e)
	}
	s.maybeReleaseLocked(e)
	s.endOpLocked(e)
	s.mu.Unlock()
	return err
}

// seal makes the entry's current bytes a journaled version and queues its
// upload, if they changed since the last seal; syncLocal (or
// Options.StagingSync) also fsyncs them to the staging disk. snapshot
// seals a copy when the kernel may go on writing the live blob in place
// (fsync on a passthrough handle). It returns the generation to wait for.
func (s *Store) seal(e *entry, syncLocal, snapshot bool) (uint64, error) {
	s.beginOp(e, opSeal)
	gen, err := s.sealOnce(e, syncLocal, snapshot)
	s.mu.Lock()
	e.closeFailed = err != nil
	s.endOpLocked(e)
	s.mu.Unlock()
	return gen, err
}

// sealOnce is seal's work. Runs in e's opSeal, without s.mu.
func (s *Store) sealOnce(e *entry, syncLocal, snapshot bool) (uint64, error) {
	s.mu.Lock()
	if e.key == "" || e.cur == nil {
		g := e.gen
		s.mu.Unlock()
		return g, nil
	}
	b, key, dirty, last, mtime, gen := e.cur, e.key, e.dirty, e.lastSeal, e.mtime, e.gen
	snapshot = snapshot && e.ptHandles > 0
	s.mu.Unlock()
	st, err := b.stat()
	if err != nil {
		return 0, stagingErr("close", key, err)
	}
	syncLocal = syncLocal || s.opt.StagingSync
	if syncLocal && !snapshot {
		// Before the no-change check: an earlier close may have sealed
		// these bytes without syncing them.
		if err := b.f.Sync(); err != nil {
			return 0, stagingErr("close", key, err)
		}
	}
	if !dirty && st == last {
		if snapshot {
			// Sealed by a close, in place: move it out of the way of
			// the writes that follow this fsync.
			if err := s.preservePending(e, syncLocal); err != nil {
				return 0, err
			}
		}
		s.mu.Lock()
		pend, gen := e.pend, e.gen
		s.mu.Unlock()
		if syncLocal && pend != nil {
			if err := pend.blob.f.Sync(); err != nil {
				return 0, stagingErr("close", key, err)
			}
			return gen, s.jr.put(s.recordOf(e, pend), true)
		}
		return gen, nil
	}
	if st != last && !dirty {
		mtime = time.Now() // written by the kernel directly (passthrough)
	}
	vb := b // the blob holding the version
	if snapshot {
		if vb, err = s.copyBlob(key, b, st.size); err != nil {
			return 0, err
		}
		if syncLocal {
			if err := vb.f.Sync(); err != nil {
				vb.discard()
				return 0, stagingErr("close", key, err)
			}
		}
		vst, err := vb.stat()
		if err != nil {
			vb.discard()
			return 0, stagingErr("close", key, err)
		}
		vb.refs-- // newBlob's reference becomes the version's below
		st.ctime = vst.ctime
	}
	v := &version{gen: gen + 1, blob: vb, size: st.size, ctime: st.ctime, seq: time.Now().UnixNano(), mtime: mtime}
	if err := s.jr.put(record{ID: e.id, Key: key, Blob: vb.name, Size: v.size, Seq: v.seq,
		ModTime: v.mtime.UnixNano(), CTime: v.ctime}, syncLocal); err != nil {
		if vb != b {
			vb.discard()
		}
		return 0, err
	}
	s.crash(crashSealed)
	s.mu.Lock()
	defer s.mu.Unlock()
	b.size = st.size
	if st.size > b.counted {
		s.m.writeBytes.Add(float64(st.size - b.counted))
		b.counted = st.size
	}
	vb.size = st.size
	vb.sealed = true
	vb.refs++
	e.dirty = false
	if vb == b {
		e.lastSeal = st
	} else if bst, err := b.stat(); err == nil {
		e.lastSeal = bst // the live blob as copied: unchanged since
	}
	e.mtime = mtime
	e.gen = v.gen
	old := e.pend
	s.setPendLocked(e, v)
	s.dropVersionLocked(e, old)
	e.failed = nil
	e.attempts = 0
	if st := e.stream; st != nil {
		if st.adoptLocked(v) {
			return v.gen, nil
		}
		if st.v == nil {
			st.invalidateLocked() // too late or too small to stream
		}
	}
	s.enqueueLocked(e)
	return v.gen, nil
}

// recordOf is the journal record of e's version v. Runs in an exclusive
// operation on e (which keeps its key), without s.mu.
func (s *Store) recordOf(e *entry, v *version) record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return record{ID: e.id, Key: e.key, Blob: v.blob.name, Size: v.size, Seq: v.seq,
		ModTime: v.mtime.UnixNano(), CTime: v.ctime}
}

// waitDurable blocks until generation gen of e is durable, has failed, or
// e was removed.
func (s *Store) waitDurable(ctx context.Context, e *entry, gen uint64) error {
	defer s.wakeOnDone(ctx)()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		switch {
		case e.durable >= gen || e.key == "":
			return nil
		case e.failed != nil:
			return e.failed
		case ctx.Err() != nil:
			return ctx.Err()
		case s.closed:
			return backends.Wrap("fsync", e.key, backends.ErrTransient, context.Canceled)
		}
		s.cond.Wait()
	}
}
