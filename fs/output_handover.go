package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/fs/fuseconn"
	"github.com/mlfsd/mlfsd/writeback"
)

// Handing an output tree to another daemon (package fuseconn has the
// connection's part).
//
// The tree is the authority for names and metadata once a directory is
// loaded (output.go), and much of it lives only here: modes and owners the
// store does not keep, files created and not yet closed, FIFOs. So the
// tree travels whole: every node with its kind and metadata, and for each
// directory whether its listing was merged in. The new daemon builds the
// same tree from it, node for node with the same IDs, without listing the
// store; file data and uploads are the writeback.Store's, which the new
// daemon opens on the same staging dir once the old one has let go (see
// writeback.HandoverState).

// outNodeState is one node of an output tree as handed over.
type outNodeState struct {
	Kind   string               `json:"kind"` // dir, file, link, special
	Meta   outMetaState         `json:"meta"`
	Loaded bool                 `json:"loaded,omitempty"` // dir: listing merged in
	Base   *backends.ObjectInfo `json:"base,omitempty"`   // file: from the listing
	MTime  time.Time            `json:"mtime,omitempty"`  // file: set by utimens
	Target string               `json:"target,omitempty"` // link
	// FromStore: a link listed from the store, not made through the
	// mount (outLink.fromStore).
	FromStore bool   `json:"from_store,omitempty"`
	Type      uint32 `json:"type,omitempty"` // special: S_IFIFO...
	Rdev      uint32 `json:"rdev,omitempty"` // special
}

// outMetaState is a nodeMeta as handed over.
type outMetaState struct {
	Mode  uint32    `json:"mode"`
	UID   uint32    `json:"uid"`
	GID   uint32    `json:"gid"`
	ATime time.Time `json:"atime"`
	MTime time.Time `json:"mtime"`
	CTime time.Time `json:"ctime"`
	Gone  bool      `json:"gone,omitempty"`
}

func metaState(m nodeMeta) outMetaState {
	return outMetaState{Mode: m.mode, UID: m.uid, GID: m.gid, ATime: m.atime, MTime: m.mtime, CTime: m.ctime, Gone: m.gone}
}

func (m outMetaState) meta() nodeMeta {
	return nodeMeta{mode: m.Mode, uid: m.UID, gid: m.GID, atime: m.ATime, mtime: m.MTime, ctime: m.CTime, gone: m.Gone}
}

// outputState is an output tree as handed over: its nodes by key ("" is
// the root).
type outputState struct {
	Nodes map[string]outNodeState `json:"nodes"`
}

// exportState describes the tree; it is frozen (no request runs).
func (t *outTree) exportState(root *gofs.Inode) (json.RawMessage, error) {
	st := outputState{Nodes: map[string]outNodeState{}}
	var walk func(n *gofs.Inode, key string) error
	walk = func(n *gofs.Inode, key string) error {
		var ns outNodeState
		switch o := n.Operations().(type) {
		case *outDir:
			o.mu.Lock()
			ns = outNodeState{Kind: "dir", Meta: metaState(o.meta), Loaded: o.loaded}
			o.mu.Unlock()
		case *outFile:
			o.mu.Lock()
			ns = outNodeState{Kind: "file", Meta: metaState(o.meta), MTime: o.mtime}
			if o.base != nil {
				b := *o.base
				ns.Base = &b
			}
			o.mu.Unlock()
		case *outLink:
			o.mu.Lock()
			ns = outNodeState{Kind: "link", Meta: metaState(o.meta), Target: o.target, FromStore: o.fromStore}
			o.mu.Unlock()
		case *outSpecial:
			o.mu.Lock()
			ns = outNodeState{Kind: "special", Meta: metaState(o.meta), Type: n.StableAttr().Mode & syscall.S_IFMT, Rdev: o.rdev}
			o.mu.Unlock()
		default:
			return fmt.Errorf("output tree node %q of type %T", key, o)
		}
		st.Nodes[key] = ns
		for name, ch := range n.Children() {
			if err := walk(ch, childKey(key, name)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root, ""); err != nil {
		return nil, err
	}
	return json.Marshal(st)
}

// newChild makes the node of name in d (whose key is dirKey), numbered
// for the kernel: a new number, or while a handed-over tree is replayed,
// the one the kernel knows.
func (d *outDir) newChild(ctx context.Context, dirKey, name string, ops gofs.InodeEmbedder, mode uint32) *gofs.Inode {
	return d.NewPersistentInode(ctx, ops, gofs.StableAttr{Mode: mode, Ino: d.t.inos.Ino(childKey(dirKey, name))})
}

// loadSeed fills d (key) with its handed-over children, if it was loaded
// in the tree handed over. Needs d.mu.
func (d *outDir) loadSeed(ctx context.Context, key string) bool {
	t := d.t
	t.seedMu.Lock()
	kids, ok := t.seed[key]
	delete(t.seed, key)
	t.seedMu.Unlock()
	if !ok {
		return false
	}
	for name, ns := range kids {
		if d.GetChild(name) != nil {
			continue
		}
		var ops gofs.InodeEmbedder
		mode := uint32(syscall.S_IFREG)
		switch ns.Kind {
		case "dir":
			ops, mode = &outDir{t: t, meta: ns.Meta.meta()}, syscall.S_IFDIR
		case "file":
			ops = &outFile{t: t, base: ns.Base, meta: ns.Meta.meta(), mtime: ns.MTime}
		case "link":
			ops, mode = &outLink{t: t, target: ns.Target, fromStore: ns.FromStore, meta: ns.Meta.meta()}, syscall.S_IFLNK
		case "special":
			ops, mode = &outSpecial{rdev: ns.Rdev, meta: ns.Meta.meta()}, ns.Type
		}
		d.AddChild(name, d.newChild(ctx, key, name, ops, mode), false)
	}
	return true
}

// seedFrom makes the handed-over state the tree's seed and returns the
// root's.
func (t *outTree) seedFrom(raw json.RawMessage) (outNodeState, error) {
	var st outputState
	if err := json.Unmarshal(raw, &st); err != nil {
		return outNodeState{}, fmt.Errorf("output tree state: %w", err)
	}
	root, ok := st.Nodes[""]
	if !ok || root.Kind != "dir" {
		return outNodeState{}, errors.New("output tree state without its root")
	}
	t.seed = map[string]map[string]outNodeState{}
	for key, ns := range st.Nodes {
		if key == "" {
			continue
		}
		dir, name := "", key
		for i := len(key) - 1; i >= 0; i-- {
			if key[i] == '/' {
				dir, name = key[:i], key[i+1:]
				break
			}
		}
		if t.seed[dir] == nil {
			t.seed[dir] = map[string]outNodeState{}
		}
		t.seed[dir][name] = ns
	}
	// Directories loaded with nothing left in them are loaded all the same.
	for key, ns := range st.Nodes {
		if ns.Kind == "dir" && ns.Loaded && t.seed[key] == nil {
			t.seed[key] = map[string]outNodeState{}
		}
	}
	return root, nil
}

// AdoptOutput takes over an output mount at mountpoint: fd is its
// /dev/fuse connection, snap what the old daemon's server held. b is the
// channel's backend; opt.Store is ignored: the Store is opened once the
// old daemon has let go of the staging dir, and given to ServeOutput.
func AdoptOutput(fd int, mountpoint string, snap *Snapshot, b backends.Backend, opt OutputOptions, mopt MountOptions) (*Adoption, error) {
	t := newOutTree(b, opt)
	t.opt.Store = nil
	a, err := fuseconn.Adopt(fd, mountpoint, snap, &outputTree{root: &outDir{t: t}}, outputMountOptions(opt, mopt))
	if err != nil {
		return nil, err
	}
	return &Adoption{Adoption: a, out: t}, nil
}

// ServeOutput gives an adopted output tree its Store (opened on the old
// daemon's staging dir, with its writeback.HandoverState) and serves it
// as Serve does.
func (a *Adoption) ServeOutput(st *writeback.Store) (*Server, error) {
	if a.out == nil {
		return nil, errors.New("not an output mount")
	}
	a.out.st = st
	a.out.opt.Store = st
	return a.Serve()
}

// outputTree is an output tree as the connection layer sees it
// (fuseconn.Tree).
type outputTree struct{ root *outDir }

func (o *outputTree) Root() gofs.InodeEmbedder { return o.root }
func (o *outputTree) Inodes() *fuseconn.Inodes { return o.root.t.inos }
func (o *outputTree) ExportState() (json.RawMessage, error) {
	return o.root.t.exportState(o.root.EmbeddedInode())
}

// SeedState makes the handed-over tree the seed of this one, the root's
// metadata included.
func (o *outputTree) SeedState(raw json.RawMessage) error {
	rs, err := o.root.t.seedFrom(raw)
	if err != nil {
		return err
	}
	o.root.mu.Lock()
	o.root.meta = rs.Meta.meta()
	o.root.mu.Unlock()
	if !rs.Loaded {
		delete(o.root.t.seed, "")
	}
	return nil
}

// Replay: while the kernel's nodes are looked up again, outDir.Lookup
// answers from the tree alone (the Store is not open yet).
func (o *outputTree) Replay(r *fuseconn.Replay) {
	o.root.t.replaying.Store(r != nil && r.Handle == nil)
}
