package writeback

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// TestRemoveWaitsForAPublishInFlight: unlinking a file whose upload is
// publishing must not cancel that publish and delete first: a store may
// finish a request its client gave up on, and the removed file would come
// back (a symlink renamed over a just-written file was overwritten by it).
func TestRemoveWaitsForAPublishInFlight(t *testing.T) {
	raw, _ := newNAS(t)
	f := newFaulty(raw)
	f.mu.Lock()
	f.lateCommits = true
	f.mu.Unlock()
	f.hold("k")
	s := openStore(t, f, t.TempDir(), nil)
	writeFile(t, s, "k", randBytes(7, 64<<10))
	select {
	case <-f.inCommit:
	case <-time.After(2 * time.Minute):
		t.Fatal("the upload never reached its commit")
	}
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "k") }()
	// Remove may not finish while the publish it cannot stop is held; a
	// second is plenty for a Remove that cancels to get through.
	select {
	case err := <-removed:
		t.Fatalf("Remove returned (%v) while the publish was still in flight", err)
	case <-time.After(time.Second):
	}
	f.release()
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	f.late.Wait()
	if _, err := raw.Stat(context.Background(), "k"); !errors.Is(err, backends.ErrNotExist) {
		t.Fatalf("after unlink the store holds k (err %v): a publish landed after the delete", err)
	}
}
