package fuseconn

import (
	"encoding/json"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// Tree is what the connection layer needs of a tree to serve it and hand
// it over: its root, its inode numbers, its own state, and to be told
// when an adoption calls into it before serving. Package fs's input and
// output trees implement it.
type Tree interface {
	// Root is the tree's root node.
	Root() gofs.InodeEmbedder
	// Inodes gives out the tree's inode numbers; every node of the tree
	// takes its number from it.
	Inodes() *Inodes
	// ExportState is the tree's own part of a Snapshot (Snapshot.Tree),
	// taken while the mount is frozen; nil when it has none.
	ExportState() (json.RawMessage, error)
	// SeedState gives a new tree what ExportState gave in the old daemon
	// (empty: nothing), before Adopt looks the kernel's nodes up again.
	SeedState(state json.RawMessage) error
	// Replay tells the tree what an adoption is calling it for, before
	// the server serves: r is nil once it is done. The tree answers these
	// calls as the kernel was told before, without its store if need be.
	Replay(r *Replay)
}

// Replay is what an adoption is doing in a tree (Tree.Replay).
type Replay struct {
	// Handle, when set, is the file handle being opened again (its
	// number, node, flags and whether the kernel reads it by
	// passthrough); nil: the kernel's nodes are being looked up again.
	Handle *HandleState
}
