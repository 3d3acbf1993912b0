package fs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/writeback"
)

// TestOutputCloseFailedOnFullStaging: when the staging disk fills, the
// file being written gets ENOSPC. Whatever its close returned, the mount
// then shows it as the store will hold it (the bytes written if the close
// succeeded, else an empty file), the same in both I/O modes, and its
// staged bytes do not stay behind once the channel is drained and closed.
func TestOutputCloseFailedOnFullStaging(t *testing.T) {
	for _, mode := range ioModes {
		t.Run(mode.name, func(t *testing.T) {
			staging := t.TempDir()
			if err := syscall.Mount("tmpfs", staging, "tmpfs", 0, "size=6m"); err != nil {
				t.Fatalf("mount a small tmpfs for staging (needs root): %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(staging, syscall.MNT_DETACH) })
			back := t.TempDir()
			m := testOutputMountMode(t, newNAS(t, back), staging, func(o *writeback.Options) {
				o.BandwidthLimit = 1 << 20
			}, mode.noPassthrough)
			chunk := bytes.Repeat([]byte("x"), 256<<10)
			var failed string
			var written int
			var closeErr error
			for i := 0; i < 40 && failed == ""; i++ {
				name := fmt.Sprintf("f%02d", i)
				f, err := os.Create(filepath.Join(m.mnt, name))
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				var werr error
				for j := 0; j < 4 && werr == nil; j++ {
					var k int
					k, werr = f.Write(chunk)
					n += k
				}
				cerr := f.Close()
				if werr == nil && cerr == nil {
					continue
				}
				for _, err := range []error{werr, cerr} {
					if err != nil && !errors.Is(err, syscall.ENOSPC) {
						t.Fatalf("%s: %v, want success or ENOSPC", name, err)
					}
				}
				failed, written, closeErr = name, n, cerr
			}
			if failed == "" {
				t.Fatal("40 MiB written to a 6 MiB staging disk without ENOSPC")
			}
			want := int64(0) // never closed: nothing of it is published
			if closeErr == nil {
				want = int64(written)
			}
			t.Logf("%s: %d bytes written, close: %v", failed, written, closeErr)
			// The unclosed bytes are dropped at the file's last release,
			// which the kernel sends after close(2) returns: poll for it.
			testwait.Eventually(t, func() bool {
				st, err := os.Stat(filepath.Join(m.mnt, failed))
				if err != nil {
					t.Fatal(err)
				}
				return st.Size() == want
			}, "%s to read %d bytes on the mount", failed, want)
			m.close(t) // drains, unmounts, closes the Store
			got, err := os.ReadFile(filepath.Join(back, failed))
			if closeErr == nil && (err != nil || int64(len(got)) != want) {
				t.Errorf("%s in the store: %d bytes (err %v), want %d", failed, len(got), err, want)
			}
			if closeErr != nil && err == nil {
				t.Errorf("%s, whose close failed, was published (%d bytes)", failed, len(got))
			}
			var left []string
			filepath.Walk(staging, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					left = append(left, p)
				}
				return nil
			})
			if len(left) > 0 {
				t.Errorf("staging keeps %d files after the channel closed: %v", len(left), left)
			}
		})
	}
}
