package fs

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// dirList is one directory's listing, sorted by name and held compactly:
// the names in one blob and the versions in another, with one fixed-size
// record per entry, so a directory of a million entries is three
// allocations rather than a million strings and map buckets. About 40
// bytes per entry plus its name and version (TestDirListBytesPerEntry).
// Immutable once built: readers share it without a lock.
type dirList struct {
	names []byte   // the names, in order, back to back
	vers  []byte   // the versions, in order, back to back
	ents  []dirEnt // one per name, in name order
}

// dirEnt is one entry of a dirList.
type dirEnt struct {
	nameEnd, verEnd uint32 // where the entry's name (version) ends in names (vers)
	size            int64
	mtime           int64 // Unix nanoseconds; entNoTime: none
	mode, uid, gid  uint32
	flags           uint8
}

const (
	entDir    = 1 << iota // a directory
	entOwned              // mode, uid and gid are the store's (ObjectInfo.Owned)
	entNoTime             // the store gave no modification time
)

// newDirList builds the listing of names and their entries, given in any
// order. Of two entries of one name the directory wins (an object and a
// prefix may share a name in object stores), so everything under it stays
// reachable; shadowed hears of each object it hides. A listing holds at
// most 4 GiB of names and as much of versions (its offsets are 32-bit).
func newDirList(names []string, infos []backends.ObjectInfo, shadowed func(backends.ObjectInfo)) (*dirList, error) {
	idx := make([]int32, len(names))
	nameBytes, verBytes := 0, 0
	for i := range idx {
		idx[i] = int32(i)
		nameBytes += len(names[i])
		verBytes += len(infos[i].Version)
	}
	if nameBytes > math.MaxUint32 || verBytes > math.MaxUint32 || len(names) > math.MaxInt32 {
		return nil, fmt.Errorf("a directory of %d entries with %d bytes of names is more than one listing holds (4 GiB)", len(names), nameBytes)
	}
	sort.SliceStable(idx, func(a, b int) bool { return names[idx[a]] < names[idx[b]] })
	l := &dirList{names: make([]byte, 0, nameBytes), vers: make([]byte, 0, verBytes), ents: make([]dirEnt, 0, len(idx))}
	for k := 0; k < len(idx); k++ {
		best := idx[k]
		// Entries of one name are adjacent: the directory wins, else the
		// last.
		for k+1 < len(idx) && names[idx[k+1]] == names[best] {
			k++
			j := idx[k]
			switch {
			case infos[best].IsDir && !infos[j].IsDir:
				if shadowed != nil {
					shadowed(infos[j])
				}
				continue
			case !infos[best].IsDir && infos[j].IsDir && shadowed != nil:
				shadowed(infos[best])
			}
			best = j
		}
		l.add(names[best], infos[best])
	}
	return l, nil
}

func (l *dirList) add(name string, info backends.ObjectInfo) {
	l.names = append(l.names, name...)
	l.vers = append(l.vers, info.Version...)
	e := dirEnt{nameEnd: uint32(len(l.names)), verEnd: uint32(len(l.vers)), size: info.Size, mode: info.Mode, uid: info.UID, gid: info.GID}
	if info.IsDir {
		e.flags |= entDir
	}
	if info.Owned {
		e.flags |= entOwned
	}
	if info.ModTime.IsZero() {
		e.flags |= entNoTime
	} else {
		e.mtime = info.ModTime.UnixNano()
	}
	l.ents = append(l.ents, e)
}

// Len is the number of entries.
func (l *dirList) Len() int { return len(l.ents) }

func (l *dirList) nameBytes(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = l.ents[i-1].nameEnd
	}
	return l.names[start:l.ents[i].nameEnd]
}

// name returns entry i's name (a new string).
func (l *dirList) name(i int) string { return string(l.nameBytes(i)) }

// isDir reports whether entry i is a directory.
func (l *dirList) isDir(i int) bool { return l.ents[i].flags&entDir != 0 }

// find returns the index of name, or -1.
func (l *dirList) find(name string) int {
	i := sort.Search(len(l.ents), func(i int) bool { return string(l.nameBytes(i)) >= name })
	if i < len(l.ents) && string(l.nameBytes(i)) == name {
		return i
	}
	return -1
}

// info describes entry i of the directory whose key is dir ("" for the
// root).
func (l *dirList) info(dir string, i int) backends.ObjectInfo {
	e := l.ents[i]
	vstart := uint32(0)
	if i > 0 {
		vstart = l.ents[i-1].verEnd
	}
	name := l.name(i)
	key := name
	if dir != "" {
		key = dir + "/" + name
	}
	info := backends.ObjectInfo{Key: key, Size: e.size, Version: string(l.vers[vstart:e.verEnd]), IsDir: e.flags&entDir != 0,
		Mode: e.mode, Owned: e.flags&entOwned != 0, UID: e.uid, GID: e.gid}
	if e.flags&entNoTime == 0 {
		info.ModTime = time.Unix(0, e.mtime)
	}
	return info
}

// entries is the listing as a map, the form a handover carries.
func (l *dirList) entries(dir string) map[string]backends.ObjectInfo {
	m := make(map[string]backends.ObjectInfo, l.Len())
	for i := range l.ents {
		m[l.name(i)] = l.info(dir, i)
	}
	return m
}

// dirListOf builds a listing from the map a handover carries.
func dirListOf(m map[string]backends.ObjectInfo) (*dirList, error) {
	names := make([]string, 0, len(m))
	infos := make([]backends.ObjectInfo, 0, len(m))
	for name, info := range m {
		names = append(names, name)
		infos = append(infos, info)
	}
	return newDirList(names, infos, nil)
}

// listedName returns the name under which a listing of the directory with
// prefix (its key and '/', or "") shows key, or "" when it shows nothing:
// the directory's own marker, or a name POSIX cannot show.
func listedName(prefix, key string) string {
	name := strings.TrimSuffix(strings.TrimPrefix(key, prefix), "/")
	if name == "." || name == ".." || strings.Contains(name, "/") {
		return ""
	}
	return name
}
