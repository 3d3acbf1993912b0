package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestCheckpointOverwriteSIGKILL: a checkpoint is closed (version A), then
// reopened with O_TRUNC and partly rewritten when the daemon is killed with
// SIGKILL. After a restart on the same staging dir the mount shows A, the
// store holds A after the drain, and the daemon exits 0: open and truncate
// published nothing, and nothing wedges the channel. With and without
// output passthrough; with A still uploading at the kill, or already in
// the store.
func TestCheckpointOverwriteSIGKILL(t *testing.T) {
	for _, pt := range []bool{true, false} {
		for _, pending := range []bool{true, false} {
			t.Run(fmt.Sprintf("nas/passthrough=%v/pending=%v", pt, pending), func(t *testing.T) {
				checkpointOverwriteSIGKILL(t, nasStore(t), pt, pending)
			})
		}
	}
	// Over the OSS emulator (one PUT per version at this size).
	for _, pending := range []bool{true, false} {
		t.Run(fmt.Sprintf("oss/passthrough=true/pending=%v", pending), func(t *testing.T) {
			checkpointOverwriteSIGKILL(t, ossStore(t), true, pending)
		})
	}
}

func checkpointOverwriteSIGKILL(t *testing.T, back store, pt, pending bool) {
	staging := t.TempDir()
	flags := append([]string{fmt.Sprintf("--output-passthrough=%v", pt)}, back.extra...)
	slow := flags
	if pending {
		slow = append(slow, "--upload-bwlimit", "256KiB") // A is still uploading at the kill
	}
	d := startOutputMountURI(t, back.uri, staging, slow...)
	A, B := randData(1, 3<<20), randData(2, 2<<20)
	p := filepath.Join(d.mnt, "model.pt")
	if err := os.WriteFile(p, A, 0o644); err != nil {
		t.Fatal(err)
	}
	if !pending {
		testwait.Eventually(t, func() bool {
			got, ok := back.get("model.pt")
			return ok && bytes.Equal(got, A)
		}, "A to reach the store")
	}
	// The rewrite: open(O_TRUNC) at once (the kernel may not even have
	// released A's handle yet), half of B written, never closed.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(B[:1<<20]); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
	f.Close() // fails: the daemon is gone
	syscall.Unmount(d.mnt, syscall.MNT_DETACH)
	if got, ok := back.get("model.pt"); ok && !bytes.Equal(got, A) {
		t.Fatalf("after the kill the store holds %d bytes under model.pt, not the closed %d", len(got), len(A))
	}

	d2 := startOutputMountURI(t, back.uri, staging, flags...)
	got, err := os.ReadFile(filepath.Join(d2.mnt, "model.pt"))
	if err != nil || !bytes.Equal(got, A) {
		t.Errorf("model.pt through the restarted mount: %d bytes (err %v), want the closed %d", len(got), err, len(A))
	}
	if err := d2.stop(t); err != nil {
		t.Fatalf("restarted mlfsd exited with %v; stderr:\n%s", err, d2.stderr)
	}
	if got, ok := back.get("model.pt"); !ok || !bytes.Equal(got, A) {
		t.Fatalf("model.pt in the store after the restart: %d bytes (present %v), want the closed %d", len(got), ok, len(A))
	}
	// And the channel starts clean again.
	d3 := startOutputMountURI(t, back.uri, staging, flags...)
	if err := d3.stop(t); err != nil {
		t.Fatalf("third start exited with %v; stderr:\n%s", err, d3.stderr)
	}
}
