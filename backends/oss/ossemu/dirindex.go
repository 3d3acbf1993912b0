package ossemu

import (
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"
)

// Listing a wide directory page by page must not read and sort the whole
// directory for every page: dirIndex keeps a directory's entries sorted in
// key order, so a page starts with a binary search. An index is trusted
// only while the directory's mtime (and inode) are those seen before it
// was read, so files added or removed behind the emulator's back (a data
// set copied onto its disk) are seen at the next page; the emulator's own
// writes also drop the indexes of the directories they change. The ctime
// is compared too: unlike the mtime, no copy tool can set it back (cp -a
// and rsync -t restore a directory's mtime after filling it).

const (
	// indexMinEntries: smaller directories are read whole each time (as
	// cheap as the index, and they would crowd the cache).
	indexMinEntries = 256
	// indexMaxDirs bounds the cache (the least recently used goes).
	indexMaxDirs = 64
	// indexRacy: an index built less than this after its directory's
	// ctime may miss a change made within the same timestamp tick, so it
	// is rebuilt rather than trusted (as git treats a "racily clean"
	// index). Filesystem timestamps are at most a few ms coarse.
	indexRacy = time.Second
)

// dirIndex is one directory's entries, sorted by dirent.sort. Immutable
// once built: readers share it without a lock.
type dirIndex struct {
	ents  []dirent
	stamp dirStamp
	built time.Time
	used  uint64 // GUARDED_BY(dirIndexes.mu): LRU clock at the last use
}

// dirIndexes caches dirIndex by directory path.
type dirIndexes struct {
	mu    sync.Mutex
	m     map[string]*dirIndex // GUARDED_BY(mu)
	clock uint64               // GUARDED_BY(mu)
}

// invalidate drops the indexes of dir and its ancestors up to (and with)
// top: a write that creates or removes entries may make parents too.
func (d *dirIndexes) invalidate(top, dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		delete(d.m, dir)
		if dir == top || len(dir) <= len(top) {
			return
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return
		}
		dir = parent
	}
}

// entries returns dir's entries sorted in key order (directories sort as
// "name/"), from the cache when the directory is unchanged. ok is false
// when dir cannot be read (vanished, or not a directory).
func (d *dirIndexes) entries(dir string) (ents []dirent, ok bool) {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil, false
	}
	st := stampOf(fi)
	d.mu.Lock()
	if ix := d.m[dir]; ix != nil && ix.stamp == st && ix.built.Sub(time.Unix(0, st.ctimeNs)) >= indexRacy {
		d.clock++
		ix.used = d.clock
		d.mu.Unlock()
		return ix.ents, true
	}
	d.mu.Unlock()
	// Stat before reading: a change during the read moves the mtime on,
	// so the index stored below is never trusted with it missing.
	built := time.Now()
	ents, ok = readSortedDir(dir)
	if !ok || len(ents) < indexMinEntries {
		return ents, ok
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]*dirIndex{}
	}
	if _, have := d.m[dir]; !have && len(d.m) >= indexMaxDirs {
		var lru string
		for k, v := range d.m {
			if lru == "" || v.used < d.m[lru].used {
				lru = k
			}
		}
		delete(d.m, lru)
	}
	d.clock++
	d.m[dir] = &dirIndex{ents: ents, stamp: st, built: built, used: d.clock}
	return ents, true
}

// readSortedDir reads dir whole and sorts it in key order.
func readSortedDir(dir string) ([]dirent, bool) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, false
	}
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, false
	}
	ents := make([]dirent, 0, len(des))
	for _, de := range des {
		isDir := de.IsDir()
		if de.Type()&os.ModeSymlink != 0 {
			fi, err := os.Stat(filepath.Join(dir, de.Name()))
			if err != nil {
				continue
			}
			isDir = fi.IsDir()
		}
		e := dirent{name: de.Name(), sort: de.Name(), isDir: isDir}
		if isDir {
			e.sort += "/"
		}
		ents = append(ents, e)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].sort < ents[j].sort })
	return ents, true
}

// dirStamp identifies a directory's state: any entry added or removed
// changes its ctime (and mtime); the inode tells a directory replaced by
// another.
type dirStamp struct {
	mtimeNs, ctimeNs int64
	ino              uint64
}

func stampOf(fi os.FileInfo) dirStamp {
	s := dirStamp{mtimeNs: fi.ModTime().UnixNano(), ctimeNs: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ctimeNs, s.ino = st.Ctim.Nano(), st.Ino
	}
	return s
}
