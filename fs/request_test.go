package fs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	mfs "github.com/mlfsd/mlfsd/fs"
)

// TestObserverSeesOutputRequests: the requests of an output file's life
// reach the Observer, WRITE included (go-fuse sends it through Writev).
func TestObserverSeesOutputRequests(t *testing.T) {
	back := t.TempDir()
	ops := &opCounter{n: map[string]int{}}
	m := testOutputMountWith(t, newNAS(t, back), t.TempDir(), nil, true, mfs.MountOptions{Observe: ops.observe})
	data := bytes.Repeat([]byte("w"), 1<<20)
	if err := os.WriteFile(filepath.Join(m.mnt, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", filepath.Join(m.mnt, "l")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(m.mnt, "l")); err != nil || got != "f" {
		t.Fatalf("readlink: %q, %v", got, err)
	}
	if err := os.Mkdir(filepath.Join(m.mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"create", "write", "flush", "symlink", "readlink", "mkdir"} {
		if ops.get(op) == 0 {
			t.Errorf("no %s request observed", op)
		}
	}
	m.close(t)
	if got, err := os.ReadFile(filepath.Join(back, "f")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("f in the store: %d bytes, %v", len(got), err)
	}
}
