package node

import (
	"context"
	"sync/atomic"

	"github.com/mlfsd/mlfsd/backends"
	mfs "github.com/mlfsd/mlfsd/fs"
)

// countingSource is one mount's view of the node's shared Source: it
// counts the bytes the daemon serves to that mount's readers.
//
// LEAD (merge with the cache branch): (*cache.Cache).View() gives per-mount
// figures by tier; this wrapper can then sit on the view, or go.
type countingSource struct {
	mfs.Source
	m *mountMetrics
	n atomic.Int64 // bytes served
}

func (s *countingSource) add(n int) {
	if n > 0 {
		s.n.Add(int64(n))
		s.m.servedBytes.Add(float64(n))
	}
}

// Open implements mfs.Source.
func (s *countingSource) Open(ctx context.Context, b backends.Backend, info backends.ObjectInfo) (mfs.Handle, error) {
	h, err := s.Source.Open(ctx, b, info)
	if err != nil {
		return nil, err
	}
	return &countingHandle{Handle: h, s: s}, nil
}

// countingHandle keeps the optional methods of the Handle it wraps: a
// passthrough fd and slice reads.
type countingHandle struct {
	mfs.Handle
	s *countingSource
}

func (h *countingHandle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := h.Handle.ReadAt(ctx, p, off)
	h.s.add(n)
	return n, err
}

// ReadSlices implements mfs.SliceReader, through ReadAt when the wrapped
// Handle has no slice reads.
func (h *countingHandle) ReadSlices(ctx context.Context, p []byte, off int64) ([][]byte, error) {
	sr, ok := h.Handle.(mfs.SliceReader)
	if !ok {
		n, err := h.ReadAt(ctx, p, off)
		return [][]byte{p[:n]}, err
	}
	vecs, err := sr.ReadSlices(ctx, p, off)
	total := 0
	for _, v := range vecs {
		total += len(v)
	}
	h.s.add(total)
	return vecs, err
}

// PassthroughFd hands on the wrapped Handle's passthrough fd, if any.
func (h *countingHandle) PassthroughFd() (int, bool) {
	if p, ok := h.Handle.(interface{ PassthroughFd() (int, bool) }); ok {
		return p.PassthroughFd()
	}
	return -1, false
}
