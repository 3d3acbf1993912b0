package writeback

import (
	"context"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// Handing a Store's staging dir to another process (a daemon takeover).
//
// What is on disk already says most of it: the journal names every closed
// version not yet durable, and the next Store on the dir uploads them
// (recover). What only memory knows is the files open for writing: their
// live staging files (an unsealed blob, which recover would discard as
// bytes whose close never returned) and what the next close must seal.
// The old Store describes them (Handover), stops (Stop), and the new one
// opens the dir with that description (Options.Handover): the writer's
// next write lands in the same file, its close seals and uploads it.
//
// An upload the old Store had in flight either finished (its record is
// gone) or was cancelled before publishing: a cancelled upload is aborted,
// never committed, so no partial file is published; its record stays and
// the new Store uploads the same bytes again. At worst a version whose
// publish was cut short is published twice, with the same bytes.

// HandoverState is what a Store hands to the Store that takes its staging
// dir over, beside the journal: the files open for writing.
type HandoverState struct {
	Live []LiveFile `json:"live,omitempty"`
	// Known is what the Store knows the backend holds (or will, once the
	// journal is uploaded) of the files not open: the names written or
	// renamed through the mount, which the tree's listing predates.
	Known []backends.ObjectInfo `json:"known,omitempty"`
}

// LiveFile is one open file's staged state.
type LiveFile struct {
	ID   string `json:"id"` // the entry's journal record name
	Key  string `json:"key"`
	Blob string `json:"blob"` // its live staging file under blobs/
	// Sealed: the live file holds a closed version (it is not written
	// again but through passthrough, in place, or after a copy).
	Sealed bool `json:"sealed,omitempty"`
	// Dirty: written through the daemon since the last seal.
	Dirty bool `json:"dirty,omitempty"`
	// Passthrough: the kernel writes Blob directly, through handles that
	// are opened again in the new Store: it stays the file's live data.
	Passthrough bool `json:"passthrough,omitempty"`
	// LastSize and LastCTime are the live file's state at the last seal
	// (or staging): a file the kernel wrote directly differs from it.
	LastSize  int64                `json:"last_size"`
	LastCTime int64                `json:"last_ctime"`
	ModTime   int64                `json:"mtime"` // unix nanoseconds
	Base      *backends.ObjectInfo `json:"base,omitempty"`
}

// Handover describes the files open for writing. Call it with no request
// running on the Store's handles (the mount is frozen); uploads may run.
func (s *Store) Handover() HandoverState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st HandoverState
	for _, e := range s.entries {
		if e.key == "" {
			continue
		}
		if e.handles == 0 || e.cur == nil {
			if e.inBackend || e.pend != nil {
				st.Known = append(st.Known, s.statLocked(e))
			}
			continue
		}
		lf := LiveFile{ID: e.id, Key: e.key, Blob: e.cur.name, Sealed: e.cur.sealed, Dirty: e.dirty, Passthrough: e.ptHandles > 0,
			LastSize: e.lastSeal.size, LastCTime: e.lastSeal.ctime, ModTime: e.mtime.UnixNano()}
		if e.inBackend {
			b := e.base
			lf.Base = &b
		}
		st.Live = append(st.Live, lf)
	}
	return st
}

// Pause prepares a handover: uploaders take no new file, and Pause waits
// for those uploading to finish, until ctx is done. Files closed meanwhile
// are journaled and queued as usual. Resume undoes it; Stop ends the
// Store.
func (s *Store) Pause(ctx context.Context) {
	defer s.wakeOnDone(ctx)()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	s.cond.Broadcast()
	for ctx.Err() == nil && s.uploadingLocked() {
		s.cond.Wait()
	}
}

// Resume lets the uploaders go on after Pause (the handover failed).
func (s *Store) Resume() {
	s.mu.Lock()
	s.stopping = false
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Stop ends the Store for a handover: it pauses (see Pause), then closes,
// which cancels what still uploads (and streams before close). The journal
// and the live staging files stay for the Store that takes the dir over.
func (s *Store) Stop(ctx context.Context) error {
	s.Pause(ctx)
	s.mu.Lock()
	if n := s.countUploadingLocked(); n > 0 {
		s.log.Warn("writeback: handing over with uploads in flight; they are cancelled and the next daemon uploads them again", "files", n)
	}
	s.mu.Unlock()
	return s.Close()
}

func (s *Store) uploadingLocked() bool { return s.countUploadingLocked() > 0 }

func (s *Store) countUploadingLocked() int {
	n := 0
	for _, e := range s.entries {
		if e.up != nil {
			n++
		}
	}
	return n
}

// adoptLive makes the handed-over live files the entries' current data.
// Runs in recover, after the journal, before unreferenced blobs are
// removed; keep collects the blobs to keep.
func (s *Store) adoptLive(keep map[string]bool) {
	for _, info := range s.opt.Handover.Known {
		if s.entries[info.Key] != nil {
			continue // pending in the journal: that is newer
		}
		e := s.newEntryLocked(randomID(), info.Key)
		e.base, e.inBackend, e.mtime = info, true, info.ModTime
		s.entries[info.Key] = e
	}
	for _, lf := range s.opt.Handover.Live {
		e := s.entries[lf.Key]
		if e == nil {
			e = s.newEntryLocked(lf.ID, lf.Key)
			if lf.Base != nil {
				e.base, e.inBackend = *lf.Base, true
			}
			s.entries[lf.Key] = e
		}
		if e.cur == nil || e.cur.name != lf.Blob {
			bl, err := s.openBlob(lf.Blob)
			if err != nil {
				// Only a hand that removed it: the writer's next write
				// fails (EIO) rather than writing into nothing.
				s.log.Error("writeback: a file open for writing lost its staged data in the handover", "key", lf.Key, "err", err)
				continue
			}
			bl.sealed = lf.Sealed
			if e.cur != nil {
				s.unrefLocked(e.cur) // the journal's version keeps its own reference
			}
			e.cur = bl
		}
		e.dirty = lf.Dirty
		e.adoptedPT = lf.Passthrough
		e.lastSeal = blobStat{size: lf.LastSize, ctime: lf.LastCTime}
		e.mtime = time.Unix(0, lf.ModTime)
		keep[lf.Blob] = true
	}
}

// liveBlob reports whether a handed-over open file writes blob name.
func (s *Store) liveBlob(name string) bool {
	if s.opt.Handover == nil {
		return false
	}
	for _, lf := range s.opt.Handover.Live {
		if lf.Blob == name {
			return true
		}
	}
	return false
}
