package fs

import (
	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/mlfsd/mlfsd/fs/fuseconn"
)

// The connection layer (package fuseconn) under the names callers of fs
// have always used: the trees here serve through it.
type (
	// MountOptions is fuseconn.MountOptions.
	MountOptions = fuseconn.MountOptions
	// Server is fuseconn.Server.
	Server = fuseconn.Server
	// Snapshot is fuseconn.Snapshot.
	Snapshot = fuseconn.Snapshot
	// NodeState is fuseconn.NodeState.
	NodeState = fuseconn.NodeState
	// HandleState is fuseconn.HandleState.
	HandleState = fuseconn.HandleState
	// Observer is fuseconn.Observer.
	Observer = fuseconn.Observer
	// NeedRootError is fuseconn.NeedRootError.
	NeedRootError = fuseconn.NeedRootError
)

// CheckMountpoint is fuseconn.CheckMountpoint.
func CheckMountpoint(path string) error { return fuseconn.CheckMountpoint(path) }

// Mount mounts root at mountpoint (fuseconn.Mount); such a mount cannot
// be handed over.
func Mount(mountpoint string, root gofs.InodeEmbedder, opt MountOptions) (*Server, error) {
	return fuseconn.Mount(mountpoint, root, opt)
}

// Adoption is a mount being taken over (fuseconn.Adoption); an output
// tree's is served by ServeOutput, once its Store is open.
type Adoption struct {
	*fuseconn.Adoption
	out *outTree // an output tree, given its Store by ServeOutput
}
