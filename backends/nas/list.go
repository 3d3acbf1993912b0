package nas

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
)

// defaultMaxKeys is the page size when the caller leaves it to us.
const defaultMaxKeys = 1000

// List returns one page of entries under opt.Prefix in ascending key
// order (StartAfter included: a directory sorts by its key). Directories are real, so they list as objects with IsDir set
// (Prefixes stays empty); a recursive listing includes them too, each just
// before the keys below it. NextToken is the last key returned: the next
// page starts after it, skipping whole subtrees that sort before it.
// Temporary files, FIFOs, sockets, devices, and symlinks that dangle or
// lead outside the root are not listed.
func (b *backend) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	release, err := b.acquire(ctx)
	if err != nil {
		return backends.ListPage{}, mapErr("list", opt.Prefix, err)
	}
	defer release()
	i := strings.LastIndexByte(opt.Prefix, '/')
	dirKey, namePrefix := opt.Prefix[:i+1], opt.Prefix[i+1:]
	rel := "."
	if dirKey != "" {
		p, err := parseKey("list", dirKey, false)
		if errors.Is(err, backends.ErrNotExist) {
			return backends.ListPage{}, nil // a temporary file's name
		}
		if err != nil {
			return backends.ListPage{}, err
		}
		rel = p.rel
	}
	// A token is the last key returned, so StartAfter is one too: the
	// walk starts after whichever lies further on.
	after := max(opt.Token, opt.StartAfter)
	max := opt.MaxKeys
	if max <= 0 {
		max = defaultMaxKeys
	}
	l := &lister{b: b, ctx: ctx, token: after, max: max, recursive: opt.Recursive, links: opt.Links, ancestors: map[devIno]bool{}}
	if err := l.walk(rel, dirKey, namePrefix, true); err != nil {
		return backends.ListPage{}, mapErr("list", opt.Prefix, err)
	}
	page := backends.ListPage{Objects: l.objs}
	// The walk gathers one entry more than a page to learn whether
	// another page follows.
	if len(l.objs) > max {
		page.Objects = l.objs[:max]
		page.NextToken = page.Objects[max-1].Key
	}
	return page, nil
}

type devIno struct{ dev, ino uint64 }

// lister gathers one page of a listing.
type lister struct {
	b         *backend
	ctx       context.Context
	token     string
	max       int
	recursive bool
	links     bool // list symlinks as links (ListOptions.Links)
	// ancestors holds the directories being walked, so a symlink back to
	// one of them does not loop.
	ancestors map[devIno]bool
	objs      []backends.ObjectInfo
	steps     int
}

func (l *lister) full() bool { return len(l.objs) > l.max }

// item is one position in the sorted walk of a directory: an entry itself
// (key "dir/name"), or, in a recursive walk, the subtree below it
// ("dir/name/"). Sorting both by string puts every key in global order.
type item struct {
	s    string
	name string
	sub  bool
}

// walk lists directory rel, whose keys start with dirKey ("" or ending in
// '/'), keeping names that start with namePrefix.
func (l *lister) walk(rel, dirKey, namePrefix string, top bool) error {
	fd, err := openBeneath(l.b.rootfd, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR || !top {
			// Nothing there (or it went away mid-walk): nothing to list.
			return nil
		}
		return err
	}
	dir := os.NewFile(uintptr(fd), rel)
	defer dir.Close()
	var dst unix.Stat_t
	if err := unix.Fstat(fd, &dst); err != nil {
		return err
	}
	self := devIno{dst.Dev, dst.Ino}
	if l.ancestors[self] {
		return nil
	}
	l.ancestors[self] = true
	defer delete(l.ancestors, self)

	key := dirItemsKey{stamp: stampOf(&dst), dirKey: dirKey, namePrefix: namePrefix, recursive: l.recursive}
	items, cached := l.b.lists.get(key)
	if !cached {
		// Stamped before the read: a change during it moves the stamp
		// on, so items stored below never miss it.
		built := time.Now()
		names, err := dir.Readdirnames(-1)
		if err != nil {
			if top {
				return err
			}
			return nil
		}
		items = make([]item, 0, len(names)*2)
		for _, n := range names {
			if !strings.HasPrefix(n, namePrefix) || strings.HasPrefix(n, tmpPrefix) {
				continue
			}
			items = append(items, item{s: dirKey + n, name: n})
			if l.recursive {
				items = append(items, item{s: dirKey + n + "/", name: n, sub: true})
			}
		}
		slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.s, b.s) })
		l.b.lists.put(key, items, built)
	}
	if !l.recursive && l.token != "" {
		// A page after a key starts there, not at the directory's top.
		i, _ := slices.BinarySearchFunc(items, l.token, func(it item, t string) int { return strings.Compare(it.s, t) })
		items = items[i:]
	}

	// An entry's self item always precedes its subtree item, so one
	// remembered stat serves both.
	var lastName string
	var lastSt unix.Stat_t
	var lastOK bool
	var lastLink string
	entry := func(name string) (*unix.Stat_t, bool) {
		if name != lastName {
			lastName = name
			lastLink, lastOK = "", false
			if l.links {
				lastLink, lastOK = l.link(fd, name, &lastSt)
			}
			if !lastOK {
				lastOK = l.stat(fd, rel, name, &lastSt)
			}
		}
		return &lastSt, lastOK
	}
	for _, it := range items {
		if l.full() {
			return nil
		}
		if l.steps++; l.steps%256 == 0 {
			if err := l.ctx.Err(); err != nil {
				return err
			}
		}
		if !it.sub {
			if l.token != "" && it.s <= l.token {
				continue
			}
			if st, ok := entry(it.name); ok {
				oi := info(it.s, st)
				if lastLink != "" {
					oi.Link, oi.Size, oi.Mode = lastLink, int64(len(lastLink)), 0o777
				}
				l.objs = append(l.objs, oi)
			}
			continue
		}
		// Skip a subtree that sorts wholly before the token.
		if l.token != "" && l.token >= it.s && !strings.HasPrefix(l.token, it.s) {
			continue
		}
		if st, ok := entry(it.name); !ok || !isDir(st) {
			continue
		}
		child := it.name
		if rel != "." {
			child = rel + "/" + it.name
		}
		if err := l.walk(child, it.s, "", false); err != nil {
			return err
		}
	}
	return l.ctx.Err()
}

// stat describes entry name of directory dirfd (at rel), following a
// symlink only while it stays inside the root. It reports false for what is
// not listed.
func (l *lister) stat(dirfd int, rel, name string, st *unix.Stat_t) bool {
	if err := unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		path := name
		if rel != "." {
			path = rel + "/" + name
		}
		if err := l.b.statBeneath(path, st); err != nil {
			if err == errEscape {
				l.b.log.Debug("nas: not listing a symlink that leads outside the root", "key", path)
			}
			return false
		}
	}
	return isDir(st) || isReg(st)
}

// link describes entry name of dirfd when it is a symlink, without
// following it: its target and its own stat data.
func (l *lister) link(dirfd int, name string, st *unix.Stat_t) (string, bool) {
	if err := unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return "", false
	}
	target, err := readLink(dirfd, name)
	if err != nil || target == "" {
		return "", false
	}
	return target, true
}

// A wide directory's sorted names are kept between the pages of its
// listing: reading and sorting 100,000 names for each page of 1,000 made
// a listing quadratic (8 CPU-seconds for 100 pages, and more when its
// ranges are listed at once, backends/parlist). Kept names are trusted
// only while the directory's inode, mtime and ctime are those seen before
// they were read, and only when read at least racyDir after its last
// change (a change within the same timestamp tick would leave the stamp
// equal, as git treats a "racily clean" index).
const (
	wideDir       = 256 // smaller directories are read whole each time
	maxCachedDirs = 16
	racyDir       = time.Second
)

type dirStamp struct {
	dev, ino     uint64
	mtime, ctime int64 // ns
}

func stampOf(st *unix.Stat_t) dirStamp {
	return dirStamp{dev: st.Dev, ino: st.Ino, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// dirItemsKey names one directory's sorted items as one walk sees them.
type dirItemsKey struct {
	stamp      dirStamp
	dirKey     string
	namePrefix string
	recursive  bool
}

type dirItems struct {
	items []item // immutable once stored
	built time.Time
}

// dirCache holds the sorted items of recently listed wide directories. The
// zero value is ready to use.
type dirCache struct {
	mu sync.Mutex
	m  map[dirItemsKey]dirItems // GUARDED_BY(mu)
}

func (c *dirCache) get(k dirItemsKey) ([]item, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	return e.items, ok
}

// put keeps items read at built, when the directory is wide and was
// last changed long enough before.
func (c *dirCache) put(k dirItemsKey, items []item, built time.Time) {
	if len(items) < wideDir || built.Sub(time.Unix(0, k.stamp.ctime)) < racyDir {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[dirItemsKey]dirItems{}
	}
	if len(c.m) >= maxCachedDirs {
		var oldest dirItemsKey
		var at time.Time
		for key, e := range c.m {
			if at.IsZero() || e.built.Before(at) {
				oldest, at = key, e.built
			}
		}
		delete(c.m, oldest)
	}
	c.m[k] = dirItems{items: items, built: built}
}
