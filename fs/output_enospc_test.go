package fs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/writeback"
)

// TestOutputStagingFull stages on an 8 MiB tmpfs while uploads crawl: the
// writer must get ENOSPC, and every file whose close succeeded must still
// reach the backend intact.
func TestOutputStagingFull(t *testing.T) {
	staging := t.TempDir()
	if err := syscall.Mount("tmpfs", staging, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatalf("mount a small tmpfs for staging (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(staging, syscall.MNT_DETACH) })
	back := t.TempDir()
	m := testOutputMount(t, newNAS(t, back), staging, func(o *writeback.Options) {
		o.BandwidthLimit = 2 << 20
		o.StreamThreshold = 0
	})
	var closed []string
	var full error
	for i := 0; i < 40 && full == nil; i++ {
		name := fmt.Sprintf("f%02d", i)
		err := os.WriteFile(filepath.Join(m.mnt, name), bytes.Repeat([]byte{byte(i)}, 1<<20), 0o644)
		switch {
		case err == nil:
			closed = append(closed, name)
		case errors.Is(err, syscall.ENOSPC):
			full = err
		default:
			t.Fatalf("writing %s: %v, want success or ENOSPC", name, err)
		}
	}
	if full == nil {
		t.Fatalf("40 MiB written to an 8 MiB staging disk without ENOSPC")
	}
	t.Logf("%d files closed before ENOSPC: %v", len(closed), full)
	if len(closed) < 3 {
		t.Fatalf("only %d files fit before ENOSPC on an 8 MiB staging disk", len(closed))
	}
	m.close(t) // drains
	for _, name := range closed {
		got, err := os.ReadFile(filepath.Join(back, name))
		var i int
		fmt.Sscanf(name, "f%d", &i)
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 1<<20)) {
			t.Errorf("%s: closed before the disk filled, but the backend has %d bytes (err %v)", name, len(got), err)
		}
	}
}

// TestOutputFsyncDurable: with FsyncDurable, fsync(2) on the mount returns
// only once the file is in the backend, in both I/O modes.
func TestOutputFsyncDurable(t *testing.T) {
	for _, mode := range ioModes {
		t.Run(mode.name, func(t *testing.T) {
			back := t.TempDir()
			m := testOutputMountMode(t, newNAS(t, back), t.TempDir(), nil, mode.noPassthrough)
			f, err := os.Create(filepath.Join(m.mnt, "log.txt"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for i, want := range []string{"step 1\n", "step 1\nstep 2\n"} {
				f.WriteString(want[len(want)-7:])
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(filepath.Join(back, "log.txt"))
				if err != nil || string(got) != want {
					t.Fatalf("after fsync %d the backend holds %q (err %v), want %q", i+1, got, err, want)
				}
			}
		})
	}
}
