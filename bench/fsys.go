package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"

	"github.com/mlfsd/mlfsd/backends"
)

// FS is what the read workloads read: a directory (a mount of any kind, or
// a local disk: DirFS) or a storage backend read directly, without FUSE
// (BackendFS), which is the limit a cold read through a mount is held to.
// Names are slash-separated and relative to the dataset root.
type FS interface {
	Open(ctx context.Context, name string) (Handle, error)
	// ReadDirNames lists the names in directory name, in any order.
	ReadDirNames(ctx context.Context, name string) ([]string, error)
	Stat(ctx context.Context, name string) (FileInfo, error)
	// String names the FS in reports.
	String() string
}

// Handle is an open file of an FS; ReadAt is safe for concurrent use.
type Handle interface {
	io.Reader
	io.ReaderAt
	io.Closer
}

// FileInfo is what the stat workload checks.
type FileInfo struct {
	Size    int64
	Regular bool
}

// DirFS reads a directory with the usual system calls.
type DirFS string

func (d DirFS) path(name string) string { return filepath.Join(string(d), filepath.FromSlash(name)) }

// Open implements FS.
func (d DirFS) Open(_ context.Context, name string) (Handle, error) { return os.Open(d.path(name)) }

// ReadDirNames implements FS with getdents alone (no stat per entry).
func (d DirFS) ReadDirNames(_ context.Context, name string) ([]string, error) {
	f, err := os.Open(d.path(name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// Stat implements FS.
func (d DirFS) Stat(_ context.Context, name string) (FileInfo, error) {
	fi, err := os.Stat(d.path(name))
	if err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Size: fi.Size(), Regular: fi.Mode().IsRegular()}, nil
}

func (d DirFS) String() string { return string(d) }

// BackendFS reads a backend directly, as an ideal client would: a sequential
// reader fetches the first MiB alone (a small file takes one request), then
// keeps Parallel chunks of Chunk bytes in flight ahead of the reader; ReadAt
// is one ranged read.
type BackendFS struct {
	B        backends.Backend
	Name     string // shown in reports, e.g. the URI
	Chunk    int64  // 0: 2 MiB
	Parallel int    // 0: 16
}

func (b *BackendFS) String() string { return b.Name }

// Open implements FS. It does not ask the store anything: the first read
// finds out whether the object exists.
func (b *BackendFS) Open(ctx context.Context, name string) (Handle, error) {
	chunk, par := b.Chunk, b.Parallel
	if chunk <= 0 {
		chunk = 2 << 20
	}
	if par <= 0 {
		par = 16
	}
	ctx, cancel := context.WithCancel(ctx)
	return &backendFile{ctx: ctx, cancel: cancel, b: b.B, key: name, chunk: chunk, par: par,
		free: make(chan []byte, 2)}, nil
}

// ReadDirNames implements FS with paged, non-recursive listings.
func (b *BackendFS) ReadDirNames(ctx context.Context, name string) ([]string, error) {
	prefix := name + "/"
	if name == "" || name == "." {
		prefix = ""
	}
	var names []string
	for tok := ""; ; {
		pg, err := b.B.List(ctx, backends.ListOptions{Prefix: prefix, Token: tok})
		if err != nil {
			return nil, err
		}
		for _, o := range pg.Objects {
			names = append(names, path.Base(o.Key))
		}
		for _, p := range pg.Prefixes {
			names = append(names, path.Base(p))
		}
		if tok = pg.NextToken; tok == "" {
			return names, nil
		}
	}
}

// Stat implements FS.
func (b *BackendFS) Stat(ctx context.Context, name string) (FileInfo, error) {
	oi, err := b.B.Stat(ctx, name)
	if err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Size: oi.Size, Regular: !oi.IsDir}, nil
}

// firstChunk is the size of the first request of a sequential read: small
// files are read whole with one request.
const firstChunk = 1 << 20

type backendFile struct {
	ctx    context.Context
	cancel context.CancelFunc
	b      backends.Backend
	key    string
	chunk  int64
	par    int

	// Sequential reading state; Read is not called concurrently.
	cur     []byte             // what is left of the chunk being consumed
	curBuf  []byte             // the whole buffer cur is in
	free    chan []byte        // buffers of consumed chunks, for reuse
	pending []chan chunkResult // fetches in flight, in offset order
	next    int64              // offset of the next chunk to fetch
	eof     bool               // a short chunk was seen: nothing past it
	err     error
	wg      sync.WaitGroup
}

type chunkResult struct {
	data []byte
	want int64 // bytes asked for: fewer means the end of the object
	err  error
}

func (f *backendFile) fetch(off, n int64) chan chunkResult {
	ch := make(chan chunkResult, 1)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		data, err := f.readChunk(off, n)
		ch <- chunkResult{data: data, want: n, err: err}
	}()
	return ch
}

// readChunk reads up to n bytes at off. A chunk fetched past the end costs
// a request but no big buffer: it is allocated once data arrives.
func (f *backendFile) readChunk(off, n int64) ([]byte, error) {
	rc, err := f.b.Read(f.ctx, f.key, backends.ReadOptions{Offset: off, Length: n})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var head [32 << 10]byte
	k, err := io.ReadFull(rc, head[:min(n, int64(len(head)))])
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || err == nil && int64(k) == n {
		return append([]byte(nil), head[:k]...), nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s at offset %d: %w", f.key, off+int64(k), err)
	}
	var buf []byte
	select {
	case b := <-f.free:
		if int64(cap(b)) >= n {
			buf = b[:n]
		}
	default:
	}
	if buf == nil {
		buf = make([]byte, n)
	}
	copy(buf, head[:k])
	m, err := io.ReadFull(rc, buf[k:])
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return buf[:k+m], nil
	case err != nil:
		return nil, fmt.Errorf("%s at offset %d: %w", f.key, off+int64(k+m), err)
	}
	return buf, nil
}

// Read implements io.Reader with read-ahead.
func (f *backendFile) Read(p []byte) (int, error) {
	for len(f.cur) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		if len(f.pending) == 0 {
			if f.eof {
				return 0, io.EOF
			}
			// Nothing in flight: the first chunk, alone.
			f.pending = append(f.pending, f.fetch(0, firstChunk))
			f.next = firstChunk
		}
		if f.curBuf != nil {
			select {
			case f.free <- f.curBuf:
			default:
			}
			f.curBuf = nil
		}
		r := <-f.pending[0]
		f.pending = f.pending[1:]
		if r.err != nil {
			f.err = r.err
			return 0, r.err
		}
		if int64(len(r.data)) < r.want {
			// The end: chunks already fetched past it come back empty.
			f.eof = true
		}
		f.cur, f.curBuf = r.data, r.data
		for !f.eof && len(f.pending) < f.par {
			f.pending = append(f.pending, f.fetch(f.next, f.chunk))
			f.next += f.chunk
		}
	}
	n := copy(p, f.cur)
	f.cur = f.cur[n:]
	return n, nil
}

// ReadAt implements io.ReaderAt with one ranged read.
func (f *backendFile) ReadAt(p []byte, off int64) (int, error) {
	rc, err := f.b.Read(f.ctx, f.key, backends.ReadOptions{Offset: off, Length: int64(len(p))})
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, p)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return n, io.EOF
	case err != nil:
		return n, fmt.Errorf("%s at offset %d: %w", f.key, off+int64(n), err)
	}
	return n, nil
}

// Close stops the read-ahead and waits for it.
func (f *backendFile) Close() error {
	f.cancel()
	f.wg.Wait()
	return nil
}
