package hdfs

import (
	"context"
	"errors"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"

	"github.com/mlfsd/mlfsd/backends"
)

// defaultMaxKeys is the page size when ListOptions.MaxKeys is 0.
const defaultMaxKeys = 1000

// listCacheTTL is how long a listing gathered for one page serves the
// pages after it. HDFS pages by name, not by a server-side cursor, so a
// token is simply the last key returned; the cache only saves re-reading
// the directory (or tree) for every page.
const listCacheTTL = 30 * time.Second

// listCacheSize bounds the number of listings kept.
const listCacheSize = 8

type listCacheKey struct {
	prefix    string
	recursive bool
}

type listCacheEntry struct {
	entries []backends.ObjectInfo
	at      time.Time
}

// listCache keeps recent whole listings, for paging through them.
type listCache struct {
	mu sync.Mutex
	m  map[listCacheKey]listCacheEntry
}

func (c *listCache) get(k listCacheKey) ([]backends.ObjectInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || time.Since(e.at) > listCacheTTL {
		return nil, false
	}
	return e.entries, true
}

func (c *listCache) put(k listCacheKey, entries []backends.ObjectInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[listCacheKey]listCacheEntry{}
	}
	if len(c.m) >= listCacheSize {
		var oldest listCacheKey
		var at time.Time
		for key, e := range c.m {
			if at.IsZero() || e.at.Before(at) {
				oldest, at = key, e.at
			}
		}
		delete(c.m, oldest)
	}
	c.m[k] = listCacheEntry{entries: entries, at: time.Now()}
}

// List returns one page of the entries under opt.Prefix. Directories are
// objects with IsDir set, in recursive listings too; Prefixes stay empty.
// A first page (no token, no StartAfter) always reads HDFS afresh; a page
// that starts after a key continues a listing, as one with a token does
// (ranges of one directory listed in parallel read it once).
func (b *backend) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return backends.ListPage{}, &backends.OpError{Op: "list", Key: opt.Prefix, Err: err}
	}
	if strings.HasPrefix(opt.Prefix, "/") || strings.Contains(opt.Prefix, "//") {
		return backends.ListPage{}, backends.Wrap("list", opt.Prefix, backends.ErrInvalid, errors.New("malformed prefix"))
	}
	after := max(opt.Token, opt.StartAfter)
	max := opt.MaxKeys
	if max <= 0 {
		max = defaultMaxKeys
	}
	ck := listCacheKey{prefix: opt.Prefix, recursive: opt.Recursive}
	entries, ok := []backends.ObjectInfo(nil), false
	if after != "" {
		entries, ok = b.lists.get(ck)
	}
	if !ok {
		var err error
		entries, err = b.gather(ctx, opt.Prefix, opt.Recursive)
		if err != nil {
			return backends.ListPage{}, err
		}
		b.lists.put(ck, entries)
	}
	i := 0
	if after != "" {
		i = sort.Search(len(entries), func(i int) bool { return entries[i].Key > after })
	}
	var page backends.ListPage
	end := min(len(entries), i+max)
	page.Objects = append([]backends.ObjectInfo(nil), entries[i:end]...)
	if end < len(entries) {
		page.NextToken = entries[end-1].Key
	}
	return page, nil
}

// gather lists everything under prefix, sorted by key.
func (b *backend) gather(ctx context.Context, prefix string, recursive bool) ([]backends.ObjectInfo, error) {
	dir, namePrefix := "", prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir, namePrefix = prefix[:i], prefix[i+1:]
	}
	if checkKey("list", dir, false) != nil {
		return nil, nil // a reserved or malformed directory holds nothing listable
	}
	var out []backends.ObjectInfo
	var walk func(dir, namePrefix string) error
	walk = func(dir, namePrefix string) error {
		var ents []os.FileInfo
		err := b.do(ctx, "list", dir, func(c *hdfs.Client) error {
			var err error
			ents, err = c.ReadDir(b.abs(dir))
			return err
		})
		if err != nil {
			if errors.Is(err, backends.ErrNotExist) || errors.Is(err, backends.ErrNotDir) {
				return nil // nothing under a missing prefix
			}
			return err
		}
		for _, fi := range ents {
			name := fi.Name()
			if !strings.HasPrefix(name, namePrefix) || name == stagingDir {
				continue
			}
			key := name
			if dir != "" {
				key = dir + "/" + name
			}
			out = append(out, info(key, fi))
			if fi.IsDir() && recursive {
				if err := walk(key, ""); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(dir, namePrefix); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
