package fs

import "github.com/hanwen/go-fuse/v2/fuse"

// NewSliceResultForTest exposes newSliceResult to the fs_test package.
func NewSliceResultForTest(vecs [][]byte, release func()) fuse.ReadResult {
	return newSliceResult(vecs, release)
}
