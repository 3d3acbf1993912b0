package writeback

import (
	"context"
	"sync"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// The write-back entry: one file's state, one lock, named states and
// transitions. Everything about an entry lives in this file; the
// operations that drive it (Handle, seal, upload, namespace changes) call
// the transitions below.
//
// Lock order: Store.nsMu, then Store.mu. Store.mu is the one lock of every
// entry: each field of entry, version, upload and streamer is read and
// written holding it, and it is never held across a backend call or a
// read or write of a file (only fstat and close run under it).
// nsMu serialises namespace changes (rename, remove) and is held across
// backend calls.
//
// Work on an entry's bytes (reads and writes of the live blob, staging,
// sealing, truncation, renames, removals) happens outside Store.mu, so an
// entry also has an operation state, changed only under Store.mu:
//
//	idle       no operation runs
//	io(n)      n reads or writes use cur's file; cur is not replaced
//	           (beginIOLocked, endIOLocked)
//	op(name)   one exclusive operation (opStage, opSeal, ...) owns the
//	           entry's data: cur, its bytes and the pending version change
//	           only inside one (beginOpLocked, endOpLocked)
//
// A waiting exclusive operation keeps new io from starting, so writes
// cannot starve a close. Waiting is on the entry's own condition variable
// (e.idle, on Store.mu). An operation never begins another on the same
// entry; several entries are owned at once only under nsMu.
//
// The life of one version of a file, and where a crash can interrupt it.
//
//	staged     bytes written to the entry's live blob (cur); nothing journaled
//	           for them: a crash discards them, the last closed version stays.
//	sealed     close (Flush) or fsync (Sync) wrote a journal record naming the
//	           blob: from here the version survives a crash (crashSealed).
//	preserved  a writer reopened the file while the kernel still writes the
//	           sealed blob in place (passthrough): the version is copied to a
//	           blob of its own and the record re-pointed before any byte of
//	           the live blob changes (crashPreserveCopied, crashPreserved).
//	uploading  an uploader (upload) or a stream sends it; an unlink or
//	           rename cancels it (nothing is published).
//	committing the publishing request (Commit) is sent: it cannot be
//	           recalled (a store may finish a request its client gave up
//	           on), so an unlink or rename waits for it (crashCommitAwaited)
//	           and only closing the Store cancels it.
//	committed  the backend holds the version (crashCommitted); its record
//	           is removed after (crashRecordRemoved).
//	rekeyed    a rename re-journals a pending version under its new name
//	           before the old object is deleted (crashRekeyed).
//	unjournaled an unlink removes the record before deleting the object
//	           (crashUnjournaled): a crash leaves the last uploaded version.
//	kept       an unlink of, or a rename over, a file that descriptors hold
//	           open while only the backend has its bytes (durable, staged
//	           copy freed) first fetches them into a staged copy that only
//	           those descriptors use: never journaled, never uploaded, freed
//	           at the last release (keepForHandles). The copy is made before
//	           the object is deleted or replaced (crashKept): a crash there
//	           leaves the last uploaded version, and the restart discards
//	           the copy like any blob no record names.
//	set aside  a record that cannot be honoured (its blob changed or is
//	           gone, or the backend refuses the name for good) is moved to
//	           setaside/ with its data and reported; it never blocks the
//	           channel or its next start. The data is linked there before
//	           the record leaves the journal (crashSetAside): a restart in
//	           between uploads the version again (see linkedAside).
//
// Open and truncate publish nothing: only a seal makes a version, and only
// the last sealed version of a key is ever uploaded.

// entry is the state of one file the Store has touched. The operation
// state (above) says which fields an operation may rely on outside s.mu.
type entry struct {
	id   string     // journal record name; immutable
	idle *sync.Cond // on Store.mu: broadcast when op or io ends; immutable

	// Operation state.
	op        string // GUARDED_BY(Store.mu): "" or the exclusive operation running (op*)
	io        int    // GUARDED_BY(Store.mu): reads and writes of cur's file in progress
	opWaiting int    // GUARDED_BY(Store.mu): exclusive operations waiting to begin

	key       string              // GUARDED_BY(Store.mu): "" once removed; changes only in opNamespace
	base      backends.ObjectInfo // GUARDED_BY(Store.mu): what the backend holds, when inBackend
	inBackend bool                // GUARDED_BY(Store.mu): something may exist under key in the backend
	cur       *blob               // GUARDED_BY(Store.mu): live staged data, nil when not staged; replaced only in an op
	dirty     bool                // GUARDED_BY(Store.mu): cur changed since the last seal
	mtime     time.Time           // GUARDED_BY(Store.mu)
	handles   int                 // GUARDED_BY(Store.mu)
	gen       uint64              // GUARDED_BY(Store.mu): generation of the latest seal
	pend      *version            // GUARDED_BY(Store.mu): latest sealed version not yet durable
	durable   uint64              // GUARDED_BY(Store.mu): latest generation durable in the backend
	up        *upload             // GUARDED_BY(Store.mu): upload in flight
	queued    bool                // GUARDED_BY(Store.mu)
	paused    int                 // GUARDED_BY(Store.mu): namespace changes in progress
	attempts  int                 // GUARDED_BY(Store.mu): failed attempts of pend
	failed    error               // GUARDED_BY(Store.mu): pend could not be uploaded
	stream    *streamer           // GUARDED_BY(Store.mu): upload started before close
	// ptHandles counts open handles whose I/O the kernel sends straight
	// to cur (FUSE passthrough). While it is non-zero, cur is never
	// replaced (the kernel holds its fd) and is written in place even
	// when sealed; uploads then check, before publishing, that the blob
	// did not change since its seal (see blobStat). GUARDED_BY(Store.mu)
	ptHandles int
	// closeFailed: the last seal failed (full staging disk); the last
	// release then drops the unsealed bytes instead of sealing them.
	// GUARDED_BY(Store.mu)
	closeFailed bool
	lastSeal    blobStat // GUARDED_BY(Store.mu): cur's state at the last seal or staging
	// adoptedPT: cur was handed over by a Store whose passthrough handles
	// the kernel still writes it through, in place (handover.go); it is
	// never replaced until those handles are opened again here (and
	// counted in ptHandles). GUARDED_BY(Store.mu)
	adoptedPT bool
	// removing: an unlink, or a rename over the file, is deciding whether
	// open descriptors need a copy (keepForHandles) and changing the
	// backend; an Open racing it waits, so that no descriptor is opened
	// on the file after that decision (it would read a deleted object).
	// GUARDED_BY(Store.mu)
	removing bool
}

// Exclusive operations on an entry (entry.op), named for diagnostics.
const (
	opStage       = "stage"       // make cur writable (copy, fetch, create)
	opTruncate    = "truncate"    // set cur's size
	opSeal        = "seal"        // close/fsync: journal a version
	opPassthrough = "passthrough" // grant a passthrough handle
	opRelease     = "release"     // a handle's last release
	opComplete    = "complete"    // record an upload's end
	opStreamEnd   = "stream-end"  // a stream that adopted nothing ends
	opNamespace   = "namespace"   // rename or remove (Store.nsMu held)
)

// newEntryLocked makes an entry for key. Needs s.mu.
func (s *Store) newEntryLocked(id, key string) *entry {
	return &entry{id: id, key: key, idle: sync.NewCond(&s.mu)}
}

// beginOpLocked waits until e is idle and makes op its one exclusive
// operation. Needs s.mu (released while waiting).
func (s *Store) beginOpLocked(e *entry, op string) {
	e.opWaiting++
	for e.op != "" || e.io > 0 {
		e.idle.Wait()
	}
	e.opWaiting--
	e.op = op
}

// endOpLocked ends e's exclusive operation. Needs s.mu.
func (s *Store) endOpLocked(e *entry) {
	e.op = ""
	e.idle.Broadcast()
}

// beginOp and endOp are beginOpLocked and endOpLocked taking s.mu.
func (s *Store) beginOp(e *entry, op string) {
	s.mu.Lock()
	s.beginOpLocked(e, op)
	s.mu.Unlock()
}

func (s *Store) endOp(e *entry) {
	s.mu.Lock()
	s.endOpLocked(e)
	s.mu.Unlock()
}

// beginIOLocked waits until no exclusive operation runs or waits, and
// counts a read or write of cur's file. Needs s.mu (released while
// waiting).
func (s *Store) beginIOLocked(e *entry) {
	for e.op != "" || e.opWaiting > 0 {
		e.idle.Wait()
	}
	e.io++
}

// endIOLocked ends a read or write. Needs s.mu.
func (s *Store) endIOLocked(e *entry) {
	e.io--
	if e.io == 0 && e.opWaiting > 0 {
		e.idle.Broadcast()
	}
}

// Transitions of the entry's data: each needs s.mu; those that replace
// cur or the pending version also need an exclusive operation on e.

// entryLocked returns the entry of key, creating it from base (what the
// backend holds; nil when nothing is there).
func (s *Store) entryLocked(key string, base *backends.ObjectInfo) *entry {
	e := s.entries[key]
	if e == nil {
		e = s.newEntryLocked(randomID(), key)
		e.mtime = time.Now()
		if base != nil {
			e.base, e.inBackend, e.mtime = *base, true, base.ModTime
		}
		s.entries[key] = e
	}
	return e
}

// unrefLocked drops one reference to b, deleting its file at zero.
func (s *Store) unrefLocked(b *blob) {
	b.refs--
	if b.refs == 0 {
		b.discard()
	}
}

// setPendLocked replaces e.pend, keeping the pending counters; the caller
// releases the old version with dropVersionLocked.
func (s *Store) setPendLocked(e *entry, v *version) {
	if e.pend != nil {
		s.pending.files--
		s.pending.bytes -= e.pend.size
	}
	e.pend = v
	if v != nil {
		s.pending.files++
		s.pending.bytes += v.size
	}
	s.m.queueDepth.Set(float64(s.pending.files))
	s.m.stagedBytes.Set(float64(s.pending.bytes))
}

// dropVersionLocked releases v's blob once neither pend nor an upload
// names it.
func (s *Store) dropVersionLocked(e *entry, v *version) {
	if v == nil || e.pend == v || (e.up != nil && e.up.v == v) || (e.stream != nil && e.stream.v == v) {
		return
	}
	s.unrefLocked(v.blob)
}

// maybeReleaseLocked frees the staged data of an entry nobody has open
// once it is durable (or the entry was removed). Needs s.mu, in an
// exclusive operation on e.
func (s *Store) maybeReleaseLocked(e *entry) {
	if e.handles > 0 || e.cur == nil {
		return
	}
	if e.key != "" && (e.dirty || e.pend != nil) {
		return
	}
	if e.key == "" && e.pend != nil {
		old := e.pend
		s.setPendLocked(e, nil)
		s.dropVersionLocked(e, old)
	}
	s.unrefLocked(e.cur)
	e.cur = nil
	e.dirty = false
	s.cond.Broadcast() // WaitUnstaged
}

// refreshLocked updates cur's size from the file when the kernel may have
// written it directly (passthrough).
func (s *Store) refreshLocked(e *entry) {
	if e.ptHandles > 0 && e.cur != nil {
		if st, err := e.cur.stat(); err == nil {
			e.cur.size = st.size
		}
	}
}

// discardUnclosedLocked drops bytes written since the last seal when the
// file's last close failed (a full staging disk) and nobody has it open:
// they were never closed, so they are never published, and a full disk
// needs the space. The file reads as its last closed version again (in
// both I/O modes). Needs s.mu, in an exclusive operation on e.
func (s *Store) discardUnclosedLocked(e *entry) {
	e.closeFailed = false
	cur := e.cur
	if cur == nil || (e.pend != nil && e.pend.blob == cur) {
		return // nothing staged, or written in place over a sealed version
	}
	if st := e.stream; st != nil && st.v == nil {
		st.invalidateLocked()
	}
	s.log.Warn("writeback: dropping the bytes of a file whose close failed", "key", e.key)
	e.cur = nil
	e.dirty = false
	if v := e.pend; v != nil {
		v.blob.refs++
		e.cur = v.blob
		e.lastSeal = blobStat{size: v.size, ctime: v.ctime}
	}
	s.unrefLocked(cur)
}

// version is one sealed state of an entry: what a close saw. Its fields
// are set before it is published to the entry and then change only under
// Store.mu (seq, when a rename re-journals it).
type version struct {
	gen   uint64
	blob  *blob
	size  int64
	ctime int64 // the blob's change time at seal (see blobStat)
	seq   int64
	mtime time.Time
}

// upload is an upload in flight (state uploading, then committing).
type upload struct {
	v      *version
	key    string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// committing: the request that publishes the object (Commit) is
	// about to be sent, or was. Cancelling it then no longer tells
	// whether the object lands (a store may finish a request its client
	// gave up on), so quiesce waits for it instead. GUARDED_BY(Store.mu)
	committing bool
}

// Crash points: the test hook Options.crashHook is called at each, with
// the Store's state on disk exactly as a SIGKILL there would leave it.
const (
	crashStaged         = "staged"          // data written, not sealed
	crashSealed         = "sealed"          // record written, memory not updated
	crashPreserveCopied = "preserve-copied" // copy of a sealed version made, record not re-pointed
	crashPreserved      = "preserved"       // record re-pointed to the copy
	crashCommitted      = "committed"       // backend holds the version, record still there
	crashRecordRemoved  = "record-removed"  // record of a durable version removed
	crashRekeyed        = "rekeyed"         // rename: record re-keyed, old name not yet deleted
	crashUnjournaled    = "unjournaled"     // remove: record gone, backend object not yet deleted
	crashCommitAwaited  = "commit-awaited"  // unlink/rename waits for a publish in flight
	crashSetAside       = "set-aside"       // refused version copied to setaside/, record not yet removed
	crashKept           = "kept"            // unlink/rename over a file open: its bytes fetched for the open descriptors, object not yet deleted
)

// crash calls the test hook at point p.
func (s *Store) crash(p string) {
	if s.opt.crashHook != nil {
		s.opt.crashHook(p)
	}
}

// journaledLocked says whether b holds e's pending, journaled version.
// Needs s.mu.
func (s *Store) journaledLocked(e *entry, b *blob) bool {
	return e.pend != nil && e.pend.blob == b
}

// samePendLocked says whether v is (a copy of) e's pending version: a
// preserved version keeps its generation. Needs s.mu.
func samePendLocked(e *entry, v *version) bool {
	return e.pend != nil && (e.pend == v || e.pend.gen == v.gen)
}

// preservePendingLocked moves e's pending version out of the live blob
// when that blob is about to be written in place (the kernel writes it
// directly through passthrough, so it cannot be replaced): the version is
// copied to a sealed blob of its own and its record re-pointed, so a crash
// during the rewrite still finds the closed bytes. sync also fsyncs the
// copy and the record. Runs in an exclusive operation on e, without s.mu.
func (s *Store) preservePending(e *entry, sync bool) error {
	s.mu.Lock()
	v, key, cur := e.pend, e.key, e.cur
	s.mu.Unlock()
	if v == nil || cur == nil || v.blob != cur || key == "" {
		return nil
	}
	sync = sync || s.opt.StagingSync
	nb, err := s.copyBlob(key, cur, v.size)
	if err != nil {
		return err
	}
	if sync {
		if err := nb.f.Sync(); err != nil {
			nb.discard()
			return stagingErr("close", key, err)
		}
	}
	st, err := nb.stat()
	if err != nil {
		nb.discard()
		return stagingErr("close", key, err)
	}
	nv := &version{gen: v.gen, blob: nb, size: v.size, ctime: st.ctime, seq: v.seq, mtime: v.mtime}
	s.crash(crashPreserveCopied)
	if err := s.jr.put(s.recordOf(e, nv), sync); err != nil {
		nb.discard()
		return err
	}
	s.crash(crashPreserved)
	s.mu.Lock()
	defer s.mu.Unlock()
	nb.sealed = true // its one reference is the version's
	s.setPendLocked(e, nv)
	s.dropVersionLocked(e, v)
	return nil
}
