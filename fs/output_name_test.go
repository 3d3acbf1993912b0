package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOutputNameTooLong: a name the store cannot hold (NAS: 255 bytes per
// component) is refused at create, mkdir, symlink and rename with
// ENAMETOOLONG, so no file exists that could never be uploaded; the
// longest allowed name works end to end.
func TestOutputNameTooLong(t *testing.T) {
	back := t.TempDir()
	b := newNAS(t, back)
	m := testOutputMount(t, b, t.TempDir(), nil)
	long, ok := strings.Repeat("n", 256), strings.Repeat("k", 255)
	_, err := os.Create(filepath.Join(m.mnt, long))
	wantErrno(t, "create of a 256-byte name", err, syscall.ENAMETOOLONG)
	wantErrno(t, "mkdir of a 256-byte name", os.Mkdir(filepath.Join(m.mnt, long), 0o755), syscall.ENAMETOOLONG)
	wantErrno(t, "symlink of a 256-byte name", os.Symlink("x", filepath.Join(m.mnt, long)), syscall.ENAMETOOLONG)
	must(t, os.WriteFile(filepath.Join(m.mnt, "short"), []byte("data"), 0o644))
	wantErrno(t, "rename to a 256-byte name", os.Rename(filepath.Join(m.mnt, "short"), filepath.Join(m.mnt, long)), syscall.ENAMETOOLONG)
	must(t, os.WriteFile(filepath.Join(m.mnt, ok), []byte("data"), 0o644))
	m.close(t) // drains: fails the test if any upload failed
	for _, name := range []string{"short", ok} {
		if got, err := os.ReadFile(filepath.Join(back, name)); err != nil || string(got) != "data" {
			t.Errorf("%s in the store: %q, %v", name[:min(len(name), 10)], got, err)
		}
	}
}
