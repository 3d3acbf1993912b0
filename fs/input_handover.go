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
}

// exportState describes the tree's listings; the tree is frozen (no
// listing is being fetched).
func (f *inputFS) exportState() (json.RawMessage, error) {
	f.mu.Lock()
	ls := make(map[string]*listing, len(f.listings))
	for k, l := range f.listings {
		ls[k] = l
	}
	f.mu.Unlock()
	st := inputState{Listings: make(map[string]map[string]backends.ObjectInfo, len(ls))}
	for k, l := range ls {
		l.mu.Lock()
		if l.loaded {
			st.Listings[k] = l.entries // immutable once loaded
		}
		l.mu.Unlock()
	}
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
		l := f.listingOf(k)
		l.mu.Lock()
		l.entries, l.loaded = entries, true
		l.mu.Unlock()
	}
	return nil
}

// inputTree is an input tree as the connection layer sees it
// (fuseconn.Tree).
type inputTree struct{ root *inDir }

func (i *inputTree) Root() gofs.InodeEmbedder              { return i.root }
func (i *inputTree) Inodes() *fuseconn.Inodes              { return i.root.fsys.inos }
func (i *inputTree) ExportState() (json.RawMessage, error) { return i.root.fsys.exportState() }
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
