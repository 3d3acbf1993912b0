// Package nas is the mlfsd backend for nas:// (and file://) URIs: a POSIX
// directory, typically an NFS or CPFS mount on the host.
//
// Keys map to paths under the root directory. Every path is resolved by the
// kernel with openat2(RESOLVE_BENEATH) relative to a descriptor of the
// root, so neither "..", nor an absolute symlink, nor a symlink pointing
// outside can make the backend serve or change anything outside its root;
// symlinks that stay inside are followed. Writes stream into a hidden
// temporary file (".mlfsd-tmp-*") in the target's directory and are
// published by fsync and rename on Commit, so a reader sees the old object
// or the whole new one, never a part. A directory is a real directory: it
// lists as an object with IsDir set.
//
// The version token is inode, modification time (ns) and size: an
// overwrite always changes it (the renamed temporary file is a new inode),
// and so does any change made behind the backend's back that touches
// mtime.
package nas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
)

// Options configures the backend. There is nothing to configure yet: the
// root comes from the URI, and permissions from the process's umask.
type Options struct{}

// Compile-time checks of the optional interfaces the backend provides.
var (
	_ backends.Renamer  = (*backend)(nil)
	_ backends.Appender = (*backend)(nil)
	_ backends.DirMaker = (*backend)(nil)
)

// backend serves one root directory.
type backend struct {
	id   string
	root string
	log  *slog.Logger

	// mu guards rootfd: every operation that resolves a path holds it for
	// reading, so Close (which holds it for writing) cannot close the
	// descriptor, and the number be reused, under a path walk. Methods
	// acquire it once at their top; helpers below them assume it is held.
	mu     sync.RWMutex
	rootfd int // O_PATH descriptor of the root; -1 once closed

	lists dirCache // wide directories' sorted names, between pages
}

// New opens the backend rooted at the directory URI u. The root must exist
// and be a directory; symlinks in the root path itself are resolved once,
// here.
func New(ctx context.Context, u backends.URI, opt Options, log *slog.Logger) (backends.Backend, error) {
	if u.Scheme != backends.SchemeNAS {
		return nil, fmt.Errorf("nas backend: URI %s is not a nas:// or file:// URI", u)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := u.Dir()
	root := filepath.Clean(dir.Path)
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		switch err {
		case unix.ENOENT:
			return nil, fmt.Errorf("nas root %s does not exist: %w", root, backends.ErrNotExist)
		case unix.ENOTDIR:
			return nil, fmt.Errorf("nas root %s is not a directory: %w", root, backends.ErrNotDir)
		}
		return nil, fmt.Errorf("nas root %s: %w", root, mapErr("open root", root, err))
	}
	// openat2 arrived in Linux 5.6; without it the root cannot be enforced.
	if probe, err := openBeneath(fd, ".", unix.O_PATH|unix.O_DIRECTORY); err != nil {
		unix.Close(fd)
		if err == unix.ENOSYS {
			return nil, fmt.Errorf("nas root %s: the kernel lacks openat2 (Linux 5.6 or newer is needed to confine paths to the root)", root)
		}
		return nil, fmt.Errorf("nas root %s: %w", root, mapErr("open root", root, err))
	} else {
		unix.Close(probe)
	}
	b := &backend{id: dir.String(), root: root, log: log.With("backend", dir.String()), rootfd: fd}
	return b, nil
}

// errClosed is returned by operations on a closed backend.
var errClosed = fmt.Errorf("%w: nas backend is closed", backends.ErrInvalid)

// acquire holds the root descriptor open until release is called.
func (b *backend) acquire(ctx context.Context) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.RLock()
	if b.rootfd < 0 {
		b.mu.RUnlock()
		return nil, errClosed
	}
	return b.mu.RUnlock, nil
}

// ID names the backend by its canonical URI.
func (b *backend) ID() string { return b.id }

// Close releases the root descriptor. Readers and writers already handed
// out keep working on their own descriptors.
func (b *backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rootfd < 0 {
		return nil
	}
	err := unix.Close(b.rootfd)
	b.rootfd = -1
	if err != nil {
		return fmt.Errorf("nas: close root %s: %w", b.root, err)
	}
	return nil
}

// info describes key from its stat data.
func info(key string, st *unix.Stat_t) backends.ObjectInfo {
	oi := backends.ObjectInfo{
		Key:     key,
		Size:    st.Size,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Version: version(st),
		Mode:    st.Mode & 0o7777,
		Owned:   true,
		UID:     st.Uid,
		GID:     st.Gid,
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		oi.IsDir = true
		oi.Size = 0
	}
	return oi
}

// version is the NAS version token: inode, mtime in ns, size.
func version(st *unix.Stat_t) string {
	return fmt.Sprintf("%x-%x-%x", st.Ino, st.Mtim.Nano(), st.Size)
}

func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
func isReg(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFREG }

// notServed is the error for something that is neither a regular file nor
// a directory (a FIFO, socket or device): never served, so a read cannot
// block on a FIFO or touch a device.
func notServed(op, key string) error {
	return backends.Wrap(op, key, backends.ErrNotExist, errors.New("not a regular file or directory"))
}

// Stat describes a file or directory; symlinks inside the root are
// followed.
func (b *backend) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	release, err := b.acquire(ctx)
	if err != nil {
		return backends.ObjectInfo{}, mapErr("stat", key, err)
	}
	defer release()
	p, err := parseKey("stat", key, false)
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	fd, err := openBeneath(b.rootfd, p.rel, unix.O_PATH)
	if err != nil {
		return backends.ObjectInfo{}, mapErr("stat", key, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return backends.ObjectInfo{}, mapErr("stat", key, err)
	}
	switch {
	case isDir(&st):
	case !isReg(&st):
		return backends.ObjectInfo{}, notServed("stat", key)
	case p.slash:
		return backends.ObjectInfo{}, backends.Wrap("stat", key, backends.ErrNotDir, nil)
	}
	return info(p.key, &st), nil
}

// Read opens a ranged reader on a regular file.
func (b *backend) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	release, err := b.acquire(ctx)
	if err != nil {
		return nil, mapErr("read", key, err)
	}
	defer release()
	if opt.Offset < 0 {
		return nil, backends.Wrap("read", key, backends.ErrInvalid, fmt.Errorf("negative offset %d", opt.Offset))
	}
	p, err := parseKey("read", key, false)
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK: opening a FIFO must not hang; it is refused below.
	fd, err := openBeneath(b.rootfd, p.rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, mapErr("read", key, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, mapErr("read", key, err)
	}
	switch {
	case isDir(&st):
		unix.Close(fd)
		return nil, backends.Wrap("read", key, backends.ErrIsDir, nil)
	case !isReg(&st):
		unix.Close(fd)
		return nil, notServed("read", key)
	case opt.IfVersion != "" && version(&st) != opt.IfVersion:
		unix.Close(fd)
		return nil, backends.Wrap("read", key, backends.ErrVersionMismatch,
			fmt.Errorf("have version %s, want %s", version(&st), opt.IfVersion))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, mapErr("read", key, err)
	}
	n := opt.Length
	if n < 0 || n > math.MaxInt64-opt.Offset {
		n = math.MaxInt64 - opt.Offset
	}
	f := os.NewFile(uintptr(fd), filepath.Join(b.root, p.rel))
	return &reader{ctx: ctx, key: key, f: f, r: io.NewSectionReader(f, opt.Offset, n)}, nil
}

// reader is a ranged read of one open file. It reads with pread, so the
// file may be shared; it stops with ctx.
type reader struct {
	ctx context.Context
	key string
	f   *os.File
	r   *io.SectionReader
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, mapErr("read", r.key, err)
	}
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = mapErr("read", r.key, err)
	}
	return n, err
}

func (r *reader) Close() error { return r.f.Close() }

// Delete removes a file (or symlink) or an empty directory. A trailing '/'
// insists on a directory.
func (b *backend) Delete(ctx context.Context, key string) error {
	release, err := b.acquire(ctx)
	if err != nil {
		return mapErr("delete", key, err)
	}
	defer release()
	p, err := parseKey("delete", key, true)
	if err != nil {
		return err
	}
	if p.rel == "." {
		return backends.Wrap("delete", key, backends.ErrInvalid, errors.New("cannot delete the backend root"))
	}
	parent, base := splitRel(p.rel)
	pfd, err := openBeneath(b.rootfd, parent, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return mapErr("delete", key, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return mapErr("delete", key, err)
	}
	if isDir(&st) {
		err = unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
		if err == unix.EEXIST {
			err = unix.ENOTEMPTY
		}
	} else if p.slash {
		return backends.Wrap("delete", key, backends.ErrNotDir, nil)
	} else {
		err = unix.Unlinkat(pfd, base, 0)
	}
	if err != nil {
		return mapErr("delete", key, err)
	}
	return syncDir(pfd)
}

// MakeDir creates a directory and its parents; an existing directory is
// fine, an existing file is ErrExist.
func (b *backend) MakeDir(ctx context.Context, key string) error {
	release, err := b.acquire(ctx)
	if err != nil {
		return mapErr("mkdir", key, err)
	}
	defer release()
	p, err := parseKey("mkdir", key, true)
	if err != nil {
		return err
	}
	fd, _, err := b.mkdirAll(p.rel)
	if err != nil {
		var st unix.Stat_t
		if errors.Is(err, unix.ENOTDIR) && b.statBeneath(p.rel, &st) == nil && !isDir(&st) {
			return backends.Wrap("mkdir", key, backends.ErrExist, errors.New("a file exists under that name"))
		}
		return mapErr("mkdir", key, err)
	}
	unix.Close(fd)
	return nil
}

// statBeneath stats rel, following symlinks inside the root.
func (b *backend) statBeneath(rel string, st *unix.Stat_t) error {
	fd, err := openBeneath(b.rootfd, rel, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}

// mkdirAll returns an O_PATH descriptor of directory rel, creating it and
// its missing parents. created lists the directories it made, parents
// first, so a failed write can take them away again.
func (b *backend) mkdirAll(rel string) (fd int, created []string, err error) {
	fd, err = openBeneath(b.rootfd, rel, unix.O_PATH|unix.O_DIRECTORY)
	if err != unix.ENOENT || rel == "." {
		return fd, nil, err
	}
	parent, base := splitRel(rel)
	pfd, created, err := b.mkdirAll(parent)
	if err != nil {
		return -1, nil, err
	}
	defer unix.Close(pfd)
	switch err := unix.Mkdirat(pfd, base, 0o777); err {
	case nil:
		created = append(created, rel)
		if err := syncDir(pfd); err != nil {
			b.removeDirs(created)
			return -1, nil, err
		}
	case unix.EEXIST:
		// Made by someone else meanwhile, or a file: the open says which.
	default:
		b.removeDirs(created)
		return -1, nil, err
	}
	// Reopen from the root: should a symlink have appeared under that name
	// meanwhile, it may point elsewhere inside the root, not above pfd.
	fd, err = openBeneath(b.rootfd, rel, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		b.removeDirs(created)
		return -1, nil, err
	}
	return fd, created, nil
}

// removeDirs removes directories made by mkdirAll, deepest first, as long as
// they are still empty (another writer may have used them meanwhile).
func (b *backend) removeDirs(created []string) {
	for i := len(created) - 1; i >= 0; i-- {
		parent, base := splitRel(created[i])
		pfd, err := openBeneath(b.rootfd, parent, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return
		}
		err = unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
		unix.Close(pfd)
		if err != nil {
			return
		}
	}
}

// syncDir makes a directory's entries durable (an O_PATH descriptor cannot
// be fsynced, so it opens the directory for reading first).
func syncDir(dirfd int) error {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil && err != unix.EINVAL {
		// EINVAL: the file system does not sync directories.
		return err
	}
	return nil
}
