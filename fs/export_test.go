package fs

import (
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// NewSliceResultForTest exposes newSliceResult to the fs_test package.
func NewSliceResultForTest(vecs [][]byte, release func()) fuse.ReadResult {
	return newSliceResult(vecs, release)
}

// InputNodes counts the nodes go-fuse holds under an input mount's root,
// and the directory listings its tree holds.
func InputNodes(s *Server) (nodes, listings int) {
	var walk func(n *gofs.Inode)
	walk = func(n *gofs.Inode) {
		for _, ch := range n.Children() {
			nodes++
			walk(ch)
		}
	}
	walk(s.root)
	f := s.root.Operations().(*inDir).fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	return nodes, len(f.listings)
}

// PlusNodesMax is plusNodesMax.
const PlusNodesMax = plusNodesMax
