package fs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	mfs "github.com/mlfsd/mlfsd/fs"
)

// laterCachedSource serves its first open through the daemon and every
// later one from a local file with passthrough, as a cache does for a file
// that became complete on disk while it was open.
type laterCachedSource struct {
	local string // the "cache file"
	opens atomic.Int64
}

func (s *laterCachedSource) Open(ctx context.Context, b backends.Backend, info backends.ObjectInfo) (mfs.Handle, error) {
	direct, err := mfs.DirectSource{}.Open(ctx, b, info)
	if err != nil {
		return nil, err
	}
	if s.opens.Add(1) == 1 {
		return direct, nil
	}
	f, err := os.Open(s.local)
	if err != nil {
		return nil, err
	}
	return &ptHandle{Handle: direct, f: f}, nil
}

type ptHandle struct {
	mfs.Handle
	f *os.File
}

func (h *ptHandle) PassthroughFd() (int, bool) { return int(h.f.Fd()), true }
func (h *ptHandle) Close() error               { h.f.Close(); return h.Handle.Close() }

// TestPassthroughAfterDaemonOpen: the kernel refuses (EIO) a passthrough
// open of an inode that is open in cached mode, so the tree must not ask for
// passthrough until the daemon-served opens are closed.
func TestPassthroughAfterDaemonOpen(t *testing.T) {
	src := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if err := os.WriteFile(filepath.Join(src, "shard"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cacheFile := filepath.Join(t.TempDir(), "cached")
	if err := os.WriteFile(cacheFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	source := &laterCachedSource{local: cacheFile}
	mnt := testMount(t, newNAS(t, src), mfs.InputOptions{Source: source})

	first, err := os.Open(filepath.Join(mnt, "shard"))
	if err != nil {
		t.Fatal(err)
	}
	// While the daemon-served open is live, more opens must work.
	for i := 0; i < 3; i++ {
		got, err := os.ReadFile(filepath.Join(mnt, "shard"))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("open %d while a daemon-served open is live: %d bytes, %v", i+2, len(got), err)
		}
	}
	first.Close()
	// Once it is closed, passthrough opens work too.
	got, err := os.ReadFile(filepath.Join(mnt, "shard"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("open after the daemon-served one closed: %d bytes, %v", len(got), err)
	}
}
