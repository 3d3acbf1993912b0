// Package prefixdirs gives a flat object store (oss, s3) the directories
// of the Backend contract: "a/b" is a directory when objects lie under
// "a/b/", or its marker object "a/b/" exists; a listing with the "/"
// delimiter reports sub-directories as Prefixes and skips the listed
// directory's own marker; a recursive one reports markers as directories.
// The stores differ only in how one HEAD and one page of listing are
// asked for, so each backend gives those as a Store, and Stat and List are
// shaped here once.
package prefixdirs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// Entry is one listed object.
type Entry struct {
	// Name is the object's full name, the backend's root prefix included.
	Name    string
	Size    int64
	ModTime time.Time
	// ETag is the object's ETag, unquoted.
	ETag string
	// Link: a symlink object (oss), whose target LinkResolver gives.
	Link bool
}

// Page is one page of a store's listing.
type Page struct {
	Entries []Entry
	// Prefixes are full names, ending in the delimiter.
	Prefixes  []string
	Truncated bool
	// NextToken continues a truncated listing.
	NextToken string
}

// Store is a flat store's side of the namespace. Each method is one call
// with the store's own retries, returning the store's own errors.
type Store interface {
	// Head returns the info of the object at key (relative to the root).
	Head(ctx context.Context, key string) (backends.ObjectInfo, error)
	// NotFound reports whether err says that no object is at the key
	// (not that the bucket is missing).
	NotFound(err error) bool
	// ListPage lists up to max objects (full names) under prefix,
	// folded at delim unless it is "", from token, or else after the
	// full name startAfter.
	ListPage(ctx context.Context, prefix, delim, token, startAfter string, max int) (Page, error)
	// Delete deletes the object of that full name.
	Delete(ctx context.Context, name string) error
	// PutMarker stores an empty object of that full name (a directory
	// marker, "a/b/").
	PutMarker(ctx context.Context, name string) error
	// Wrap maps a store error to a backends error for op on key (nil to
	// nil).
	Wrap(op, key string, err error) error
}

// LinkReader is implemented by Stores with symlink objects (oss), which
// HEAD follows. ReadLink returns the target of the link object at key,
// or an error wrapping ErrNotExist if no link is there. A listing that
// asks for links (ListOptions.Links) reports each listed link with its
// target, and Delete deletes a link even when it dangles. Optional,
// discovered by type assertion.
type LinkReader interface {
	ReadLink(ctx context.Context, key string) (string, error)
}

// Namespace is a store's directory view, rooted at Prefix.
type Namespace struct {
	Store Store
	// Prefix is the root's object-name prefix: "" or ending in '/'.
	Prefix string
	// PageSize is the largest page the store lists.
	PageSize int
	// Truncated is the store's error for a response cut short (which its
	// Wrap takes as transient): a truncated page without a continuation
	// token is one.
	Truncated error
}

func (n Namespace) object(key string) string { return n.Prefix + key }

// Dirs is what a backend over a Store embeds to have the Namespace's
// Stat, List, Delete and MakeDir as its own methods, and nothing more: an
// embedded Namespace would promote its fields too.
type Dirs struct{ ns Namespace }

// NewDirs returns the Dirs of n.
func NewDirs(n Namespace) Dirs { return Dirs{ns: n} }

// Stat implements backends.Backend (Namespace.Stat).
func (d Dirs) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	return d.ns.Stat(ctx, key)
}

// List implements backends.Backend (Namespace.List).
func (d Dirs) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	return d.ns.List(ctx, opt)
}

// LookupEntry implements backends.EntryLooker (Namespace.LookupEntry).
func (d Dirs) LookupEntry(ctx context.Context, key string) (backends.ObjectInfo, error) {
	return d.ns.LookupEntry(ctx, key)
}

// Delete implements backends.Backend (Namespace.Delete).
func (d Dirs) Delete(ctx context.Context, key string) error { return d.ns.Delete(ctx, key) }

// MakeDir implements backends.DirMaker (Namespace.MakeDir).
func (d Dirs) MakeDir(ctx context.Context, key string) error { return d.ns.MakeDir(ctx, key) }

// Stat implements backends.Backend.Stat: the object at key, or else the
// directory key if anything lies under key/.
func (n Namespace) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	key = strings.TrimSuffix(key, "/")
	if key == "" {
		return backends.ObjectInfo{IsDir: true, Mode: 0o755}, nil
	}
	info, err := n.Store.Head(ctx, key)
	if err == nil {
		return info, nil
	}
	if !n.Store.NotFound(err) {
		return backends.ObjectInfo{}, n.Store.Wrap("stat", key, err)
	}
	isDir, err := n.dirExists(ctx, key)
	if err != nil {
		return backends.ObjectInfo{}, n.Store.Wrap("stat", key, err)
	}
	if !isDir {
		return backends.ObjectInfo{}, backends.Wrap("stat", key, backends.ErrNotExist, nil)
	}
	return backends.ObjectInfo{Key: key, IsDir: true, Mode: 0o755}, nil
}

// LookupEntry implements backends.EntryLooker: key as the listing of its
// directory shows it, from one LIST of the names starting with key, folded
// at '/' and at most 2 long. The object key sorts first; "key/" (the
// directory, folded into a common prefix) is among the 2 unless names like
// "key-1" or "key.txt" come between, and only then a second LIST (of key/,
// 1 long) settles whether key is a directory too. A missing name costs the
// same one LIST as a present one, and neither depends on the directory's
// size.
func (n Namespace) LookupEntry(ctx context.Context, key string) (backends.ObjectInfo, error) {
	key = strings.TrimSuffix(key, "/")
	if key == "" {
		return backends.ObjectInfo{IsDir: true, Mode: 0o755}, nil
	}
	name := n.object(key)
	res, err := n.Store.ListPage(ctx, name, "/", "", "", 2)
	if err != nil {
		return backends.ObjectInfo{}, n.Store.Wrap("lookup", key, err)
	}
	var file *Entry
	isDir := false
	for i, o := range res.Entries {
		switch o.Name {
		case name:
			file = &res.Entries[i]
		case name + "/":
			isDir = true // a marker, from a store that does not fold it
		}
	}
	for _, p := range res.Prefixes {
		if p == name+"/" {
			isDir = true
		}
	}
	if !isDir && res.Truncated {
		if isDir, err = n.dirExists(ctx, key); err != nil {
			return backends.ObjectInfo{}, n.Store.Wrap("lookup", key, err)
		}
	}
	switch {
	case isDir:
		return backends.ObjectInfo{Key: key, IsDir: true, Mode: 0o755}, nil
	case file != nil:
		return backends.ObjectInfo{Key: key, Size: file.Size, ModTime: file.ModTime, Version: file.ETag, Mode: 0o644}, nil
	}
	return backends.ObjectInfo{}, backends.Wrap("lookup", key, backends.ErrNotExist, nil)
}

// dirExists reports whether anything (a marker or objects) lies under key/.
func (n Namespace) dirExists(ctx context.Context, key string) (bool, error) {
	page, err := n.Store.ListPage(ctx, n.object(key)+"/", "", "", "", 1)
	if err != nil {
		return false, err
	}
	return len(page.Entries) > 0 || len(page.Prefixes) > 0, nil
}

// List implements backends.Backend.List. Non-recursive listings report
// sub-directories as Prefixes; a directory's own marker is skipped;
// recursive listings report markers as directories.
func (n Namespace) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	max := opt.MaxKeys
	if max <= 0 || max > n.PageSize {
		max = n.PageSize
	}
	delim := "/"
	if opt.Recursive {
		delim = ""
	}
	startAfter := ""
	if opt.StartAfter != "" {
		startAfter = n.object(opt.StartAfter)
	}
	res, err := n.Store.ListPage(ctx, n.object(opt.Prefix), delim, opt.Token, startAfter, max)
	if err != nil {
		return backends.ListPage{}, n.Store.Wrap("list", opt.Prefix, err)
	}
	links, _ := n.Store.(LinkReader)
	var page backends.ListPage
	for _, o := range res.Entries {
		rel := strings.TrimPrefix(o.Name, n.Prefix)
		if rel == "" || rel == opt.Prefix && strings.HasSuffix(rel, "/") {
			continue // the listed directory's own marker
		}
		if strings.HasSuffix(rel, "/") {
			page.Objects = append(page.Objects, backends.ObjectInfo{Key: strings.TrimSuffix(rel, "/"), ModTime: o.ModTime, IsDir: true, Mode: 0o755})
			continue
		}
		oi := backends.ObjectInfo{Key: rel, Size: o.Size, ModTime: o.ModTime, Version: o.ETag, Mode: 0o644}
		if opt.Links && o.Link && links != nil {
			target, err := links.ReadLink(ctx, rel)
			if errors.Is(err, backends.ErrNotExist) {
				continue // deleted since the listing
			} else if err != nil {
				return backends.ListPage{}, err
			}
			oi.Link, oi.Size, oi.Mode = target, int64(len(target)), 0o777
		}
		page.Objects = append(page.Objects, oi)
	}
	for _, p := range res.Prefixes {
		page.Prefixes = append(page.Prefixes, strings.TrimSuffix(strings.TrimPrefix(p, n.Prefix), "/"))
	}
	if res.Truncated {
		page.NextToken = res.NextToken
		if page.NextToken == "" {
			// A truncated page without a token would end the listing
			// early and silently.
			return backends.ListPage{}, n.Store.Wrap("list", opt.Prefix, fmt.Errorf("truncated listing without a continuation token: %w", n.Truncated))
		}
	}
	return page, nil
}

// Delete implements backends.Backend.Delete: an object, or an empty
// directory (its marker). Stores delete a missing key without complaint,
// so the key is looked up first to report ErrNotExist.
func (n Namespace) Delete(ctx context.Context, key string) error {
	k := strings.TrimSuffix(key, "/")
	if k == "" {
		return backends.Wrap("delete", key, backends.ErrInvalid, errors.New("cannot delete the root"))
	}
	if !strings.HasSuffix(key, "/") {
		_, err := n.Store.Head(ctx, k)
		if err == nil {
			return n.Store.Wrap("delete", k, n.Store.Delete(ctx, n.object(k)))
		}
		if !n.Store.NotFound(err) {
			return n.Store.Wrap("delete", k, err)
		}
		if links, ok := n.Store.(LinkReader); ok {
			// HEAD follows a symlink object: a dangling one reads as
			// missing.
			if _, lerr := links.ReadLink(ctx, k); lerr == nil {
				return n.Store.Wrap("delete", k, n.Store.Delete(ctx, n.object(k)))
			}
		}
	}
	page, err := n.Store.ListPage(ctx, n.object(k)+"/", "", "", "", 2)
	if err != nil {
		return n.Store.Wrap("delete", k, err)
	}
	if len(page.Entries) == 0 {
		return backends.Wrap("delete", k, backends.ErrNotExist, nil)
	}
	marker := n.object(k) + "/"
	for _, o := range page.Entries {
		if o.Name != marker {
			return backends.Wrap("delete", k, backends.ErrNotEmpty, nil)
		}
	}
	return n.Store.Wrap("delete", k, n.Store.Delete(ctx, marker))
}

// MakeDir implements backends.DirMaker with "key/" marker objects for key
// and each of its parents, so that they outlive their last child as real
// directories do.
func (n Namespace) MakeDir(ctx context.Context, key string) error {
	key = strings.TrimSuffix(key, "/")
	if key == "" {
		return nil
	}
	if _, err := n.Store.Head(ctx, key); err == nil {
		return backends.Wrap("mkdir", key, backends.ErrExist, errors.New("an object of that name exists"))
	} else if !n.Store.NotFound(err) {
		return n.Store.Wrap("mkdir", key, err)
	}
	segs := strings.Split(key, "/")
	for i := range segs {
		if err := n.Store.PutMarker(ctx, n.object(strings.Join(segs[:i+1], "/"))+"/"); err != nil {
			return n.Store.Wrap("mkdir", key, err)
		}
	}
	return nil
}
