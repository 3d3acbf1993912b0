package writeback

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
//	committed  the backend holds the version (crashCommitted); its record
//	           is removed after (crashRecordRemoved).
//	set aside  a record that cannot be honoured (its blob changed or is
//	           gone, or the backend refuses the name for good) is moved to
//	           setaside/ with its data and reported; it never blocks the
//	           channel or its next start.
//
// Open and truncate publish nothing: only a seal makes a version, and only
// the last sealed version of a key is ever uploaded.

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
// copy and the record. Needs e.mu exclusively.
func (s *Store) preservePendingLocked(e *entry, sync bool) error {
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
