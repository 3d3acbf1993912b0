// Package dirindex keeps wide directories' entries sorted in memory for
// the protocol emulators, so listing one page after a marker costs a
// binary search and the page instead of a read and a sort of the whole
// directory (100,000 entries listed 1,000 at a time was quadratic).
//
// An index is trusted only while its directory's mtime, ctime and inode
// are those seen before it was read: files added or removed behind the
// emulator's back (a data set copied onto its disk) are seen at the next
// page. The ctime matters because no copy tool can set it back (cp -a and
// rsync -t restore a directory's mtime after filling it). An index built
// within a second of the directory's last change is rebuilt rather than
// trusted, since a change within the same timestamp tick would leave the
// stamps equal (as git treats a "racily clean" index). The emulators also
// drop the indexes of the directories they change themselves.
package dirindex

import (
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"
)

const (
	// minEntries: smaller directories are read whole each time (as cheap
	// as the index, and they would crowd the cache).
	minEntries = 256
	// maxDirs bounds the cache; the least recently used index goes.
	maxDirs = 64
	// racy: an index built less than this after its directory's ctime
	// is not trusted. Filesystem timestamps are at most a few ms coarse.
	racy = time.Second
)

// Entry is one directory entry.
type Entry struct {
	Name string
	// Key orders the entries (see New).
	Key string
	// IsDir is true for a directory, or a symbolic link to one.
	IsDir bool
}

// Cache holds the indexes of recently listed wide directories. It is safe
// for concurrent use.
type Cache struct {
	key func(name string, isDir bool) string

	mu    sync.Mutex
	m     map[string]*index // GUARDED_BY(mu), by directory path
	clock uint64            // GUARDED_BY(mu)
}

// index is one directory's entries sorted by Key. Immutable once built:
// readers share ents without a lock.
type index struct {
	ents  []Entry
	stamp stamp
	built time.Time
	used  uint64 // GUARDED_BY(Cache.mu): clock at the last use
}

// stamp identifies a directory's state: an entry added or removed moves
// its ctime (and mtime); the inode tells a directory replaced by another.
type stamp struct {
	mtimeNs, ctimeNs int64
	ino              uint64
}

func stampOf(fi os.FileInfo) stamp {
	s := stamp{mtimeNs: fi.ModTime().UnixNano(), ctimeNs: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ctimeNs, s.ino = st.Ctim.Nano(), st.Ino
	}
	return s
}

// New returns an empty cache whose entries sort by key(name, isDir) in
// byte order (nil: by name).
func New(key func(name string, isDir bool) string) *Cache {
	if key == nil {
		key = func(name string, _ bool) string { return name }
	}
	return &Cache{key: key, m: map[string]*index{}}
}

// Invalidate drops the indexes of dir and of its ancestors up to and
// including top: a write that adds or removes an entry of dir may have
// made or removed its parents too.
func (c *Cache) Invalidate(top, dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		delete(c.m, dir)
		parent := filepath.Dir(dir)
		if dir == top || len(dir) <= len(top) || parent == dir {
			return
		}
		dir = parent
	}
}

// Entries returns dir's entries sorted by key, from the index when the
// directory is unchanged. The slice is shared: callers must not modify
// it. ok is false when dir cannot be read (missing, or not a directory).
func (c *Cache) Entries(dir string) (ents []Entry, ok bool) {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil, false
	}
	st := stampOf(fi)
	c.mu.Lock()
	if ix := c.m[dir]; ix != nil && ix.stamp == st && ix.built.Sub(time.Unix(0, st.ctimeNs)) >= racy {
		c.clock++
		ix.used = c.clock
		c.mu.Unlock()
		return ix.ents, true
	}
	c.mu.Unlock()
	// Stamped before the read: a change during it moves the stamp on,
	// so the index stored below is never trusted with the change missing.
	built := time.Now()
	ents, ok = c.read(dir)
	if !ok || len(ents) < minEntries {
		return ents, ok
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, have := c.m[dir]; !have && len(c.m) >= maxDirs {
		var lru string
		for k, v := range c.m {
			if lru == "" || v.used < c.m[lru].used {
				lru = k
			}
		}
		delete(c.m, lru)
	}
	c.clock++
	c.m[dir] = &index{ents: ents, stamp: st, built: built, used: c.clock}
	return ents, true
}

// read reads dir whole and sorts it by key. A symbolic link counts as a
// directory when it leads to one; one leading nowhere is left out.
func (c *Cache) read(dir string) ([]Entry, bool) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, false
	}
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, false
	}
	ents := make([]Entry, 0, len(des))
	for _, de := range des {
		isDir := de.IsDir()
		if de.Type()&os.ModeSymlink != 0 {
			fi, err := os.Stat(filepath.Join(dir, de.Name()))
			if err != nil {
				continue
			}
			isDir = fi.IsDir()
		}
		ents = append(ents, Entry{Name: de.Name(), Key: c.key(de.Name(), isDir), IsDir: isDir})
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Key < ents[j].Key })
	return ents, true
}
