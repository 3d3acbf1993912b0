package fs

import (
	"context"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/fs/fuseconn"
)

// NewSliceResultForTest exposes newSliceResult to the fs_test package.
func NewSliceResultForTest(vecs [][]byte, release func()) fuse.ReadResult {
	return newSliceResult(vecs, release)
}

// MountInputCounted is MountInput (with default mount options), and a
// func counting the nodes go-fuse holds under the root and the directory
// listings the tree holds.
func MountInputCounted(mountpoint string, b backends.Backend, opt InputOptions) (*Server, func() (nodes, listings int), error) {
	root, err := NewInputRoot(context.Background(), b, opt)
	if err != nil {
		return nil, nil, err
	}
	in := root.(*inDir)
	srv, err := fuseconn.MountTree(mountpoint, &inputTree{root: in}, inputMountOptions(b, in.fsys, opt, MountOptions{}))
	if err != nil {
		return nil, nil, err
	}
	count := func() (nodes, listings int) {
		var walk func(n *gofs.Inode)
		walk = func(n *gofs.Inode) {
			for _, ch := range n.Children() {
				nodes++
				walk(ch)
			}
		}
		walk(in.EmbeddedInode())
		in.fsys.mu.Lock()
		defer in.fsys.mu.Unlock()
		return nodes, len(in.fsys.listings)
	}
	return srv, count, nil
}

// PlusNodesMax is plusNodesMax.
const PlusNodesMax = plusNodesMax
