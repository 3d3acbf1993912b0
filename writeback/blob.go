package writeback

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/mlfsd/mlfsd/backends"
)

// blob is one staging file. A blob is written only while it is an entry's
// live data and unsealed; once a journal record or an upload names it, it
// is sealed and never changes again (a later write copies it first).
type blob struct {
	name string
	path string
	f    *os.File // read-write; used with ReadAt/WriteAt only (no seeks)
	// size is the logical size. GUARDED_BY(Store.mu); stable during an
	// exclusive operation on the entry (version.go).
	size int64
	// counted is how much of the file metrics.writeBytes has counted:
	// what it held when staged from the backend or a sealed copy, then
	// its size at each seal. GUARDED_BY(Store.mu)
	counted int64
	sealed  bool // GUARDED_BY(Store.mu)
	refs    int  // GUARDED_BY(Store.mu): the entry's cur, and each version naming it
}

func randomID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// newBlob creates an empty staging file with one reference.
func (s *Store) newBlob(key string) (*blob, error) {
	name := randomID()
	p := filepath.Join(s.blobDir, name)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, stagingErr("stage", key, err)
	}
	return &blob{name: name, path: p, f: f, refs: 1}, nil
}

// openBlob opens an existing staging file found at restart.
func (s *Store) openBlob(name string) (*blob, error) {
	p := filepath.Join(s.blobDir, name)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	// Counted by the run that wrote it, if at all: never twice.
	return &blob{name: name, path: p, f: f, size: st.Size(), counted: st.Size(), refs: 1}, nil
}

// blobStat identifies a state of a blob file: its size and change time.
// Linux (6.13+) gives a file a fine-grained ctime on the first change after
// the ctime was read (multigrain timestamps), so a write after a stat is
// always seen as a different ctime.
type blobStat struct {
	size  int64
	ctime int64
}

func (b *blob) stat() (blobStat, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(b.f.Fd()), &st); err != nil {
		return blobStat{}, err
	}
	return blobStat{size: st.Size, ctime: st.Ctim.Nano()}, nil
}

// discard closes and deletes the blob's file.
func (b *blob) discard() {
	b.f.Close()
	os.Remove(b.path)
}

// copyBlob makes an unsealed copy of the first size bytes of src
// (copy_file_range where the filesystem has it).
func (s *Store) copyBlob(key string, src *blob, size int64) (*blob, error) {
	dst, err := s.newBlob(key)
	if err != nil {
		return nil, err
	}
	in, err := os.Open(src.path)
	if err != nil {
		dst.discard()
		return nil, stagingErr("stage", key, err)
	}
	defer in.Close()
	n, err := dst.f.ReadFrom(io.LimitReader(in, size))
	if err == nil && n != size {
		err = fmt.Errorf("staging copy of %q: copied %d of %d bytes", key, n, size)
	}
	if err != nil {
		dst.discard()
		return nil, stagingErr("stage", key, err)
	}
	dst.size = size
	dst.counted = size // copied, not written
	return dst, nil
}

// fetchBlob downloads what the backend holds under key into a new blob
// (copy-on-open-for-write of a file that is only in the backend).
func (s *Store) fetchBlob(ctx context.Context, key string, base backends.ObjectInfo) (*blob, error) {
	dst, err := s.newBlob(key)
	if err != nil {
		return nil, err
	}
	r, err := s.b.Read(ctx, key, backends.ReadOptions{Length: -1})
	if err != nil {
		dst.discard()
		return nil, err
	}
	defer r.Close()
	buf := make([]byte, 1<<20)
	n, err := io.CopyBuffer(onlyWriter{dst.f}, r, buf)
	if err != nil {
		dst.discard()
		return nil, stagingErr("fetch", key, err)
	}
	if n != base.Size {
		dst.discard()
		return nil, backends.Wrap("fetch", key, backends.ErrVersionMismatch,
			fmt.Errorf("object is %d bytes, expected %d", n, base.Size))
	}
	dst.size = n
	dst.counted = n // fetched, not written
	return dst, nil
}

// onlyWriter hides ReadFrom so io.CopyBuffer uses the given buffer.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }
