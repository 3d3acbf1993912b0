package cache

import (
	"context"
	"io"

	"github.com/mlfsd/mlfsd/backends"
)

// The read-path seam. The FUSE adapter (package fs) asks a Source for every
// open of an input file; Cache implements it with the block cache, View with
// the block cache on behalf of one mount, DirectSource by reading the
// backend directly. It lives here, not in fs, so that the cache (and
// everything that wires it: the service layer, tools, benchmarks) never
// depends on go-fuse.

// Source opens file contents for reading.
type Source interface {
	Open(ctx context.Context, b backends.Backend, info backends.ObjectInfo) (Handle, error)
}

// Handle is one open file of a Source. ReadAt has io.ReaderAt semantics
// (a short read only at the end of the file, with io.EOF) and is safe for
// concurrent use.
//
// A Handle may also implement PassthroughFd() (fd int, ok bool): when ok, the
// kernel reads fd directly (FUSE passthrough) and ReadAt is not called.
// The fd must stay open until Close.
type Handle interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	Close() error
}

// SliceReader is a Handle that can answer a read with slices of memory it
// already holds, which the FUSE reply is written from without a copy.
// ReadSlices reads like ReadAt(p, off), but returns the data as slices in
// order: its own or parts of p. Its own stay unchanged until release is
// called, which the caller must do exactly once, when the reply is sent
// (the memory is then recycled), whatever the error.
type SliceReader interface {
	ReadSlices(ctx context.Context, p []byte, off int64) (vecs [][]byte, release func(), err error)
}

// DirectSource reads straight from the backend, one ranged read per call.
type DirectSource struct{}

// Open implements Source.
func (DirectSource) Open(_ context.Context, b backends.Backend, info backends.ObjectInfo) (Handle, error) {
	return &directHandle{b: b, info: info}, nil
}

type directHandle struct {
	b    backends.Backend
	info backends.ObjectInfo
}

func (h *directHandle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= h.info.Size {
		return 0, io.EOF
	}
	n := int64(len(p))
	if off+n > h.info.Size {
		n = h.info.Size - off
	}
	r, err := h.b.Read(ctx, h.info.Key, backends.ReadOptions{Offset: off, Length: n, IfVersion: h.info.Version})
	if err != nil {
		return 0, err
	}
	defer r.Close()
	got, err := io.ReadFull(r, p[:n])
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		// The object is shorter than its listing said: it changed under us.
		return got, backends.Wrap("read", h.info.Key, backends.ErrVersionMismatch, err)
	}
	if err != nil {
		return got, err
	}
	if int64(got) < int64(len(p)) {
		return got, io.EOF
	}
	return got, nil
}

func (h *directHandle) Close() error { return nil }
