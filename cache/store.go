package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// Disk layout, under Options.Dir:
//
//	v1/<id[:2]>/<id>        a complete object (its bytes, exactly Size long)
//	v1/<id[:2]>/<id>.part   a sparse file of Size bytes, some blocks present
//	v1/<id[:2]>/<id>.meta   which blocks of <id>.part are present
//
// id = <hash(backend ID, key)>-<hash(version)>, so every version of one key
// shares a prefix (older versions are found and dropped) and a changed object
// can never be read from an older version's file.
//
// Eviction is least recently used, by whole object; across a restart the
// order comes from the files' mtimes (when they were last written).
//
// Crash safety: a block is marked in .meta only after .part was fdatasync'd
// with it, and a .part becomes <id> (by rename) only after fdatasync. So
// after any crash, what the index says is present is present; at worst some
// written blocks are fetched again.
//
// The exception is an object of one block, which is written whole as
// <id>.tmp and renamed to <id> without fdatasync (its cost, per small file,
// bounded small-file epochs). Those are covered by a marker, v1/unsynced,
// holding the boot ID of the kernel that holds their unwritten pages: the
// marker is made durable when the cache opens and removed after a syncfs
// when it closes. A cache that opens to find the marker of another boot
// (the machine went down without our Close) drops every one-block object,
// since any of them may be torn; after a crash of the daemon alone the
// kernel still writes them back, and they are kept.
const layoutVersion = "v1"

const (
	unsyncedName = "unsynced" // under v1/: the boot ID of unsynced objects
	partSuffix   = ".part"
	metaSuffix   = ".meta"
	tmpSuffix    = ".tmp"
	metaMagic    = "MLFSDC1\n"
)

// objectID names one (backend, key, version).
func objectID(backendID, key, version string) string {
	kh := sha256.Sum256([]byte(backendID + "\x00" + key))
	vh := sha256.Sum256([]byte(version))
	return hex.EncodeToString(kh[:16]) + "-" + hex.EncodeToString(vh[:8])
}

// validID reports whether name has the shape objectID gives.
func validID(name string) bool {
	if len(name) != 32+1+16 || name[32] != '-' {
		return false
	}
	for i, r := range name {
		if i != 32 && !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// keyPrefix is the part of an id shared by every version of one key.
func keyPrefix(id string) string {
	i := strings.IndexByte(id, '-')
	if i < 0 {
		return id
	}
	return id[:i]
}

func (c *Cache) dirOf(id string) string { return filepath.Join(c.opt.Dir, layoutVersion, id[:2]) }

func (c *Cache) completePath(id string) string { return filepath.Join(c.dirOf(id), id) }

func (c *Cache) partPath(id string) string { return c.completePath(id) + partSuffix }

func (c *Cache) metaPath(id string) string { return c.completePath(id) + metaSuffix }

// bitmap records which blocks are present.
type bitmap []uint64

func newBitmap(n int64) bitmap { return make(bitmap, (n+63)/64) }

func (b bitmap) has(i int64) bool { return b[i/64]&(1<<(uint(i)%64)) != 0 }

func (b bitmap) set(i int64) { b[i/64] |= 1 << (uint(i) % 64) }

func (b bitmap) count() int64 {
	var n int
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return int64(n)
}

// encodeMeta serialises a .meta file: magic, size, block size, bitmap.
func encodeMeta(size, blockSize int64, bm bitmap) []byte {
	buf := make([]byte, 0, len(metaMagic)+16+8*len(bm))
	buf = append(buf, metaMagic...)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(size))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(blockSize))
	for _, w := range bm {
		buf = binary.LittleEndian.AppendUint64(buf, w)
	}
	return buf
}

func decodeMeta(buf []byte, blockSize int64) (size int64, bm bitmap, err error) {
	if len(buf) < len(metaMagic)+16 || string(buf[:len(metaMagic)]) != metaMagic {
		return 0, nil, errors.New("not a cache metadata file")
	}
	buf = buf[len(metaMagic):]
	size = int64(binary.LittleEndian.Uint64(buf))
	bs := int64(binary.LittleEndian.Uint64(buf[8:]))
	buf = buf[16:]
	if bs != blockSize {
		return 0, nil, fmt.Errorf("block size %d, want %d", bs, blockSize)
	}
	if size < 0 {
		return 0, nil, fmt.Errorf("bad size %d", size)
	}
	n := (size + bs - 1) / bs
	bm = newBitmap(n)
	if len(buf) != 8*len(bm) {
		return 0, nil, errors.New("truncated bitmap")
	}
	for i := range bm {
		bm[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	return size, bm, nil
}

// createWhole writes a one-block object as its complete file: <id>.tmp
// renamed to <id>, not synced (see the layout notes). It returns the file
// open for reading, at its offset 0.
func (c *Cache) createWhole(id string, data []byte) (*os.File, error) {
	path := c.completePath(id)
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if errors.Is(err, os.ErrNotExist) { // someone removed our directories
		if err = os.MkdirAll(c.dirOf(id), 0o700); err == nil {
			f, err = os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		}
	}
	if err != nil {
		return nil, err
	}
	if _, err = f.Write(data); err == nil {
		c.unsynced.Store(true)
		err = os.Rename(tmp, path)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	return f, nil
}

// bootID names this boot of the kernel ("" when unknown: then any marker
// left behind counts as another boot's).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// unsyncedMarkerStale reports whether the disk tier holds a marker of
// unsynced objects left by another boot (see the layout notes).
func (c *Cache) unsyncedMarkerStale() bool {
	b, err := os.ReadFile(filepath.Join(c.opt.Dir, layoutVersion, unsyncedName))
	if err != nil {
		return false // none: the last Close synced everything
	}
	id := strings.TrimSpace(string(b))
	return id == "" || id != c.opt.bootID
}

// markUnsynced makes the marker durable before any unsynced object is
// written: its content, then its name in the directory.
func (c *Cache) markUnsynced() error {
	root := filepath.Join(c.opt.Dir, layoutVersion)
	return atomicfile.Write(filepath.Join(root, unsyncedName), []byte(c.opt.bootID+"\n"), 0o600, atomicfile.Durable)
}

// clearUnsynced syncs the filesystem of the disk tier when objects were
// written unsynced, then removes the marker (Close).
func (c *Cache) clearUnsynced() error {
	if c.unsynced.Load() {
		if err := unix.Syncfs(int(c.lock.Fd())); err != nil {
			return fmt.Errorf("cache dir: syncfs: %w", err)
		}
	}
	err := os.Remove(filepath.Join(c.opt.Dir, layoutVersion, unsyncedName))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return err
}

// ErrDirBusy means another process (or Cache) is using the cache directory.
// Two writers of one disk tier would corrupt each other's accounting.
var ErrDirBusy = errors.New("cache directory is in use by another mlfsd")

// DirBusyError is ErrDirBusy with the process that holds the directory,
// as far as its lock file tells (the holder writes its pid there).
type DirBusyError struct {
	Dir string
	// PID is the holder's process ID, 0 when unknown; Command its
	// program and subcommand ("mlfsd daemon", from /proc; no more of the
	// command line), "" when unknown.
	PID     int
	Command string
}

// Error names the holder and what to do instead.
func (e *DirBusyError) Error() string {
	switch {
	case e.PID > 0 && strings.HasSuffix(e.Command, " daemon"):
		return fmt.Sprintf("a daemon (pid %d) already serves this cache directory (%s): mount through it (`mlfsd mount --daemon SOCKET`, daemon=SOCKET in mount -o), or give this one another --cache-dir", e.PID, e.Dir)
	case e.PID > 0 && e.Command != "":
		return fmt.Sprintf("another mlfsd (pid %d: %s) already uses this cache directory (%s): stop it, or give this one another --cache-dir", e.PID, e.Command, e.Dir)
	case e.PID > 0:
		return fmt.Sprintf("another mlfsd (pid %d) already uses this cache directory (%s): stop it, or give this one another --cache-dir", e.PID, e.Dir)
	}
	return fmt.Sprintf("another mlfsd already uses this cache directory (%s): stop it, or give this one another --cache-dir", e.Dir)
}

// Unwrap makes errors.Is(err, ErrDirBusy) hold.
func (e *DirBusyError) Unwrap() error { return ErrDirBusy }

// lockDir takes the exclusive lock on a cache directory (creating it) and
// writes this process's pid into the lock file, so that a second process
// can say who holds it.
func lockDir(dir string) (*os.File, error) {
	root := filepath.Join(dir, layoutVersion)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(root, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, lockHolder(dir, f)
		}
		return nil, fmt.Errorf("cache dir %s: lock: %w", dir, err)
	}
	// Only a message depends on it: a failure to write it is no reason
	// not to run.
	if f.Truncate(0) == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockHolder reads who holds a lock file: the pid its holder wrote, and
// that process's command line while it runs.
func lockHolder(dir string, f *os.File) *DirBusyError {
	e := &DirBusyError{Dir: dir}
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return e
	}
	e.PID = pid
	if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		args := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		e.Command = filepath.Base(args[0])
		for _, a := range args[1:] {
			if !strings.HasPrefix(a, "-") {
				e.Command += " " + a
				break
			}
		}
	}
	return e
}

// scanned is one object found on disk at startup.
type scanned struct {
	id        string
	size      int64
	complete  bool
	present   bitmap // nil when complete
	diskBytes int64
	atime     time.Time
}

// scanDir indexes the disk tier left by an earlier run, removing whatever
// cannot be trusted (temporaries, parts without metadata and vice versa,
// metadata that does not parse, and, when dropWhole, complete objects of
// one block: they may have been written unsynced before a reboot).
func (c *Cache) scanDir(dropWhole bool) ([]scanned, error) {
	root := filepath.Join(c.opt.Dir, layoutVersion)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	var out []scanned
	progress := newScanProgress(c.opt.Progress, c.opt.Dir, c.opt.progressEvery)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		progress.tick(len(out))
		name := d.Name()
		if target, ok := atomicfile.TempTarget(name); ok {
			// A bitmap or the marker never renamed into place.
			if validID(strings.TrimSuffix(target, metaSuffix)) || target == unsyncedName {
				os.Remove(path)
			}
			return nil
		}
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, tmpSuffix), metaSuffix), partSuffix), tmpSuffix)
		if !validID(base) || filepath.Base(filepath.Dir(path)) != base[:2] {
			return nil // not ours (the lock file, or something a person put here)
		}
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			os.Remove(path)
		case strings.HasSuffix(name, metaSuffix):
			if _, err := os.Stat(strings.TrimSuffix(path, metaSuffix) + partSuffix); err != nil {
				os.Remove(path)
			}
		case strings.HasSuffix(name, partSuffix):
			id := strings.TrimSuffix(name, partSuffix)
			s, ok := c.loadPart(path, id)
			if !ok {
				os.Remove(path)
				os.Remove(strings.TrimSuffix(path, partSuffix) + metaSuffix)
				return nil
			}
			out = append(out, s)
		default:
			st, err := os.Stat(path)
			if err != nil {
				return nil
			}
			if dropWhole && st.Size() <= c.opt.BlockSize {
				os.Remove(path)
				return nil
			}
			out = append(out, scanned{id: name, size: st.Size(), complete: true,
				diskBytes: diskUsage(st), atime: st.ModTime()})
		}
		return nil
	})
	progress.done(len(out))
	return out, err
}

// scanProgressEvery is how often a slow index of the disk tier says how far
// it got.
const scanProgressEvery = time.Second

// scanProgress prints how far the index of the disk tier got, once per
// interval, so that a start that takes long says why.
type scanProgress struct {
	w           io.Writer // nil: silent
	dir         string
	every       time.Duration
	start, last time.Time
	printed     bool
}

func newScanProgress(w io.Writer, dir string, every time.Duration) *scanProgress {
	if every == 0 {
		every = scanProgressEvery
	}
	now := time.Now()
	return &scanProgress{w: w, dir: dir, every: every, start: now, last: now}
}

func (p *scanProgress) tick(objects int) {
	if p.w == nil {
		return
	}
	if now := time.Now(); now.Sub(p.last) >= p.every {
		p.last = now
		p.printed = true
		fmt.Fprintf(p.w, "mlfsd: indexing the disk cache %s: %d objects so far\n", p.dir, objects)
	}
}

func (p *scanProgress) done(objects int) {
	if p.w != nil && p.printed {
		fmt.Fprintf(p.w, "mlfsd: indexed the disk cache %s: %d objects in %v\n", p.dir, objects, time.Since(p.start).Round(time.Millisecond))
	}
}

func (c *Cache) loadPart(path, id string) (scanned, bool) {
	metaPath := strings.TrimSuffix(path, partSuffix) + metaSuffix
	buf, err := os.ReadFile(metaPath)
	if err != nil {
		return scanned{}, false
	}
	size, bm, err := decodeMeta(buf, c.opt.BlockSize)
	if err != nil {
		c.log.Warn("cache: dropping unreadable metadata", "path", metaPath, "err", err)
		return scanned{}, false
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() != size {
		return scanned{}, false
	}
	return scanned{id: id, size: size, present: bm, diskBytes: diskUsage(st), atime: st.ModTime()}, true
}

// diskUsage is the space a file really takes (sparse files take less).
func diskUsage(st os.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Blocks * 512
	}
	return st.Size()
}

// freeBytes reports the space available to us on the filesystem of dir.
func freeBytes(dir string) (int64, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return 0, err
	}
	return int64(s.Bavail) * int64(s.Bsize), nil
}
