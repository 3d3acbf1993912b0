package fs

import "github.com/mlfsd/mlfsd/fs/fuseconn"

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

// Adoption is a mount being taken over (fuseconn.Adoption); an output
// tree's is served by ServeOutput, once its Store is open.
type Adoption struct {
	*fuseconn.Adoption
	out *outTree // an output tree, given its Store by ServeOutput
}
