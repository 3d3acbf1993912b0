package writeback

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Set aside: a closed file that can never be uploaded (its staged bytes
// changed or vanished, or the backend refuses it for good) must neither
// block the channel nor fail every later start. Its record and data move
// to setaside/ under the Store's staging dir, where an operator can look at
// them; the log, the permanent-failure metric and this run's Drain (so
// `mlfsd run` exits 3) report it once.

func (s *Store) asideDir() string { return filepath.Join(s.dir, "setaside") }

// setAside moves record r, and the blob it names, out of the journal.
func (s *Store) setAside(r record, why error) {
	dir := s.asideDir()
	kept := dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		kept = "(nowhere: " + err.Error() + ")"
	}
	blob := filepath.Join(s.blobDir, r.Blob)
	if err := os.Rename(blob, filepath.Join(dir, r.Blob)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("writeback: cannot move staged data aside", "key", r.Key, "blob", blob, "err", err)
	}
	if err := os.Rename(s.jr.path(r.ID), filepath.Join(dir, r.ID+".json")); err != nil {
		// Write the record there instead (it may come from memory), then
		// make sure the journal no longer holds it.
		if err := s.putAsideRecord(r); err != nil {
			s.log.Warn("writeback: cannot keep a set-aside record", "key", r.Key, "err", err)
		}
		if err := s.jr.remove(r.ID); err != nil {
			s.log.Error("writeback: cannot remove a journal record that cannot be honoured", "key", r.Key, "record", s.jr.path(r.ID), "err", err)
		}
	}
	s.log.Error("writeback: a closed file cannot be uploaded; set aside, the channel goes on",
		"key", r.Key, "kept_in", kept, "err", why)
	s.m.permanentFails.Inc()
	s.mu.Lock()
	s.aside = append(s.aside, fmt.Sprintf("%v (kept in %s)", why, kept))
	s.mu.Unlock()
}

// setAsideFile moves an unreadable journal file out of the journal.
func (s *Store) setAsideFile(name string, why error) {
	dir := s.asideDir()
	kept := filepath.Join(dir, name)
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = os.Rename(filepath.Join(s.jr.dir, name), kept)
	}
	if err != nil {
		kept = "(left in the journal: " + err.Error() + ")"
	}
	s.log.Error("writeback: an unreadable journal record; set aside, the channel goes on", "record", name, "kept_in", kept, "err", why)
	s.m.permanentFails.Inc()
	s.mu.Lock()
	s.aside = append(s.aside, fmt.Sprintf("%v (kept in %s)", why, kept))
	s.mu.Unlock()
}

// linkedAside says whether b's file is also linked into setaside/: a
// set-aside interrupted by a crash (the link changed the blob's ctime, not
// its bytes), so b still holds its sealed version and is uploaded again.
func (s *Store) linkedAside(b *blob) bool {
	aside, err := os.Stat(filepath.Join(s.asideDir(), b.name))
	if err != nil {
		return false
	}
	own, err := b.f.Stat()
	return err == nil && os.SameFile(aside, own)
}

func (s *Store) putAsideRecord(r record) error {
	j := journal{dir: s.asideDir(), sync: s.jr.sync}
	return j.put(r, false)
}

// setAsideVersion sets aside e's pending version v after a permanent
// upload failure: its data is linked into setaside/ (the entry keeps
// its staged copy) and its record leaves the journal. Runs in an exclusive
// operation on e, without s.mu.
func (s *Store) setAsideVersion(e *entry, v *version, why error) {
	r := s.recordOf(e, v)
	dir := s.asideDir()
	if err := os.MkdirAll(dir, 0o700); err == nil {
		before, errBefore := v.blob.stat()
		if err := os.Link(v.blob.path, filepath.Join(dir, v.blob.name)); err != nil && !errors.Is(err, os.ErrExist) {
			s.log.Warn("writeback: cannot keep the data of a file set aside", "key", r.Key, "err", err)
		}
		after, errAfter := v.blob.stat()
		s.mu.Lock()
		// The link changed the live blob's ctime, not its bytes: left
		// as a change, the writer's last close sealed the same bytes
		// again, and they failed and were set aside a second time.
		// Only without a passthrough writer, whose writes the ctime is
		// the sole witness of (writes through the daemon set dirty).
		if errBefore == nil && errAfter == nil && e.cur == v.blob && e.ptHandles == 0 &&
			e.lastSeal == before && after.size == before.size {
			e.lastSeal = after
		}
		s.mu.Unlock()
	}
	if err := s.putAsideRecord(r); err != nil {
		s.log.Warn("writeback: cannot keep a set-aside record", "key", r.Key, "err", err)
	}
	s.crash(crashSetAside)
	if err := s.jr.remove(r.ID); err != nil {
		s.log.Error("writeback: cannot remove a journal record that cannot be honoured", "key", r.Key, "err", err)
	}
	s.log.Error("writeback: a closed file cannot be uploaded; set aside, the channel goes on",
		"key", r.Key, "kept_in", dir, "err", why)
}
