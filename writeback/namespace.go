package writeback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// Namespace changes (unlink, rename, mkdir, rmdir) reach the backend before
// they return. Each first quiesces the entries it touches: no upload of
// them runs while it works, so an upload under the old name can never land
// after the change.

// quiesce stops e's upload or stream and keeps new ones from starting until
// resume. An upload already publishing (committing) is waited for, never
// cancelled: a store may finish a request its client gave up on, and the
// object would land after the unlink or rename that follows. Needs
// s.nsMu, and no operation on e.
func (s *Store) quiesce(e *entry) {
	if e == nil {
		return
	}
	s.mu.Lock()
	e.paused++
	up, st := e.up, e.stream
	publishing := false
	if up != nil {
		if up.committing {
			publishing = true
		} else {
			up.cancel() // under s.mu: put checks before it commits
		}
	}
	if st != nil {
		publishing = publishing || st.committing
		st.invalidateLocked()
	}
	s.mu.Unlock()
	if publishing {
		s.crash(crashCommitAwaited)
	}
	if up != nil {
		<-up.done
	}
	if st != nil {
		<-st.done
	}
}

func (s *Store) resume(e *entry) {
	if e == nil {
		return
	}
	s.mu.Lock()
	e.paused--
	s.enqueueLocked(e)
	s.mu.Unlock()
}

// CheckName refuses (ENAMETOOLONG) a new name the backend cannot store,
// so that no file is created that could never be uploaded.
func (s *Store) CheckName(key string) error {
	return backends.CheckName(s.b, "create", key)
}

// Remove deletes the file key: its pending upload is cancelled, and what
// the backend holds is deleted. Open handles keep working on a detached
// copy that is never uploaded.
func (s *Store) Remove(ctx context.Context, key string) error {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	s.mu.Lock()
	e := s.entries[key]
	if e != nil {
		// From here to the end, an Open of key waits (see keepForHandles).
		e.removing = true
		defer s.endRemoving(e) // after detach
	}
	s.mu.Unlock()
	s.quiesce(e)
	defer s.resume(e)
	// Journal first: a crash after the record is gone but before the
	// delete leaves the last uploaded version (the unlink never returned);
	// the other order would upload a removed file again at restart.
	if e != nil {
		if err := s.unjournal(e); err != nil {
			return err
		}
		s.crash(crashUnjournaled)
	}
	// A name the store cannot hold was never uploaded: nothing to delete.
	if err := s.CheckName(key); err != nil {
		if e != nil {
			s.detach(e)
		}
		return nil
	}
	// Descriptors still open read the file's data after the unlink: if
	// only the backend holds it, copy it to staging first.
	if e != nil {
		if err := s.keepForHandles(ctx, e); err != nil {
			s.rejournal(e)
			return err
		}
	}
	if err := s.b.Delete(ctx, key); err != nil && !errors.Is(err, backends.ErrNotExist) {
		if e != nil {
			s.rejournal(e)
		}
		return err
	}
	if e != nil {
		s.detach(e)
	}
	return nil
}

// keepForHandles gives e a staged copy of what the backend holds under
// its key when descriptors are open on e and nothing local holds its
// bytes (the file was durable and its staged copy freed): the backend
// object is about to be deleted or replaced (unlink, rename over it), and
// POSIX has those descriptors go on reading the file's data. The copy is
// never journaled nor uploaded; it is freed at the last release (see
// maybeReleaseLocked), and a crash leaves it to recover, which discards
// blobs no record names. It costs a download of the file, on the staging
// disk (not in memory), during the unlink. The caller set e.removing
// before looking at e, so no Open adds a descriptor this decision does not
// see. Needs s.nsMu, e quiesced.
func (s *Store) keepForHandles(ctx context.Context, e *entry) error {
	s.beginOp(e, opNamespace)
	defer s.endOp(e)
	s.mu.Lock()
	need := e.handles > 0 && e.cur == nil && e.inBackend && e.key != ""
	key, base := e.key, e.base
	s.mu.Unlock()
	if !need {
		return nil
	}
	var nb *blob
	var err error
	if base.Size > 0 {
		nb, err = s.fetchBlob(ctx, key, base)
	} else {
		nb, err = s.newBlob(key)
	}
	if err != nil {
		return err
	}
	st, err := nb.stat()
	if err != nil {
		nb.discard()
		return stagingErr("unlink", key, err)
	}
	s.crash(crashKept)
	s.mu.Lock()
	e.cur = nb
	e.lastSeal = st // the backend's bytes: not a change
	s.mu.Unlock()
	return nil
}

// endRemoving ends what keepForHandles began: Opens that waited go on
// (and fail if e lost its name meanwhile, see Open).
func (s *Store) endRemoving(e *entry) {
	s.mu.Lock()
	e.removing = false
	s.cond.Broadcast()
	s.mu.Unlock()
}

// rejournal puts back the record unjournal removed, after a failed delete.
func (s *Store) rejournal(e *entry) {
	s.beginOp(e, opNamespace)
	defer s.endOp(e)
	s.mu.Lock()
	pend := e.pend
	s.mu.Unlock()
	if pend == nil {
		return
	}
	r := s.recordOf(e, pend)
	if err := s.jr.put(r, false); err != nil {
		s.log.Error("writeback: cannot restore a journal record after a failed unlink; the file is uploaded, but not after a crash", "key", r.Key, "err", err)
	}
}

// unjournal removes e's record while keeping its pending version in
// memory (a failed delete leaves the file staged, uploaded at its next
// close or by the queue). Needs s.nsMu, e quiesced.
func (s *Store) unjournal(e *entry) error {
	s.beginOp(e, opNamespace)
	defer s.endOp(e)
	s.mu.Lock()
	pend, key := e.pend, e.key
	s.mu.Unlock()
	if pend == nil {
		return nil
	}
	if err := s.jr.remove(e.id); err != nil {
		return stagingErr("remove", key, err)
	}
	return nil
}

// detach forgets e's key and pending upload. Needs s.nsMu, e quiesced.
func (s *Store) detach(e *entry) {
	s.beginOp(e, opNamespace)
	defer s.endOp(e)
	s.mu.Lock()
	if s.entries[e.key] == e {
		delete(s.entries, e.key)
	}
	e.key = ""
	old := e.pend
	s.setPendLocked(e, nil)
	s.dropVersionLocked(e, old)
	e.failed = nil
	s.maybeReleaseLocked(e)
	s.cond.Broadcast()
	s.mu.Unlock()
	if err := s.jr.remove(e.id); err != nil {
		s.log.Warn("writeback: cannot remove a journal record", "record", e.id, "err", err)
	}
}

// rekey moves e to key to, rewriting its journal record first if it has a
// pending version. Needs s.nsMu, e quiesced.
func (s *Store) rekey(e *entry, to string) error {
	s.beginOp(e, opNamespace)
	defer s.endOp(e)
	s.mu.Lock()
	v := e.pend
	if v != nil {
		v.seq = time.Now().UnixNano() // newer than any record it replaces
	}
	s.mu.Unlock()
	if v != nil {
		r := s.recordOf(e, v)
		r.Key = to
		if err := s.jr.put(r, false); err != nil {
			return err
		}
		s.crash(crashRekeyed)
	}
	s.mu.Lock()
	if s.entries[e.key] == e {
		delete(s.entries, e.key)
	}
	e.key = to
	e.base.Key = to
	e.failed = nil
	e.attempts = 0
	s.entries[to] = e
	s.mu.Unlock()
	return nil
}

// Rename moves the file from to to, replacing a file at to. A file with a
// pending upload is re-keyed (its old name is deleted from the backend);
// a durable file is renamed in the backend (server-side where the backend
// can, else copy and delete).
func (s *Store) Rename(ctx context.Context, from, to string) error {
	if from == to {
		return nil
	}
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	s.mu.Lock()
	src, dst := s.entries[from], s.entries[to]
	if dst != nil {
		// From here to the end, an Open of to waits (see keepForHandles).
		dst.removing = true
		defer s.endRemoving(dst) // after detach
	}
	s.mu.Unlock()
	s.quiesce(src)
	defer s.resume(src)
	s.quiesce(dst)
	defer s.resume(dst)
	if dst != nil {
		// Descriptors open on the file replaced keep reading it.
		if err := s.keepForHandles(ctx, dst); err != nil {
			return err
		}
	}

	s.mu.Lock()
	// Staged bytes not yet durable (or perhaps changed by the kernel
	// through passthrough) move with the entry and are uploaded under the
	// new name; a durable file is moved in the backend.
	staged := src != nil && src.cur != nil
	pending := staged && (src.pend != nil || src.dirty || src.ptHandles > 0)
	s.mu.Unlock()
	if !pending {
		err := s.moveObject(ctx, from, to)
		if errors.Is(err, backends.ErrNotExist) && staged {
			pending = true // never uploaded: nothing to move
		} else if err != nil {
			return err
		} else if src != nil {
			if err := s.rekey(src, to); err != nil {
				return err
			}
		}
	}
	if pending {
		if err := s.rekey(src, to); err != nil {
			return err
		}
		s.mu.Lock()
		if src.pend == nil {
			src.dirty = true // uploaded under the new name at its next close
		}
		s.mu.Unlock()
		if err := s.b.Delete(ctx, from); err != nil && !errors.Is(err, backends.ErrNotExist) {
			s.log.Warn("writeback: rename left the old name in the backend", "from", from, "to", to, "err", err)
		}
	}
	if dst != nil {
		s.detach(dst)
	}
	return nil
}

// RenameDir moves directory from (with everything under it) to to, which
// must not exist or be an empty directory.
func (s *Store) RenameDir(ctx context.Context, from, to string) error {
	if from == to {
		return nil
	}
	if from == "" || strings.HasPrefix(to+"/", from+"/") {
		return backends.Wrap("rename", from, backends.ErrInvalid, fmt.Errorf("cannot move a directory into itself (%q)", to))
	}
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	s.mu.Lock()
	var moved []*entry
	var oldKeys []string
	for k, e := range s.entries {
		if strings.HasPrefix(k, from+"/") {
			moved = append(moved, e)
			oldKeys = append(oldKeys, k)
		}
	}
	s.mu.Unlock()
	for _, e := range moved {
		s.quiesce(e)
		defer s.resume(e)
	}
	// Journal first: after a crash, pending files go where the user last put them.
	// On failure staged files keep their old names. (Objects already moved
	// by a copy-and-delete backend stay moved.)
	undo := func(n int) {
		for i := range n {
			if err := s.rekey(moved[i], oldKeys[i]); err != nil {
				s.log.Error("writeback: cannot undo a failed directory rename", "key", oldKeys[i], "err", err)
			}
		}
	}
	for i, e := range moved {
		if err := s.rekey(e, to+strings.TrimPrefix(oldKeys[i], from)); err != nil {
			undo(i)
			return err
		}
	}
	if err := s.moveDir(ctx, from, to); err != nil {
		undo(len(moved))
		return err
	}
	return nil
}

// moveDir moves a directory tree in the backend.
func (s *Store) moveDir(ctx context.Context, from, to string) error {
	if r, ok := backends.As[backends.Renamer](s.b); ok {
		// POSIX lets a rename replace an empty directory; the store's
		// rename does not.
		if err := s.b.Delete(ctx, to); err != nil && !errors.Is(err, backends.ErrNotExist) {
			return err
		}
		err := r.Rename(ctx, from, to)
		if errors.Is(err, backends.ErrNotExist) {
			// The directory existed only here (empty, or with staged files).
			return s.MakeDir(ctx, to)
		}
		return err
	}
	var keys []backends.ObjectInfo
	opt := backends.ListOptions{Prefix: from + "/", Recursive: true}
	for {
		page, err := s.b.List(ctx, opt)
		if err != nil {
			return err
		}
		keys = append(keys, page.Objects...)
		if page.NextToken == "" {
			break
		}
		opt.Token = page.NextToken
	}
	if err := s.MakeDir(ctx, to); err != nil {
		return err
	}
	for _, o := range keys {
		dst := to + strings.TrimPrefix(o.Key, from)
		if o.IsDir {
			if err := s.MakeDir(ctx, dst); err != nil {
				return err
			}
			continue
		}
		if err := s.moveObject(ctx, o.Key, dst); err != nil {
			return err
		}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		if keys[i].IsDir {
			s.b.Delete(ctx, keys[i].Key)
		}
	}
	if err := s.b.Delete(ctx, from); err != nil && !errors.Is(err, backends.ErrNotExist) {
		return err
	}
	return nil
}

// moveObject renames one object in the backend: server-side rename, else
// server-side copy and delete, else download, upload and delete.
func (s *Store) moveObject(ctx context.Context, from, to string) error {
	if r, ok := backends.As[backends.Renamer](s.b); ok {
		return r.Rename(ctx, from, to)
	}
	if c, ok := backends.As[backends.Copier](s.b); ok {
		if _, err := c.Copy(ctx, from, to); err != nil {
			return err
		}
		return s.b.Delete(ctx, from)
	}
	st, err := s.b.Stat(ctx, from)
	if err != nil {
		return err
	}
	r, err := s.b.Read(ctx, from, backends.ReadOptions{Length: -1})
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := s.b.Write(ctx, to, backends.WriteOptions{SizeHint: st.Size})
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(onlyWriter{w}, r, make([]byte, 1<<20)); err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return err
	}
	if _, err := w.Commit(ctx); err != nil {
		return err
	}
	return s.b.Delete(ctx, from)
}

// MakeDir creates directory key in the backend where the backend has
// directories (or markers); elsewhere directories exist only in the mount
// until a file is uploaded under them.
func (s *Store) MakeDir(ctx context.Context, key string) error {
	if d, ok := backends.As[backends.DirMaker](s.b); ok {
		return d.MakeDir(ctx, key)
	}
	return nil
}

// RemoveDir deletes the empty directory key from the backend (the caller
// checked it is empty). A directory the backend never held is fine.
func (s *Store) RemoveDir(ctx context.Context, key string) error {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if err := s.b.Delete(ctx, key); err != nil && !errors.Is(err, backends.ErrNotExist) {
		return err
	}
	return nil
}
