package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// stateFile is the mount table kept in the state directory, so that a node
// started again after a crash serves the same mounts again. It holds no
// secret: a mount whose request brought credentials comes back with the
// node's own (environment or --oss-credentials-file).
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
	// HadCredentials: the request brought credentials, which are not kept.
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
	dir := filepath.Dir(s.path)
	f, err := os.CreateTemp(dir, ".mounts.json.*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), s.path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
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
				Options: m.info.Options, HadCredentials: !m.req.Credentials.IsZero()})
		}
	}
	n.mu.Unlock()
	if err := n.state.save(ms); err != nil {
		n.log.Error("saving the mount table", "path", n.state.path, "err", err)
	}
}

// Restore mounts again what the state directory's mount table holds: after
// a crash, at the same targets (stale mounts the dead daemon left are
// detached first), and an output's journaled files are uploaded. A mount
// that cannot be restored is reported in the error, and its stale
// mountpoint detached so that nothing is left hanging.
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
		info, err := n.Mount(ctx, MountRequest{URI: sm.URI, Target: sm.Target, ReadOnly: sm.ReadOnly, Options: sm.Options})
		if err != nil {
			if sm.HadCredentials {
				err = fmt.Errorf("%w (the mount was made with a client's credentials, which are not kept: mount it again)", err)
			}
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

// detachIfStale lazily unmounts target if it is a stale mlfsd mount.
func detachIfStale(target string) {
	if isStale(target) {
		if t, ok := mountType(target); ok && t == fuseType {
			_ = unix.Unmount(target, unix.MNT_DETACH)
		}
	}
}
