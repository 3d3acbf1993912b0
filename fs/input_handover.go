package fs

import (
	"encoding/json"
	"fmt"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/fs/fuseconn"
)

// inputState is what an input tree hands to the daemon taking it over:
// the directory listings it fetched. The new daemon serves the same
// snapshot of the channel the kernel has seen (names it caches for an
// hour), and looks the kernel's nodes up again without listing the store.
type inputState struct {
	// Listings: directory key -> name -> entry, for the loaded ones.
	Listings map[string]map[string]backends.ObjectInfo `json:"listings"`
	// Known: directory key -> name -> entry, for the names the kernel
	// holds in directories not listed (each looked up in the store
	// alone): the new daemon looks them up again from here.
	Known map[string]map[string]backends.ObjectInfo `json:"known,omitempty"`
}

// exportState describes the tree's listings, and the nodes the kernel
// holds in directories not listed; the tree is frozen (no listing is being
// fetched, no node made).
func (f *inputFS) exportState(root *inDir) (json.RawMessage, error) {
	f.mu.Lock()
	ls := make(map[string]*listing, len(f.listings))
	for k, l := range f.listings {
		ls[k] = l
	}
	f.mu.Unlock()
	st := inputState{Listings: make(map[string]map[string]backends.ObjectInfo, len(ls))}
	for k, l := range ls {
		if dl := l.list.Load(); dl != nil {
			st.Listings[k] = dl.entries(k)
		}
	}
	var walk func(d *inDir)
	walk = func(d *inDir) {
		for name, ch := range d.Children() {
			var info backends.ObjectInfo
			switch n := ch.Operations().(type) {
			case *inFile:
				info = n.info
			case *inDir:
				info = n.info
				walk(n)
			default:
				continue
			}
			if _, listed := st.Listings[d.info.Key]; listed {
				continue
			}
			if st.Known == nil {
				st.Known = map[string]map[string]backends.ObjectInfo{}
			}
			if st.Known[d.info.Key] == nil {
				st.Known[d.info.Key] = map[string]backends.ObjectInfo{}
			}
			st.Known[d.info.Key][name] = info
		}
	}
	walk(root)
	return json.Marshal(st)
}

// seedState gives a new tree the listings of the tree it takes over.
func (f *inputFS) seedState(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var st inputState
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("input tree state: %w", err)
	}
	for k, entries := range st.Listings {
		dl, err := dirListOf(entries)
		if err != nil {
			return fmt.Errorf("input tree state: directory %q: %w", k, err)
		}
		f.listingOf(k).list.Store(dl)
	}
	for k, entries := range st.Known {
		f.listingOf(k).known = entries // before the tree serves
	}
	return nil
}

// inputTree is an input tree as the connection layer sees it
// (fuseconn.Tree).
type inputTree struct{ root *inDir }

func (i *inputTree) Root() gofs.InodeEmbedder              { return i.root }
func (i *inputTree) Inodes() *fuseconn.Inodes              { return i.root.fsys.inos }
func (i *inputTree) ExportState() (json.RawMessage, error) { return i.root.fsys.exportState(i.root) }
func (i *inputTree) SeedState(raw json.RawMessage) error   { return i.root.fsys.seedState(raw) }

// Replay: a handle opened again is served as the kernel was told, by
// passthrough or not (inFile.Open).
func (i *inputTree) Replay(r *fuseconn.Replay) {
	if r != nil && r.Handle != nil {
		i.root.fsys.replay = &replayOpen{passthrough: r.Handle.Passthrough}
	} else {
		i.root.fsys.replay = nil
	}
}
