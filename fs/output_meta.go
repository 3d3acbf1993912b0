package fs

import (
	"context"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// nodeMeta is what the output tree keeps of a node's metadata for the
// life of the mount: mode bits, owner, and times. Stores keep no owners
// and (except NAS and HDFS) no modes, so after a remount what the backend
// holds gets the store's mode or a default and the tree's owner.
type nodeMeta struct {
	mode     uint32 // permission bits with setuid, setgid and sticky
	uid, gid uint32
	atime    time.Time // zero: the same as mtime
	mtime    time.Time // directories and links (files: see outFile.stat)
	ctime    time.Time // last change of metadata; never shown before mtime
	gone     bool      // unlinked or replaced by a rename: open descriptors see nlink 0
}

// nlink is the link count of a non-directory.
func (m *nodeMeta) nlink() uint32 {
	if m.gone {
		return 0
	}
	return 1
}

// loadedMeta describes something the backend held before this mount.
func (t *outTree) loadedMeta(mode uint32, mtime time.Time) nodeMeta {
	return nodeMeta{mode: mode, uid: t.owner.UID, gid: t.owner.GID, mtime: mtime, ctime: mtime}
}

// newMeta describes a node the caller of ctx creates in d with mode (the
// kernel has applied the umask): it belongs to the caller and, in a setgid
// directory, to the directory's group (a new directory inherits setgid).
func (d *outDir) newMeta(ctx context.Context, mode uint32, dir bool) nodeMeta {
	now := time.Now()
	m := nodeMeta{mode: mode & 0o7777, uid: d.t.owner.UID, gid: d.t.owner.GID, mtime: now, ctime: now}
	if c, ok := fuse.FromContext(ctx); ok {
		m.uid, m.gid = c.Uid, c.Gid
	}
	d.mu.Lock()
	pm := d.meta
	d.mu.Unlock()
	if pm.mode&syscall.S_ISGID != 0 {
		m.gid = pm.gid
		if dir {
			m.mode |= syscall.S_ISGID
		}
	}
	return m
}

// fill sets the mode, owner and times of out; mtime is the node's current
// modification time.
func (m *nodeMeta) fill(out *fuse.AttrOut, typ uint32, mtime time.Time) {
	out.Mode = typ | m.mode
	out.Uid, out.Gid = m.uid, m.gid
	at := m.atime
	if at.IsZero() {
		at = mtime
	}
	ct := m.ctime
	if ct.Before(mtime) {
		ct = mtime
	}
	out.SetTimes(&at, &mtime, &ct)
}

// set applies the mode, owner and access time of a setattr; the kernel has
// checked the caller may (default_permissions). Any change moves ctime.
func (m *nodeMeta) set(in *fuse.SetAttrIn) {
	changed := false
	if mode, ok := in.GetMode(); ok {
		m.mode, changed = mode&0o7777, true
	}
	if uid, ok := in.GetUID(); ok {
		m.uid, changed = uid, true
	}
	if gid, ok := in.GetGID(); ok {
		m.gid, changed = gid, true
	}
	if at, ok := in.GetATime(); ok {
		m.atime, changed = at, true
	}
	if _, ok := in.GetMTime(); ok {
		changed = true
	}
	if _, ok := in.GetSize(); ok {
		changed = true
	}
	if changed {
		m.ctime = time.Now()
	}
}

// touchNode records a change of n's metadata other than through setattr
// (a rename).
func touchNode(n *gofs.Inode) { changeNode(n, false) }

// goneNode records that n's name was removed (unlink, or replaced by a
// rename), which changes its link count.
func goneNode(n *gofs.Inode) { changeNode(n, true) }

func changeNode(n *gofs.Inode, gone bool) {
	now := time.Now()
	switch o := n.Operations().(type) {
	case *outDir:
		o.mu.Lock()
		o.meta.ctime = now
		o.mu.Unlock()
	case *outFile:
		o.mu.Lock()
		o.meta.ctime, o.meta.gone = now, o.meta.gone || gone
		o.mu.Unlock()
	case *outLink:
		o.mu.Lock()
		o.meta.ctime, o.meta.gone = now, o.meta.gone || gone
		o.mu.Unlock()
	case *outSpecial:
		o.mu.Lock()
		o.meta.ctime, o.meta.gone = now, o.meta.gone || gone
		o.mu.Unlock()
	}
}
