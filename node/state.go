package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// stateFile is the mount table kept in the state directory, so that a node
// started again after a crash serves the same mounts again. It holds no
// credential, not even in part: a mount whose request brought credentials
// is not mounted again with the node's own (they may reach further than
// its client's), but waits for its client to bring them again (Restore).
type stateFile struct {
	path string
	mu   sync.Mutex // serialises writes
}

// stateVersion is the layout of state.json.
const stateVersion = 1

type stateDoc struct {
	Version int          `json:"version"`
	Mounts  []stateMount `json:"mounts"`
}

type stateMount struct {
	Target   string            `json:"target"`
	URI      string            `json:"uri"`
	ReadOnly bool              `json:"read_only"`
	Options  map[string]string `json:"options,omitempty"`
	// HadCredentials: the request brought credentials, which are not
	// kept: the mount waits for them after a restart.
	HadCredentials bool `json:"had_credentials,omitempty"`
}

func openState(dir string) (*stateFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	return &stateFile{path: filepath.Join(dir, "mounts.json")}, nil
}

func (s *stateFile) load() ([]stateMount, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var d stateDoc
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("mount table %s: %w", s.path, err)
	}
	if d.Version != stateVersion {
		return nil, fmt.Errorf("mount table %s: version %d, want %d", s.path, d.Version, stateVersion)
	}
	return d.Mounts, nil
}

// save replaces the file atomically: a temporary file, fsynced, renamed
// over it, and the directory fsynced, so a crash leaves the old table or
// the new one.
func (s *stateFile) save(ms []stateMount) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := json.MarshalIndent(stateDoc{Version: stateVersion, Mounts: ms}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(s.path, append(data, '\n'), 0o600, atomicfile.Durable)
}

// saveState writes the live mounts to the state file, if there is one.
func (n *Node) saveState() {
	if n.state == nil {
		return
	}
	n.mu.Lock()
	var ms []stateMount
	for _, m := range n.mounts {
		if m.live() {
			ms = append(ms, stateMount{Target: m.info.Target, URI: m.info.URI, ReadOnly: m.info.ReadOnly,
				Options: m.info.Options, HadCredentials: m.id != nil})
		}
	}
	for _, w := range n.waiting {
		if _, ok := n.mounts[w.Target]; !ok {
			ms = append(ms, w)
		}
	}
	n.mu.Unlock()
	sort.Slice(ms, func(i, j int) bool { return ms[i].Target < ms[j].Target })
	if err := n.state.save(ms); err != nil {
		n.log.Error("saving the mount table", "path", n.state.path, "err", err)
	}
}

// Restore mounts again what the state directory's mount table holds: after
// a crash, at the same targets (stale mounts the dead daemon left are
// detached first), and an output's journaled files are uploaded. A mount
// that cannot be restored is reported in the error, and its stale
// mountpoint detached so that nothing is left hanging.
//
// A mount that was made with a client's credentials is not mounted: it
// waits (StateWaitingCredentials in Status, MetricMountsWaiting) until
// its client sends the same request with credentials again (the CSI
// plugin does at the pod's next republish), and is mounted then. Its
// stale mountpoint stays as the dead daemon left it, so that the pod's
// writes fail (ENOTCONN) instead of landing on the node's disk; an
// output's journaled files are uploaded once it is mounted again.
func (n *Node) Restore(ctx context.Context) ([]MountInfo, error) {
	if n.state == nil {
		return nil, nil
	}
	ms, err := n.state.load()
	if err != nil {
		return nil, err
	}
	var out []MountInfo
	var errs []error
	for _, sm := range ms {
		if sm.HadCredentials {
			n.wait(sm)
			continue
		}
		info, err := n.Mount(ctx, MountRequest{URI: sm.URI, Target: sm.Target, ReadOnly: sm.ReadOnly, Options: sm.Options})
		if err != nil {
			errs = append(errs, fmt.Errorf("restore %s at %s: %w", sm.URI, sm.Target, err))
			detachIfStale(sm.Target)
			continue
		}
		n.log.Info("restored mount", "source", sm.URI, "mountpoint", sm.Target, "read_only", sm.ReadOnly)
		out = append(out, info)
	}
	n.saveState()
	return out, errors.Join(errs...)
}

// wait puts sm among the mounts waiting for their client's credentials.
func (n *Node) wait(sm stateMount) {
	n.mu.Lock()
	n.waiting[sm.Target] = sm
	n.mu.Unlock()
	n.log.Warn("mount waits for its client's credentials: it was made with them, and they are not kept across a restart; the node's own are never used for it",
		"source", sm.URI, "mountpoint", sm.Target, "read_only", sm.ReadOnly)
}

// keepWaiting carries the waiting mounts of the mount table over to a
// node that took the mounts over from another daemon: those it did not
// adopt and that were made with a client's credentials.
func (n *Node) keepWaiting() {
	if n.state == nil {
		return
	}
	ms, err := n.state.load()
	if err != nil {
		n.log.Error("reading the mount table", "path", n.state.path, "err", err)
		return
	}
	for _, sm := range ms {
		n.mu.Lock()
		_, live := n.mounts[sm.Target]
		n.mu.Unlock()
		if sm.HadCredentials && !live {
			n.wait(sm)
		}
	}
}

// dropWaiting forgets the waiting mount at target, if there is one, and
// detaches what the dead daemon left there.
func (n *Node) dropWaiting(target string) bool {
	abs, err := filepath.Abs(target)
	if err != nil {
		return false
	}
	n.mu.Lock()
	_, ok := n.waiting[abs]
	delete(n.waiting, abs)
	n.mu.Unlock()
	if ok {
		detachIfStale(abs)
		n.saveState()
		n.log.Info("unmounted a mount that waited for its credentials", "mountpoint", abs)
	}
	return ok
}

// waitingStatus lists the waiting mounts, by target.
func (n *Node) waitingStatus() []MountStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []MountStatus
	for _, w := range n.waiting {
		out = append(out, MountStatus{MountInfo: MountInfo{Target: w.Target, URI: w.URI, ReadOnly: w.ReadOnly, Options: w.Options},
			State: StateWaitingCredentials})
	}
	return out
}

// detachIfStale lazily unmounts target if it is a stale mlfsd mount.
func detachIfStale(target string) {
	if isStale(target) {
		if t, ok := mountType(target); ok && t == fuseType {
			_ = unix.Unmount(target, unix.MNT_DETACH)
		}
	}
}
