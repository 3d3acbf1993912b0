package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/parlist"
	"github.com/mlfsd/mlfsd/fs/fuseconn"
)

// An input mount is an immutable snapshot of its channel: names, attributes
// and failed lookups may be cached by the kernel for as long as the job runs.
const inputCacheTimeout = time.Hour

// inputReadAheadKB is the kernel readahead of input mounts. Measured with
// cache/cachebench (cold 1 GiB over ossemu --ttfb 20ms --conn-bandwidth
// 100MB/s, 2 cores): 128 KiB (kernel default) 0.51 of the ideal reader,
// 16 MiB 0.61, 64 MiB 0.57.
const inputReadAheadKB = 16 << 10

// InputOptions configure a read-only input tree.
type InputOptions struct {
	// Source opens file contents; nil reads the backend directly.
	Source Source
	// Key, when set, makes a single-object channel: the tree holds just
	// that object, as /<basename>. Empty means the whole backend root.
	Key string
	// Log receives errors the application only sees as an errno.
	Log *slog.Logger
	// KeepOpens keeps the mount from turning no-open (inFile.noOpen):
	// every open reaches the daemon, and a file complete in the cache
	// keeps getting passthrough, at the price of an OPEN and a RELEASE
	// round trip per warm open of a small file.
	KeepOpens bool
}

// inputFS is what every node of one input tree shares.
type inputFS struct {
	b    backends.Backend
	src  Source
	log  *slog.Logger
	inos *fuseconn.Inodes // inode numbers, which are the kernel's node IDs
	// owned: the store keeps owners and modes (backends.ObjectInfo.Owned),
	// which the tree shows and the kernel enforces. Set once, at the root.
	owned bool

	// replay is set only while an adoption opens the handed-over handles
	// again, one at a time before serving (fuseconn.Adoption.Serve): the handle must
	// be served as the kernel was told, by passthrough or not.
	replay *replayOpen

	// Listings live here rather than in the nodes: the kernel may forget an
	// inode at any time (go-fuse then drops the node), and a directory must
	// still be listed from the backend only once per mount.
	mu       sync.Mutex
	listings map[string]*listing // GUARDED_BY(mu); key of the directory -> listing

	// listAhead bounds the listings of subdirectories fetched ahead of a
	// walk (see inDir.listAhead).
	listAhead chan struct{}

	// keepOpens: never turn no-open (InputOptions.KeepOpens).
	keepOpens bool
	// noOpen: an OPEN was answered ENOSYS, so the kernel opens files of
	// this mount without asking us (see inFile.Open) and reads come with
	// no file handle (inFile.Read).
	noOpen atomic.Bool
	// reopened counts the distinct files reopened while the kernel held
	// them whole (inFile.noOpen): the mount turns no-open at noOpenAfter.
	reopened atomic.Int32
	// sharedOpen counts the files whose shared handle (inFile.shared) is
	// open: each pins its cache entry, out of eviction.
	sharedOpen atomic.Int64
}

// sharedKeepMax is how many files of a mount in no-open mode keep their
// shared handle open between reads that did not reach the end (a stream
// under way keeps its readahead state). Past it, a handle closes when its
// reads are done: random reads over many large files must not pin them
// all in the cache, where pinned entries cannot be evicted.
const sharedKeepMax = 64

// listAheadRequests is how many subdirectory listings are fetched ahead at
// once, per mount.
const listAheadRequests = 8

// listAheadDirs is the most subdirectories of one directory whose listings
// are fetched ahead: a walk of a wide tree finds the next level listed, and
// a directory of a million subdirectories does not list them all.
const listAheadDirs = 1024

// listing is one directory's entries, fetched once.
type listing struct {
	mu      sync.Mutex
	loaded  bool                           // GUARDED_BY(mu)
	entries map[string]backends.ObjectInfo // GUARDED_BY(mu); immutable once loaded
}

// listingOf returns the (possibly not yet loaded) listing of directory key.
func (f *inputFS) listingOf(key string) *listing {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.listings[key]
	if !ok {
		l = &listing{}
		f.listings[key] = l
	}
	return l
}

// NewInputRoot builds the root of a read-only tree over b. It checks that
// the channel exists, so a typo in a URI fails at mount time rather than as
// an empty directory.
func NewInputRoot(ctx context.Context, b backends.Backend, opt InputOptions) (gofs.InodeEmbedder, error) {
	f := &inputFS{b: b, src: opt.Source, log: opt.Log, inos: fuseconn.NewInodes(), listings: map[string]*listing{}, listAhead: make(chan struct{}, listAheadRequests), keepOpens: opt.KeepOpens}
	if f.src == nil {
		f.src = DirectSource{}
	}
	if f.log == nil {
		f.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opt.Key == "" {
		info, err := b.Stat(ctx, "")
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", b.ID(), err)
		}
		if !info.IsDir {
			return nil, fmt.Errorf("input %s: not a directory", b.ID())
		}
		f.owned = info.Owned
		return &inDir{fsys: f, info: info}, nil
	}
	info, err := b.Stat(ctx, opt.Key)
	if err != nil {
		return nil, fmt.Errorf("input %s%s: %w", b.ID(), opt.Key, err)
	}
	if info.IsDir {
		return nil, fmt.Errorf("input %s%s is a directory; end the URI with '/' to mount a directory channel", b.ID(), opt.Key)
	}
	f.owned = info.Owned
	l := f.listingOf("")
	l.entries = map[string]backends.ObjectInfo{path.Base(opt.Key): info}
	l.loaded = true
	return &inDir{fsys: f, info: backends.ObjectInfo{IsDir: true, ModTime: info.ModTime}}, nil
}

// MountInput mounts a read-only tree over b at mountpoint.
func MountInput(mountpoint string, b backends.Backend, opt InputOptions, mopt MountOptions) (*Server, error) {
	root, err := NewInputRoot(context.Background(), b, opt)
	if err != nil {
		return nil, err
	}
	fsys := root.(*inDir).fsys
	return fuseconn.MountTree(mountpoint, &inputTree{root: root.(*inDir)}, inputMountOptions(b, fsys, opt, mopt))
}

// inputMountOptions completes mopt with the defaults of input mounts. A
// tree over a store that keeps owners (NAS) shows them, and the kernel
// enforces them (default_permissions), as on output mounts: otherwise any
// user allowed on the mount (allow_other) could read a file that is 0600 on
// the NAS.
func inputMountOptions(b backends.Backend, f *inputFS, opt InputOptions, mopt MountOptions) MountOptions {
	mopt.ReadOnly = true
	if f.owned {
		mopt.DefaultPermissions = true
	}
	if mopt.EntryTimeout == 0 {
		mopt.EntryTimeout = inputCacheTimeout
	}
	if mopt.AttrTimeout == 0 {
		mopt.AttrTimeout = inputCacheTimeout
	}
	if mopt.NegativeTimeout == 0 {
		mopt.NegativeTimeout = inputCacheTimeout
	}
	if mopt.FSName == "" {
		mopt.FSName = b.ID()
	}
	if mopt.ReadAheadKB == 0 {
		mopt.ReadAheadKB = inputReadAheadKB
	}
	if mopt.Log == nil {
		mopt.Log = opt.Log
	}
	return mopt
}

// inDir is a directory of the input tree. Its listing is fetched from the
// backend once, on first use, and kept for the life of the mount.
type inDir struct {
	gofs.Inode
	fsys *inputFS
	info backends.ObjectInfo // Key "" for the root
}

var (
	_ = (gofs.NodeLookuper)((*inDir)(nil))
	_ = (gofs.NodeReaddirer)((*inDir)(nil))
	_ = (gofs.NodeOpendirHandler)((*inDir)(nil))
	_ = (gofs.NodeGetattrer)((*inDir)(nil))
	_ = (gofs.NodeCreater)((*inDir)(nil))
	_ = (gofs.NodeMkdirer)((*inDir)(nil))
	_ = (gofs.NodeMknoder)((*inDir)(nil))
	_ = (gofs.NodeUnlinker)((*inDir)(nil))
	_ = (gofs.NodeRmdirer)((*inDir)(nil))
	_ = (gofs.NodeRenamer)((*inDir)(nil))
	_ = (gofs.NodeSymlinker)((*inDir)(nil))
	_ = (gofs.NodeLinker)((*inDir)(nil))
	_ = (gofs.NodeSetattrer)((*inDir)(nil))
)

// listing returns the directory's entries, fetching them on first use.
// A failed fetch is not cached: the next call tries again.
func (d *inDir) listing(ctx context.Context) (map[string]backends.ObjectInfo, syscall.Errno) {
	l := d.fsys.listingOf(d.info.Key)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loaded {
		return l.entries, 0
	}
	entries, err := d.fetch(ctx)
	if err != nil {
		return nil, ToErrno(d.fsys.log, "list", d.info.Key, err)
	}
	l.entries, l.loaded = entries, true
	d.fsys.listAheadOf(entries)
	return entries, 0
}

// listAheadOf fetches, in the background, the listings of up to
// listAheadDirs subdirectories among entries that are not listed yet,
// listAheadRequests at a time: a walk of a wide tree (a loader indexing its
// dataset, find, du) then pays for the round trips of many directories at
// once instead of one after another. Only one level ahead of what was
// listed on demand, so the whole tree is never listed unasked.
func (f *inputFS) listAheadOf(entries map[string]backends.ObjectInfo) {
	var dirs []backends.ObjectInfo
	for _, info := range entries {
		if info.IsDir {
			dirs = append(dirs, info)
			if len(dirs) == listAheadDirs {
				break
			}
		}
	}
	if len(dirs) == 0 {
		return
	}
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].Key < dirs[j].Key })
	go func() {
		for _, info := range dirs {
			f.listAhead <- struct{}{}
			go func() {
				defer func() { <-f.listAhead }()
				l := f.listingOf(info.Key)
				l.mu.Lock()
				defer l.mu.Unlock()
				if l.loaded {
					return
				}
				// A failure is not kept: the demand listing tries again.
				d := &inDir{fsys: f, info: info}
				if entries, err := d.fetch(context.Background()); err == nil {
					l.entries, l.loaded = entries, true
				}
			}()
		}
	}()
}

func (d *inDir) fetch(ctx context.Context) (map[string]backends.ObjectInfo, error) {
	prefix := ""
	if d.info.Key != "" {
		prefix = d.info.Key + "/"
	}
	entries := make(map[string]backends.ObjectInfo)
	add := func(info backends.ObjectInfo) {
		name := strings.TrimSuffix(strings.TrimPrefix(info.Key, prefix), "/")
		if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
			return // the directory's own marker, or a name POSIX cannot show
		}
		if old, dup := entries[name]; dup && old.IsDir && !info.IsDir {
			// An object and a prefix share a name (possible in object stores):
			// the directory wins so everything under it stays reachable.
			d.fsys.log.Warn("object shadowed by a directory of the same name", "key", info.Key)
			return
		}
		entries[name] = info
	}
	// A wide directory is listed in ranges at once, not page after page:
	// 100,000 entries are 100 pages, 100 round trips in a row otherwise.
	page, err := parlist.List(ctx, d.fsys.b, backends.ListOptions{Prefix: prefix}, parlist.Options{})
	if err != nil {
		return nil, err
	}
	// Objects come in key order, a file before a directory of the same
	// key, so the directory wins there; prefixes are directories too.
	for _, o := range page.Objects {
		add(o)
	}
	for _, p := range page.Prefixes {
		add(backends.ObjectInfo{Key: p, IsDir: true, ModTime: d.info.ModTime})
	}
	return entries, nil
}

func (d *inDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	entries, errno := d.listing(ctx)
	if errno != 0 {
		return nil, errno
	}
	info, ok := entries[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	if ch := d.GetChild(name); ch != nil {
		fillAttr(info, &out.Attr)
		return ch, 0
	}
	var node gofs.InodeEmbedder
	mode := uint32(syscall.S_IFREG)
	if info.IsDir {
		node, mode = &inDir{fsys: d.fsys, info: info}, syscall.S_IFDIR
	} else {
		node = &inFile{fsys: d.fsys, info: info}
	}
	fillAttr(info, &out.Attr)
	p := name
	if dp := d.Path(nil); dp != "" {
		p = dp + "/" + name
	}
	return d.NewInode(ctx, node, gofs.StableAttr{Mode: mode, Ino: d.fsys.inos.Ino(p)}), 0
}

func (d *inDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	entries, errno := d.listing(ctx)
	if errno != 0 {
		return nil, errno
	}
	return gofs.NewListDirStream(dirEntries(entries)), 0
}

// dirEntries is a listing as directory entries, sorted by name.
func dirEntries(entries map[string]backends.ObjectInfo) []fuse.DirEntry {
	list := make([]fuse.DirEntry, 0, len(entries))
	for name, info := range entries {
		mode := uint32(syscall.S_IFREG)
		if info.IsDir {
			mode = syscall.S_IFDIR
		}
		list = append(list, fuse.DirEntry{Name: name, Mode: mode})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list
}

func (d *inDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fillAttr(d.info, &out.Attr)
	return 0
}

// OpendirHandle opens the directory for reading with the kernel's
// directory cache on: an input tree never changes under the mount, so the
// kernel answers later listings of it (a second `ls -l` of 100,000
// entries) without asking us again.
func (d *inDir) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &inDirHandle{d: d}, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

// inDirHandle is one open directory: its sorted entries, read in order
// (Seekdir moves to an entry by its index).
type inDirHandle struct {
	d    *inDir
	mu   sync.Mutex
	list []fuse.DirEntry // GUARDED_BY(mu); nil until first read
	pos  int             // GUARDED_BY(mu)
}

var (
	_ = (gofs.FileReaddirenter)((*inDirHandle)(nil))
	_ = (gofs.FileSeekdirer)((*inDirHandle)(nil))
)

func (h *inDirHandle) load(ctx context.Context) syscall.Errno {
	if h.list != nil {
		return 0
	}
	entries, errno := h.d.listing(ctx)
	if errno != 0 {
		return errno
	}
	h.list = dirEntries(entries)
	return 0
}

func (h *inDirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if errno := h.load(ctx); errno != 0 {
		return nil, errno
	}
	if h.pos >= len(h.list) {
		return nil, 0
	}
	e := h.list[h.pos]
	h.pos++
	e.Off = uint64(h.pos) // the offset Seekdir continues after e from
	return &e, 0
}

func (h *inDirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if errno := h.load(ctx); errno != 0 {
		return errno
	}
	h.pos = int(min(off, uint64(len(h.list))))
	return 0
}

// Every mutation of an input tree is refused with EROFS, even if the kernel
// was not told the mount is read-only (the fusermount fallback).
func (d *inDir) Create(context.Context, string, uint32, uint32, *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}
func (d *inDir) Mkdir(context.Context, string, uint32, *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (d *inDir) Mknod(context.Context, string, uint32, uint32, *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (d *inDir) Unlink(context.Context, string) syscall.Errno { return syscall.EROFS }
func (d *inDir) Rmdir(context.Context, string) syscall.Errno  { return syscall.EROFS }
func (d *inDir) Rename(context.Context, string, gofs.InodeEmbedder, string, uint32) syscall.Errno {
	return syscall.EROFS
}
func (d *inDir) Symlink(context.Context, string, string, *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (d *inDir) Link(context.Context, gofs.InodeEmbedder, string, *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (d *inDir) Setattr(context.Context, gofs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

// inFile is a file of the input tree; its attributes come from the listing.
type inFile struct {
	gofs.Inode
	fsys *inputFS
	info backends.ObjectInfo

	// The kernel keeps one I/O mode per inode: while any open of it is
	// served by the daemon (cached mode), an open that asks for passthrough
	// fails with EIO. So a file that became complete in the cache while
	// still open the slow way goes on the slow way until those opens close.
	mu          sync.Mutex
	daemonOpens int // GUARDED_BY(mu): open handles not asking for passthrough
	ptOpens     int // GUARDED_BY(mu): open handles asking for passthrough
	// inKernel: a read served by the daemon sent the kernel the whole
	// file in one reply, which FOPEN_KEEP_CACHE keeps in the inode's page
	// cache. Later opens then do not ask for passthrough: the page cache
	// answers their reads, while passthrough would cost a backing file
	// per open (a warm epoch of 2,000 x 100 KiB files in the mount that
	// read them cold: 0.25 of local disk with passthrough, 0.32 without,
	// cachebench on a busy machine). GUARDED_BY(mu)
	inKernel bool
	// reopenCounted: this file's reopen is counted in inputFS.reopened.
	// GUARDED_BY(mu)
	reopenCounted bool

	// In no-open mode reads come with no handle: they share one Source
	// handle per file, opened by the first read and closed when no read
	// is in flight and one reached the end of the file (a stream done, so
	// the cache may complete and evict it), or when the kernel forgets
	// the file.
	shared     Handle // GUARDED_BY(mu); nil: none open
	sharedRefs int    // GUARDED_BY(mu): reads in flight on shared
}

// inKernelMax is the largest file a single daemon reply marks inKernel:
// small enough to be one FUSE read (max_read is 1 MiB).
const inKernelMax = 1 << 20

var (
	_ = (gofs.NodeOpener)((*inFile)(nil))
	_ = (gofs.NodeReader)((*inFile)(nil))
	_ = (gofs.NodeOnForgetter)((*inFile)(nil))
	_ = (gofs.NodeGetattrer)((*inFile)(nil))
	_ = (gofs.NodeSetattrer)((*inFile)(nil))
)

func (f *inFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fillAttr(f.info, &out.Attr)
	return 0
}

func (f *inFile) Setattr(context.Context, gofs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (f *inFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, syscall.EROFS
	}
	if f.fsys.replay == nil && f.noOpen() {
		// ENOSYS is the protocol's "never send OPEN or RELEASE again"
		// (FUSE_NO_OPEN_SUPPORT): this open succeeds, and every later
		// open of any file of this mount stays in the kernel, with
		// FOPEN_KEEP_CACHE. A warm epoch of small files then costs no
		// round trip at all per file.
		return nil, 0, syscall.ENOSYS
	}
	h, err := f.fsys.src.Open(ctx, f.fsys.b, f.info)
	if err != nil && f.fsys.replay != nil {
		// A handle the kernel holds already: it must exist; its reads fail.
		f.fsys.log.Error("a handed-over open file could not be opened again; its reads fail", "key", f.info.Key, "err", err)
		h, err = failedHandle{err}, nil
	}
	if err != nil {
		return nil, 0, ToErrno(f.fsys.log, "open", f.info.Key, err)
	}
	ih := &inHandle{fsys: f.fsys, file: f, key: f.info.Key, h: h}
	p, ok := h.(interface{ PassthroughFd() (int, bool) })
	// Round trips to the kernel: not under f.mu (input_pagecache.go).
	held := ok && f.fsys.replay == nil && f.stayCached(h)
	f.mu.Lock()
	if ok && f.daemonOpens == 0 && !f.inKernel && (!held || f.ptOpens > 0) {
		ih.ptFd, ih.pt = p.PassthroughFd()
	}
	if r := f.fsys.replay; r != nil {
		// The kernel opened it already, by passthrough or not; a handle it
		// reads by passthrough never asks us, so no backing file is
		// registered for it again.
		ih.pt = r.passthrough
		if ih.pt {
			ih.ptFd = -1
		}
	}
	if !ih.pt {
		f.daemonOpens++
	} else {
		f.ptOpens++
	}
	f.mu.Unlock()
	// The snapshot never changes under the mount, so the page cache stays
	// valid across opens.
	return ih, fuse.FOPEN_KEEP_CACHE, 0
}

// noOpenAfter is how many distinct files the kernel held whole must be
// reopened before a mount turns no-open: a small-file epoch read again
// reopens thousands, while a job that rereads a config file or two must
// not lose passthrough for its large files over it.
const noOpenAfter = 16

// noOpen reports whether this open should be the mount's last: the mount
// is in no-open mode already, or this is the noOpenAfter-th distinct
// reopen of a file the kernel holds whole in its page cache (inKernel),
// the mark of a small-file workload read again (an epoch after the
// first). Measured with `cachebench --only small --runs 3` (busy machine,
// two sessions, each binary alternately): a warm epoch of 2,000 x 100 KiB
// files was 0.31 and 0.26 of local disk (medians) with an OPEN and a
// RELEASE per file, 0.58 and 0.74 with none. The price: no open of this
// mount asks for passthrough any more, so a large file is read through
// the daemon (or the kernel's page cache) rather than from the cache file
// directly; a mount of large files only never gets here, as none of its
// files is inKernel.
func (f *inFile) noOpen() bool {
	if f.fsys.keepOpens {
		return false
	}
	if f.fsys.noOpen.Load() {
		return true
	}
	f.mu.Lock()
	again := f.inKernel
	first := again && !f.reopenCounted
	if first {
		f.reopenCounted = true
	}
	f.mu.Unlock()
	if first && f.fsys.reopened.Add(1) >= noOpenAfter {
		f.fsys.noOpen.Store(true)
		return true
	}
	return false
}

// Read serves a read. fh is nil in no-open mode: the read then goes to the
// file's shared Source handle.
func (f *inFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if ih, ok := fh.(*inHandle); ok {
		return ih.Read(ctx, dest, off)
	}
	f.mu.Lock()
	if f.shared == nil {
		f.mu.Unlock()
		h, err := f.fsys.src.Open(ctx, f.fsys.b, f.info)
		if err != nil {
			return nil, ToErrno(f.fsys.log, "open", f.info.Key, err)
		}
		f.mu.Lock()
		if f.shared != nil {
			// Another read opened one first: use that (the stream's
			// readahead lives in it).
			defer h.Close()
		} else {
			f.shared = h
			f.fsys.sharedOpen.Add(1)
		}
	}
	sh := f.shared
	f.sharedRefs++
	f.mu.Unlock()

	ih := &inHandle{fsys: f.fsys, file: f, key: f.info.Key, h: sh}
	res, errno := ih.Read(ctx, dest, off)

	f.mu.Lock()
	f.sharedRefs--
	var done Handle
	end := errno != 0 || off+int64(len(dest)) >= f.info.Size
	if f.sharedRefs == 0 && f.shared == sh && (end || f.fsys.sharedOpen.Load() > sharedKeepMax) {
		done, f.shared = sh, nil
		f.fsys.sharedOpen.Add(-1)
	}
	f.mu.Unlock()
	if done != nil {
		// Blocks of the reply stay referenced by it until it is sent.
		done.Close()
	}
	return res, errno
}

// OnForget closes the shared handle of a file the kernel forgot.
func (f *inFile) OnForget() {
	f.mu.Lock()
	h := f.shared
	if f.sharedRefs == 0 && h != nil {
		f.shared = nil
		f.fsys.sharedOpen.Add(-1)
	} else {
		h = nil
	}
	f.mu.Unlock()
	if h != nil {
		h.Close()
	}
}

// inHandle is one open input file.
type inHandle struct {
	fsys *inputFS
	file *inFile
	key  string
	h    Handle
	pt   bool // asks the kernel for passthrough on ptFd
	ptFd int
}

var (
	_ = (gofs.FileReader)((*inHandle)(nil))
	_ = (gofs.FileReleaser)((*inHandle)(nil))
	_ = (gofs.FileFlusher)((*inHandle)(nil))
	_ = (gofs.FilePassthroughFder)((*inHandle)(nil))
)

func (h *inHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if sr, ok := h.h.(SliceReader); ok {
		vecs, release, err := sr.ReadSlices(ctx, dest, off)
		if err != nil && !errors.Is(err, io.EOF) {
			release()
			return nil, ToErrno(h.fsys.log, "read", h.key, err)
		}
		r := newSliceResult(vecs, release)
		h.noteWhole(off, r.Size())
		return r, 0
	}
	n, err := h.h.ReadAt(ctx, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, ToErrno(h.fsys.log, "read", h.key, err)
	}
	h.noteWhole(off, n)
	return fuse.ReadResultData(dest[:n]), 0
}

// noteWhole marks the file inKernel when one reply holds all of it.
func (h *inHandle) noteWhole(off int64, n int) {
	size := h.file.info.Size
	if off != 0 || int64(n) != size || size > inKernelMax {
		return
	}
	h.file.mu.Lock()
	h.file.inKernel = true
	h.file.mu.Unlock()
}

// sliceResult is a FUSE reply written from a SliceReader's slices with
// writev(2) (go-fuse sends any ReadResult with a Slices method that way),
// which hands the slices back to the Source once sent.
type sliceResult struct {
	vecs [][]byte
	rel  *releaser
}

// releaser calls a SliceReader's release exactly once: from Done, or, for a
// reply go-fuse drops without calling Done (an interrupted request whose
// reply is suppressed), from a cleanup once the reply is garbage, so the
// Source's buffers are not lost for good.
type releaser struct {
	once sync.Once
	f    func()
}

func (r *releaser) do() { r.once.Do(r.f) }

func newSliceResult(vecs [][]byte, release func()) *sliceResult {
	r := &sliceResult{vecs: vecs, rel: &releaser{f: release}}
	runtime.AddCleanup(r, (*releaser).do, r.rel)
	return r
}

var _ fuse.ReadResult = (*sliceResult)(nil)

func (r *sliceResult) Size() int {
	n := 0
	for _, v := range r.vecs {
		n += len(v)
	}
	return n
}

// Bytes is the fallback when the reply cannot be vectored: a copy.
func (r *sliceResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, v := range r.vecs {
		buf = append(buf, v...)
	}
	return buf, fuse.OK
}

// Slices is go-fuse's vectored-reply hook.
func (r *sliceResult) Slices() ([][]byte, fuse.Status) { return r.vecs, fuse.OK }

// Done runs after the reply was written to the kernel (or failed).
func (r *sliceResult) Done() { r.rel.do() }

// Flush answers ENOSYS, the FUSE protocol's "never send this again": a
// read-only file has nothing to flush, and the kernel otherwise makes every
// close(2) wait for a round trip to the daemon. The input tree has its own
// FUSE connection, so output mounts keep their flushes. Measured warm epoch
// over 10,000 small files: 0.90 s with FLUSH, 0.59 s without.
func (h *inHandle) Flush(ctx context.Context) syscall.Errno { return syscall.ENOSYS }

func (h *inHandle) Release(ctx context.Context) syscall.Errno {
	h.file.mu.Lock()
	if !h.pt {
		h.file.daemonOpens--
	} else {
		h.file.ptOpens--
	}
	h.file.mu.Unlock()
	if err := h.h.Close(); err != nil {
		return ToErrno(h.fsys.log, "release", h.key, err)
	}
	return 0
}

// PassthroughFd hands the kernel the Source's local file, when it has one
// and no open of this inode is served by the daemon, so reads of a fully
// cached file never enter the daemon.
func (h *inHandle) PassthroughFd() (int, bool) { return h.ptFd, h.pt && h.ptFd >= 0 }

// replayOpen is the kernel's view of one handle opened again after a
// handover.
type replayOpen struct{ passthrough bool }

// failedHandle stands for a handed-over open file that could not be opened
// again: its reads fail with the error.
type failedHandle struct{ err error }

func (f failedHandle) ReadAt(context.Context, []byte, int64) (int, error) { return 0, f.err }
func (f failedHandle) Close() error                                       { return nil }

// AdoptInput takes over an input mount at mountpoint: fd is its /dev/fuse
// connection, snap what the old daemon's server held (package fuseconn).
func AdoptInput(fd int, mountpoint string, snap *Snapshot, b backends.Backend, opt InputOptions, mopt MountOptions) (*Adoption, error) {
	root, err := NewInputRoot(context.Background(), b, opt)
	if err != nil {
		return nil, err
	}
	in := root.(*inDir)
	a, err := fuseconn.Adopt(fd, mountpoint, snap, &inputTree{root: in}, inputMountOptions(b, in.fsys, opt, mopt))
	if err != nil {
		return nil, err
	}
	return &Adoption{Adoption: a}, nil
}

// fillAttr describes an object: with the owner, group and mode the store
// keeps (NAS), or else as root's, readable by all.
func fillAttr(info backends.ObjectInfo, a *fuse.Attr) {
	if info.IsDir {
		a.Mode = syscall.S_IFDIR | 0o555
		a.Nlink = 2
	} else {
		a.Mode = syscall.S_IFREG | 0o444 | info.Mode&0o111
		a.Nlink = 1
		a.Size = uint64(info.Size)
		a.Blocks = (a.Size + 511) / 512
	}
	if info.Owned {
		a.Mode = a.Mode&syscall.S_IFMT | info.Mode&0o7777
		a.Uid, a.Gid = info.UID, info.GID
	}
	a.Blksize = 1 << 20 // tells cp and friends to use large reads
	t := info.ModTime
	if t.IsZero() {
		t = time.Unix(0, 0)
	}
	a.SetTimes(nil, &t, &t)
}
