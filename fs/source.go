// Package fs is the thin go-fuse adapter of mlfsd: the read-only input tree,
// the write-back output tree, and the one place errors become errnos.
// It knows nothing of OSS or HDFS; it sees storage through backends.Backend,
// and file contents through a cache.Source (the read-path seam, which lives
// in package cache so that the cache never depends on go-fuse).
package fs

import "github.com/mlfsd/mlfsd/cache"

// Source, Handle, SliceReader and DirectSource are the read-path seam of
// package cache under the names callers of fs have always used.
type (
	// Source is cache.Source.
	Source = cache.Source
	// Handle is cache.Handle.
	Handle = cache.Handle
	// SliceReader is cache.SliceReader.
	SliceReader = cache.SliceReader
	// DirectSource is cache.DirectSource.
	DirectSource = cache.DirectSource
)
