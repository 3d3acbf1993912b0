package nas

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
)

// Write starts a streaming write into a hidden temporary file next to the
// target; Commit publishes it with fsync and rename. A key ending in '/'
// writes a directory marker: no bytes, and Commit makes the directory.
func (b *backend) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	release, err := b.acquire(ctx)
	if err != nil {
		return nil, mapErr("write", key, err)
	}
	defer release()
	p, err := parseKey("write", key, true)
	if err != nil {
		return nil, err
	}
	if p.rel == "." {
		return nil, backends.Wrap("write", key, backends.ErrInvalid, errors.New("cannot write the backend root"))
	}
	if p.slash {
		return &writer{b: b, op: "write", key: p.key, rel: p.rel, marker: true, dirfd: -1}, nil
	}
	parent, base := splitRel(p.rel)
	for attempt := 0; ; attempt++ {
		dirfd, created, err := b.mkdirAll(parent)
		if err != nil {
			return nil, mapErr("write", key, err)
		}
		tmp, f, err := createTemp(dirfd)
		if err == unix.ENOENT && attempt < 3 {
			// The directory was removed between making and using it (an
			// aborted writer tidying up): make it again.
			unix.Close(dirfd)
			continue
		}
		if err != nil {
			unix.Close(dirfd)
			b.removeDirs(created)
			return nil, mapErr("write", key, err)
		}
		return &writer{b: b, op: "write", key: p.key, rel: p.rel, dirfd: dirfd, base: base, tmp: tmp, f: f, created: created}, nil
	}
}

// Append starts an append to an existing file. The bytes are staged in a
// temporary file and appended to the target on Commit, so an aborted append
// changes nothing. Concurrent readers may see the appended bytes arrive
// during Commit, as with any POSIX append.
func (b *backend) Append(ctx context.Context, key string) (backends.Writer, error) {
	release, err := b.acquire(ctx)
	if err != nil {
		return nil, mapErr("append", key, err)
	}
	defer release()
	p, err := parseKey("append", key, true)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := b.statBeneath(p.rel, &st); err != nil {
		return nil, mapErr("append", key, err)
	}
	switch {
	case isDir(&st):
		return nil, backends.Wrap("append", key, backends.ErrIsDir, nil)
	case !isReg(&st):
		return nil, notServed("append", key)
	}
	parent, base := splitRel(p.rel)
	dirfd, err := openBeneath(b.rootfd, parent, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, mapErr("append", key, err)
	}
	tmp, f, err := createTemp(dirfd)
	if err != nil {
		unix.Close(dirfd)
		return nil, mapErr("append", key, err)
	}
	return &writer{b: b, op: "append", key: p.key, rel: p.rel, dirfd: dirfd, base: base, tmp: tmp, f: f, appending: true}, nil
}

// createTemp makes a new hidden temporary file in dirfd.
func createTemp(dirfd int) (name string, f *os.File, err error) {
	for {
		var rnd [8]byte
		for i := range rnd {
			rnd[i] = byte(rand.Uint32())
		}
		name = tmpPrefix + hex.EncodeToString(rnd[:])
		fd, err := unix.Openat(dirfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o666)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		return name, os.NewFile(uintptr(fd), name), nil
	}
}

type writeState int

const (
	writing writeState = iota
	committed
	aborted
)

// writer is a write or append in progress. Not safe for concurrent use
// (the contract says so).
type writer struct {
	b         *backend
	op        string // "write" or "append"
	key       string // without a trailing '/'
	rel       string // target path relative to the root
	marker    bool   // a directory marker: Commit makes the directory
	appending bool   // Commit appends the staged bytes to the target

	dirfd   int      // O_PATH descriptor of the target's directory
	base    string   // target name in dirfd
	tmp     string   // temporary file name in dirfd
	f       *os.File // the temporary file
	created []string // directories made for this write

	state writeState
}

func (w *writer) Write(p []byte) (int, error) {
	if w.state != writing {
		return 0, backends.Wrap(w.op, w.key, backends.ErrInvalid, fmt.Errorf("write after %s", w.stateName()))
	}
	if w.marker {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, backends.Wrap(w.op, w.key+"/", backends.ErrInvalid, errors.New("a directory marker holds no data"))
	}
	n, err := w.f.Write(p)
	return n, mapErr(w.op, w.key, err)
}

func (w *writer) stateName() string {
	if w.state == committed {
		return "Commit"
	}
	return "Abort"
}

// Commit publishes the write. On failure nothing new is left under the
// key (and the temporary file is gone).
func (w *writer) Commit(ctx context.Context) (backends.ObjectInfo, error) {
	if w.state != writing {
		return backends.ObjectInfo{}, backends.Wrap(w.op, w.key, backends.ErrInvalid, fmt.Errorf("Commit after %s", w.stateName()))
	}
	release, err := w.b.acquire(ctx)
	if err != nil {
		w.abort(false)
		return backends.ObjectInfo{}, mapErr(w.op, w.key, err)
	}
	defer release()
	var oi backends.ObjectInfo
	switch {
	case w.marker:
		oi, err = w.commitMarker()
	case w.appending:
		oi, err = w.commitAppend()
	default:
		oi, err = w.commitWrite()
	}
	if err != nil {
		w.abort(true)
		return backends.ObjectInfo{}, mapErr(w.op, w.key, err)
	}
	w.state = committed
	w.closeDir()
	return oi, nil
}

func (w *writer) commitWrite() (backends.ObjectInfo, error) {
	if err := w.f.Sync(); err != nil {
		return backends.ObjectInfo{}, err
	}
	// The temporary file's inode, mtime and size are the published
	// object's: take the version from it, not from a later Stat that a
	// concurrent writer could race.
	var st unix.Stat_t
	if err := unix.Fstat(int(w.f.Fd()), &st); err != nil {
		return backends.ObjectInfo{}, err
	}
	if err := w.f.Close(); err != nil {
		return backends.ObjectInfo{}, err
	}
	w.f = nil
	if err := unix.Renameat(w.dirfd, w.tmp, w.dirfd, w.base); err != nil {
		return backends.ObjectInfo{}, err
	}
	w.tmp = ""
	if err := syncDir(w.dirfd); err != nil {
		// Published but perhaps not durable: say so rather than claim it.
		return backends.ObjectInfo{}, fmt.Errorf("published, but syncing its directory failed: %w", err)
	}
	return info(w.key, &st), nil
}

func (w *writer) commitAppend() (backends.ObjectInfo, error) {
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return backends.ObjectInfo{}, err
	}
	fd, err := openBeneath(w.b.rootfd, w.rel, unix.O_WRONLY|unix.O_APPEND|unix.O_NONBLOCK)
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	target := os.NewFile(uintptr(fd), w.rel)
	defer target.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return backends.ObjectInfo{}, err
	}
	if !isReg(&st) {
		return backends.ObjectInfo{}, notServed(w.op, w.key)
	}
	// Plain reads and writes: copy_file_range refuses O_APPEND targets.
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(struct{ io.Writer }{target}, struct{ io.Reader }{w.f}, buf); err != nil {
		return backends.ObjectInfo{}, err
	}
	if err := target.Sync(); err != nil {
		return backends.ObjectInfo{}, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return backends.ObjectInfo{}, err
	}
	w.removeTemp()
	return info(w.key, &st), nil
}

func (w *writer) commitMarker() (backends.ObjectInfo, error) {
	fd, _, err := w.b.mkdirAll(w.rel)
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return backends.ObjectInfo{}, err
	}
	return info(w.key, &st), nil
}

// Abort discards the write; after Commit it does nothing. It cleans up
// even with a cancelled ctx.
func (w *writer) Abort(ctx context.Context) error {
	if w.state != writing {
		return nil
	}
	release, err := w.b.acquire(context.WithoutCancel(ctx))
	w.abort(err == nil)
	if err == nil {
		release()
	}
	return nil
}

// abort removes the temporary file and, when the root is held, the
// directories this write made.
func (w *writer) abort(haveRoot bool) {
	w.state = aborted
	w.removeTemp()
	if haveRoot {
		w.b.removeDirs(w.created)
	}
	w.created = nil
	w.closeDir()
}

func (w *writer) removeTemp() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	if w.tmp != "" {
		if err := unix.Unlinkat(w.dirfd, w.tmp, 0); err != nil && err != unix.ENOENT {
			w.b.log.Warn("nas: cannot remove temporary file", "key", w.key, "tmp", w.tmp, "err", err)
		}
		w.tmp = ""
	}
}

func (w *writer) closeDir() {
	if w.dirfd >= 0 {
		unix.Close(w.dirfd)
		w.dirfd = -1
	}
}

// Rename moves a file or directory within the root, making the
// destination's parents as needed. An existing file at the destination is
// replaced; an existing directory is not (ErrExist).
func (b *backend) Rename(ctx context.Context, from, to string) error {
	release, err := b.acquire(ctx)
	if err != nil {
		return mapErr("rename", from, err)
	}
	defer release()
	pf, err := parseKey("rename", from, true)
	if err != nil {
		return err
	}
	pt, err := parseKey("rename", to, true)
	if err != nil {
		return err
	}
	if pf.rel == "." || pt.rel == "." {
		return backends.Wrap("rename", from, backends.ErrInvalid, errors.New("cannot rename the backend root"))
	}
	fparent, fbase := splitRel(pf.rel)
	fdir, err := openBeneath(b.rootfd, fparent, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return mapErr("rename", from, err)
	}
	defer unix.Close(fdir)
	var st unix.Stat_t
	if err := unix.Fstatat(fdir, fbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return mapErr("rename", from, err)
	}
	tparent, tbase := splitRel(pt.rel)
	tdir, created, err := b.mkdirAll(tparent)
	if err != nil {
		return mapErr("rename", to, err)
	}
	defer unix.Close(tdir)
	if err := unix.Fstatat(tdir, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && isDir(&st) {
		b.removeDirs(created)
		return backends.Wrap("rename", to, backends.ErrExist, errors.New("destination is an existing directory"))
	}
	if err := unix.Renameat(fdir, fbase, tdir, tbase); err != nil {
		b.removeDirs(created)
		return mapErr("rename", from, err)
	}
	if err := syncDir(tdir); err != nil {
		return mapErr("rename", to, err)
	}
	if err := syncDir(fdir); err != nil {
		return mapErr("rename", from, err)
	}
	return nil
}
