package fs

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/fs/fuseconn"
	"github.com/mlfsd/mlfsd/writeback"
)

// The output tree is the read-write, write-back view of an output channel.
// It starts from what the backend holds (a job can resume from checkpoints
// an earlier run wrote) merged with files staged by a previous run that
// are still waiting for upload. A directory's backend listing is read once,
// at first use; after that this tree is the authority for names: every
// change goes through it (the job is the channel's only writer). File data
// and everything about uploads belongs to writeback.Store.
//
// Lock order: outDir.mu of a parent before its child's; no tree lock is
// held while writeback.Store waits for an upload.

// outputCacheTimeout bounds kernel caching of names and attributes. All
// changes go through this tree, so it is safe; it is short only so that
// sizes the kernel did not see change (an upload) show up soon.
const outputCacheTimeout = time.Second

// OutputOptions configures an output tree.
type OutputOptions struct {
	// Store stages and uploads file data; its backend is the channel's.
	Store *writeback.Store
	// FsyncDurable makes fsync return only once the file is durable in
	// the backend; otherwise fsync returns once it is journaled locally.
	FsyncDurable bool
	// NoPassthrough routes writes through the daemon instead of letting the
	// kernel write staging files directly (FUSE passthrough). Passthrough
	// is what makes writes run at local-disk speed; without it, sequential
	// writes can start uploading before close (see writeback.Options).
	NoPassthrough bool
	// Log receives errors mapped to EIO; nil discards.
	Log *slog.Logger
	// Owner is the owner of everything the backend holds (stores keep no
	// owners); nil means the daemon's own uid and gid. Files and
	// directories created through the mount belong to their creator.
	Owner *Owner
}

// Owner is a uid and gid.
type Owner struct{ UID, GID uint32 }

type outTree struct {
	st    *writeback.Store // nil only while a handed-over tree is replayed
	b     backends.Backend
	opt   OutputOptions
	log   *slog.Logger
	owner Owner            // of what the backend holds
	inos  *fuseconn.Inodes // inode numbers, which are the kernel's node IDs

	// A tree taken over from another daemon (output_handover.go).
	replaying atomic.Bool // its nodes are being looked up again
	seedMu    sync.Mutex
	seed      map[string]map[string]outNodeState // GUARDED_BY(seedMu): children of loaded directories, by key
}

// NewOutputRoot returns the root of an output tree over opt.Store.
func NewOutputRoot(ctx context.Context, opt OutputOptions) (gofs.InodeEmbedder, error) {
	if opt.Store == nil {
		return nil, backends.Wrap("mount", "", backends.ErrInvalid, errors.New("output tree needs a writeback.Store"))
	}
	t := newOutTree(opt.Store.Backend(), opt)
	t.st = opt.Store
	// The root must exist in stores with directories, so that its listing
	// and uploads under it work.
	if err := t.st.MakeDir(ctx, ""); err != nil {
		return nil, err
	}
	return &outDir{t: t, meta: t.loadedMeta(0o755, time.Now())}, nil
}

func newOutTree(b backends.Backend, opt OutputOptions) *outTree {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &outTree{b: b, opt: opt, log: log, inos: fuseconn.NewInodes(),
		owner: Owner{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}}
	if opt.Owner != nil {
		t.owner = *opt.Owner
	}
	return t
}

// MountOutput mounts an output tree at mountpoint.
func MountOutput(ctx context.Context, mountpoint string, opt OutputOptions, mopt MountOptions) (*Server, error) {
	root, err := NewOutputRoot(ctx, opt)
	if err != nil {
		return nil, err
	}
	return fuseconn.MountTree(mountpoint, &outputTree{root: root.(*outDir)}, outputMountOptions(opt, mopt))
}

// outputMountOptions are the mount options of an output tree.
func outputMountOptions(opt OutputOptions, mopt MountOptions) MountOptions {
	if mopt.EntryTimeout == 0 {
		mopt.EntryTimeout = outputCacheTimeout
	}
	if mopt.AttrTimeout == 0 {
		mopt.AttrTimeout = outputCacheTimeout
	}
	if mopt.NegativeTimeout == 0 {
		mopt.NegativeTimeout = outputCacheTimeout
	}
	if mopt.Log == nil {
		mopt.Log = opt.Log
	}
	mopt.ReadOnly = false
	// The kernel checks permissions against the modes and owners this
	// tree reports (see docs/SEMANTICS.md, "Permissions").
	mopt.DefaultPermissions = true
	return mopt
}

// outKey returns the backend key of a node: its path from the root.
func outKey(n *gofs.Inode) string { return n.Path(nil) }

func childKey(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// outDir is a directory of the output tree.
type outDir struct {
	gofs.Inode
	t *outTree

	mu     sync.Mutex
	loaded bool     // GUARDED_BY(mu): the backend listing was merged in
	meta   nodeMeta // GUARDED_BY(mu)
}

var (
	_ = (gofs.NodeLookuper)((*outDir)(nil))
	_ = (gofs.NodeReaddirer)((*outDir)(nil))
	_ = (gofs.NodeGetattrer)((*outDir)(nil))
	_ = (gofs.NodeSetattrer)((*outDir)(nil))
	_ = (gofs.NodeMkdirer)((*outDir)(nil))
	_ = (gofs.NodeRmdirer)((*outDir)(nil))
	_ = (gofs.NodeCreater)((*outDir)(nil))
	_ = (gofs.NodeUnlinker)((*outDir)(nil))
	_ = (gofs.NodeRenamer)((*outDir)(nil))
	_ = (gofs.NodeSymlinker)((*outDir)(nil))
	_ = (gofs.NodeStatfser)((*outDir)(nil))
)

// load merges the backend's listing and the Store's staged files into the
// directory's children, once.
func (d *outDir) load(ctx context.Context) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.loaded {
		return 0
	}
	key := outKey(&d.Inode)
	if d.loadSeed(ctx, key) {
		d.loaded = true
		return 0
	}
	prefix := ""
	if key != "" {
		prefix = key + "/"
	}
	files := map[string]backends.ObjectInfo{}
	dirs := map[string]bool{}
	dirInfo := map[string]backends.ObjectInfo{}
	opt := backends.ListOptions{Prefix: prefix, Links: true}
	for {
		page, err := d.t.b.List(ctx, opt)
		if err != nil {
			return ToErrno(d.t.log, "readdir", key, err)
		}
		for _, o := range page.Objects {
			name := strings.TrimSuffix(strings.TrimPrefix(o.Key, prefix), "/")
			if name == "" || strings.Contains(name, "/") {
				continue
			}
			if o.IsDir {
				dirs[name] = true
				if dirInfo[name].Mode == 0 {
					dirInfo[name] = o
				}
			} else {
				files[name] = o
			}
		}
		for _, p := range page.Prefixes {
			if name := strings.TrimSuffix(strings.TrimPrefix(p, prefix), "/"); name != "" && !strings.Contains(name, "/") {
				dirs[name] = true
			}
		}
		if page.NextToken == "" {
			break
		}
		opt.Token = page.NextToken
	}
	staged, stagedDirs := d.t.st.Children(key)
	for _, o := range staged {
		files[strings.TrimPrefix(o.Key, prefix)] = o
	}
	for _, n := range stagedDirs {
		dirs[n] = true
	}
	for name := range dirs {
		if d.GetChild(name) == nil {
			o := dirInfo[name]
			mt := o.ModTime
			if mt.IsZero() {
				mt = time.Now()
			}
			d.AddChild(name, d.newChild(ctx, key, name, &outDir{t: d.t, meta: d.t.loadedMeta(dirMode(o.Mode), mt)}, syscall.S_IFDIR), false)
		}
	}
	for name, o := range files {
		if d.GetChild(name) != nil || dirs[name] {
			continue
		}
		if o.Link != "" {
			d.AddChild(name, d.newChild(ctx, key, name, &outLink{t: d.t, target: o.Link, fromStore: true, meta: d.t.loadedMeta(0o777, o.ModTime)}, syscall.S_IFLNK), false)
			continue
		}
		info := o
		d.AddChild(name, d.newChild(ctx, key, name, &outFile{t: d.t, base: &info, meta: d.t.loadedMeta(fileMode(o.Mode), o.ModTime)}, syscall.S_IFREG), false)
	}
	d.loaded = true
	return 0
}

// fileMode and dirMode are the modes of what the backend holds: the
// store's where it keeps them (NAS, HDFS), else the usual defaults.
func fileMode(m uint32) uint32 {
	if m&0o7777 == 0 {
		return 0o644
	}
	return m & 0o7777
}

func dirMode(m uint32) uint32 {
	if m&0o7777 == 0 {
		return 0o755
	}
	return m & 0o7777
}

func (d *outDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := d.load(ctx); errno != 0 {
		return nil, errno
	}
	ch := d.GetChild(name)
	if ch == nil {
		// A name the store could never hold is ENAMETOOLONG, not ENOENT
		// (POSIX; pjdfstest */02.t). The backend, not the Store, which
		// is not open yet while taking over.
		key := childKey(outKey(&d.Inode), name)
		if err := backends.CheckName(d.t.b, "lookup", key); err != nil {
			return nil, ToErrno(d.t.log, "lookup", key, err)
		}
		return nil, syscall.ENOENT
	}
	if d.t.replaying.Load() {
		// Taking over: the kernel has the attributes; the Store is not
		// open yet.
		return ch, 0
	}
	if ga, ok := ch.Operations().(gofs.NodeGetattrer); ok {
		var ao fuse.AttrOut
		if errno := ga.Getattr(ctx, nil, &ao); errno != 0 {
			return nil, errno
		}
		out.Attr = ao.Attr
	}
	return ch, 0
}

func (d *outDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	if errno := d.load(ctx); errno != 0 {
		return nil, errno
	}
	kids := d.Children()
	names := make([]string, 0, len(kids))
	for n := range kids {
		names = append(names, n)
	}
	sort.Strings(names)
	entries := make([]fuse.DirEntry, 0, len(names))
	for _, n := range names {
		ch := kids[n]
		entries = append(entries, fuse.DirEntry{Name: n, Mode: ch.StableAttr().Mode, Ino: ch.StableAttr().Ino})
	}
	return gofs.NewListDirStream(entries), 0
}

// Getattr counts sub-directories for the link count (2 + their number,
// as find(1) and others expect), so it lists the directory if that has
// not happened yet.
func (d *outDir) Getattr(ctx context.Context, _ gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := d.load(ctx); errno != 0 {
		return errno
	}
	nlink := uint32(2)
	for _, ch := range d.Children() {
		if ch.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
			nlink++
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.meta.fill(out, syscall.S_IFDIR, d.meta.mtime)
	out.Nlink = nlink
	out.Size = 4096
	return 0
}

func (d *outDir) Setattr(ctx context.Context, _ gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	d.mu.Lock()
	d.meta.set(in)
	if mt, ok := in.GetMTime(); ok {
		d.meta.mtime = mt
	}
	d.mu.Unlock()
	return d.Getattr(ctx, nil, out)
}

// touch records a change of the directory's entries.
func (d *outDir) touch() {
	now := time.Now()
	d.mu.Lock()
	d.meta.mtime, d.meta.ctime = now, now
	d.mu.Unlock()
}

func (d *outDir) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	// Free space is the staging disk's: that is where writes land first.
	var s syscall.Statfs_t
	if err := syscall.Statfs(d.t.st.StagingDir(), &s); err != nil {
		return ToErrno(d.t.log, "statfs", "", err)
	}
	out.FromStatfsT(&s)
	return 0
}

func (d *outDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := d.load(ctx); errno != 0 {
		return nil, errno
	}
	if d.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	key := childKey(outKey(&d.Inode), name)
	if err := d.t.st.CheckName(key); err != nil {
		return nil, ToErrno(d.t.log, "mkdir", key, err)
	}
	if err := d.t.st.MakeDir(ctx, key); err != nil {
		return nil, ToErrno(d.t.log, "mkdir", key, err)
	}
	nd := &outDir{t: d.t, loaded: true, meta: d.newMeta(ctx, mode, true)}
	ch := d.newChild(ctx, outKey(&d.Inode), name, nd, syscall.S_IFDIR)
	var ao fuse.AttrOut
	nd.Getattr(ctx, nil, &ao)
	out.Attr = ao.Attr
	d.touch()
	return ch, 0
}

func (d *outDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	if errno := d.load(ctx); errno != 0 {
		return errno
	}
	ch := d.GetChild(name)
	if ch == nil {
		return syscall.ENOENT
	}
	cd, ok := ch.Operations().(*outDir)
	if !ok {
		return syscall.ENOTDIR
	}
	if errno := cd.load(ctx); errno != 0 {
		return errno
	}
	if len(ch.Children()) > 0 {
		return syscall.ENOTEMPTY
	}
	key := childKey(outKey(&d.Inode), name)
	if err := d.t.st.RemoveDir(ctx, key); err != nil {
		return ToErrno(d.t.log, "rmdir", key, err)
	}
	d.touch()
	return 0
}

func (d *outDir) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if errno := d.load(ctx); errno != 0 {
		return nil, nil, 0, errno
	}
	if d.GetChild(name) != nil {
		return nil, nil, 0, syscall.EEXIST
	}
	key := childKey(outKey(&d.Inode), name)
	if err := d.t.st.CheckName(key); err != nil {
		return nil, nil, 0, ToErrno(d.t.log, "create", key, err)
	}
	h, err := d.t.st.Open(ctx, key, nil, writeback.OpenFlags{Write: true, Truncate: true, Passthrough: !d.t.opt.NoPassthrough})
	if err != nil {
		return nil, nil, 0, ToErrno(d.t.log, "create", key, err)
	}
	f := &outFile{t: d.t, meta: d.newMeta(ctx, mode, false)}
	ch := d.newChild(ctx, outKey(&d.Inode), name, f, syscall.S_IFREG)
	fh := newOutHandle(ctx, f, h, true)
	var ao fuse.AttrOut
	f.Getattr(ctx, fh, &ao)
	out.Attr = ao.Attr
	d.touch()
	return ch, fh, 0, 0
}

func (d *outDir) Unlink(ctx context.Context, name string) syscall.Errno {
	if errno := d.load(ctx); errno != 0 {
		return errno
	}
	ch := d.GetChild(name)
	if ch == nil {
		return syscall.ENOENT
	}
	key := childKey(outKey(&d.Inode), name)
	switch ch.Operations().(type) {
	case *outDir:
		return syscall.EISDIR
	case *outSpecial:
		// Nothing in the store.
	default:
		if err := d.t.st.Remove(ctx, key); err != nil {
			return ToErrno(d.t.log, "unlink", key, err)
		}
	}
	goneNode(ch)
	d.touch()
	return 0
}

func (d *outDir) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&^uint32(unix.RENAME_NOREPLACE) != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported
	}
	nd, ok := newParent.(*outDir)
	if !ok {
		return syscall.EXDEV
	}
	if errno := d.load(ctx); errno != 0 {
		return errno
	}
	if errno := nd.load(ctx); errno != 0 {
		return errno
	}
	src := d.GetChild(name)
	if src == nil {
		return syscall.ENOENT
	}
	dst := nd.GetChild(newName)
	if dst == src {
		return 0
	}
	if dst != nil && flags&unix.RENAME_NOREPLACE != 0 {
		return syscall.EEXIST
	}
	from := childKey(outKey(&d.Inode), name)
	to := childKey(outKey(&nd.Inode), newName)
	if err := d.t.st.CheckName(to); err != nil {
		return ToErrno(d.t.log, "rename", to, err)
	}
	var err error
	switch src.Operations().(type) {
	case *outDir:
		// Not into itself or below.
		for p := &nd.Inode; p != nil; {
			if p == src {
				return syscall.EINVAL
			}
			_, p = p.Parent()
		}
		if dst != nil {
			dd, ok := dst.Operations().(*outDir)
			if !ok {
				return syscall.ENOTDIR
			}
			if errno := dd.load(ctx); errno != 0 {
				return errno
			}
			if len(dst.Children()) > 0 {
				return syscall.ENOTEMPTY
			}
		}
		if err = d.t.moveLinksUnder(ctx, src, from, to); err == nil {
			err = d.t.st.RenameDir(ctx, from, to)
		}
	default:
		if dst != nil {
			if _, ok := dst.Operations().(*outDir); ok {
				return syscall.EISDIR
			}
		}
		if l, isLink := src.Operations().(*outLink); isLink {
			err = d.t.renameLink(ctx, from, to, l.target, dst != nil)
		} else if _, special := src.Operations().(*outSpecial); special {
			if dst != nil {
				err = d.t.st.Remove(ctx, to) // the special node has nothing to move
			}
		} else {
			if dst != nil && (isLinkNode(dst) || isSpecialNode(dst)) {
				// The Store knows files only: take the link away first.
				if err := d.t.st.Remove(ctx, to); err != nil {
					return ToErrno(d.t.log, "rename", to, err)
				}
			}
			err = d.t.st.Rename(ctx, from, to)
		}
	}
	if err != nil {
		return ToErrno(d.t.log, "rename", from, err)
	}
	d.touch()
	nd.touch()
	touchNode(src)
	if dst != nil {
		goneNode(dst)
	}
	return 0
}

func (d *outDir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := d.load(ctx); errno != 0 {
		return nil, errno
	}
	if d.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	lk, ok := backends.As[backends.Linker](d.t.b)
	if !ok {
		return nil, syscall.EPERM // symlink(2): the file system does not support links
	}
	key := childKey(outKey(&d.Inode), name)
	if err := d.t.st.CheckName(key); err != nil {
		return nil, ToErrno(d.t.log, "symlink", key, err)
	}
	if err := lk.Symlink(ctx, key, target); err != nil {
		return nil, ToErrno(d.t.log, "symlink", key, err)
	}
	l := &outLink{t: d.t, target: target, meta: d.newMeta(ctx, 0o777, false)}
	ch := d.newChild(ctx, outKey(&d.Inode), name, l, syscall.S_IFLNK)
	var ao fuse.AttrOut
	l.Getattr(ctx, nil, &ao)
	out.Attr = ao.Attr
	d.touch()
	return ch, 0
}

func isSpecialNode(n *gofs.Inode) bool {
	_, ok := n.Operations().(*outSpecial)
	return ok
}

func isLinkNode(n *gofs.Inode) bool {
	_, ok := n.Operations().(*outLink)
	return ok
}
