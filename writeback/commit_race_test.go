package writeback

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// TestNamespaceChangeWaitsForAPublishInFlight: an unlink or rename of a
// file whose upload (or stream) is publishing must not cancel that publish
// and go on: a store may finish a request its client gave up on, and the
// removed or renamed file would come back under its old name (a symlink
// renamed over a just-written file was overwritten by it). The fake store
// here finishes a cancelled Commit late, once its gate opens, as a real
// one may; the test asserts that nothing lands after the namespace change.
func TestNamespaceChangeWaitsForAPublishInFlight(t *testing.T) {
	for _, stream := range []bool{false, true} {
		for _, op := range []string{"remove", "rename"} {
			t.Run(fmt.Sprintf("stream=%v/%s", stream, op), func(t *testing.T) {
				raw, dir := newNAS(t)
				f := newFaulty(raw)
				f.mu.Lock()
				f.lateCommits = true
				f.mu.Unlock()
				f.hold("k")
				awaiting := make(chan struct{}, 1)
				s := openStore(t, f, t.TempDir(), func(o *Options) {
					o.StreamThreshold = 0
					if stream {
						o.StreamThreshold = 256 << 10
					}
					o.crashHook = func(p string) {
						if p == crashCommitAwaited {
							select {
							case awaiting <- struct{}{}:
							default:
							}
						}
					}
				})
				data := randBytes(7, 1<<20)
				if stream {
					// Streaming before the close, so the close hands its
					// version to the stream.
					h, err := s.Open(context.Background(), "k", nil, OpenFlags{Write: true, Truncate: true})
					must(t, err)
					_, err = h.WriteAt(context.Background(), data, 0)
					must(t, err)
					waitStreaming(t, s, h)
					must(t, h.Flush(context.Background()))
					must(t, h.Release())
				} else {
					writeFile(t, s, "k", data)
				}
				waitCommit(t, f, "k")
				if stream && f.writes.Load() != 1 {
					t.Fatalf("%d uploads started, want the one stream", f.writes.Load())
				}
				ctx := context.Background()
				done := make(chan error, 1)
				go func() {
					if op == "remove" {
						done <- s.Remove(ctx, "k")
					} else {
						done <- s.Rename(ctx, "k", "k2")
					}
				}()
				var err error
				returned := false
				select {
				case <-awaiting:
					// Waiting for the publish, as it must: let the store
					// finish it.
				case err = <-done:
					// Returned with the publish still held: cancelled it.
					returned = true
				}
				f.release()
				if !returned {
					err = <-done
				}
				if err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				f.late.Wait() // a cancelled commit the store finished late
				drain(t, s)
				if _, err := raw.Stat(ctx, "k"); !errors.Is(err, backends.ErrNotExist) {
					t.Fatalf("after %s the store holds k (stat err %v): a publish landed after the namespace change", op, err)
				}
				if op == "rename" {
					wantFile(t, dir, "k2", data)
				} else {
					wantMissing(t, dir, "k2")
				}
			})
		}
	}
}
