package sharedcache

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// stuckStore holds every write until released.
type stuckStore struct {
	backends.Backend
	release chan struct{}
}

func (s *stuckStore) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Backend.Write(ctx, key, opt)
}

// TestWriteQueueNeverSlowsReader: with the tier's writes stuck, a reader
// of many blocks gets every byte at once; the blocks beyond the bounded
// queue are dropped and counted, the queued ones written once the store
// moves again.
func TestWriteQueueNeverSlowsReader(t *testing.T) {
	src := nasStore(t)
	t.Cleanup(func() { src.Close() })
	store := &stuckStore{Backend: nasStore(t), release: make(chan struct{})}
	t.Cleanup(func() { store.Backend.Close() })
	const bs = 64 << 10
	tier, err := New(nopClose{store}, Options{Key: testKey, BlockSize: bs, QueueBytes: 2 * bs, Writers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	data := bytes.Repeat([]byte("0123456789abcdef"), 20*bs/16)
	w, err := src.Write(t.Context(), "big", backends.WriteOptions{SizeHint: int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	info, err := w.Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r, err := tier.Through(src).Read(t.Context(), "big", backends.ReadOptions{Length: info.Size, IfVersion: info.Version})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r) // returns while every write is stuck
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read with the tier's writes stuck: %d bytes, %v", len(got), err)
	}
	s := tier.Stats()
	// One block with the writer, two in the queue; the rest dropped.
	if s.Dropped < 20-3 || s.Writes != 0 {
		t.Fatalf("20 blocks read, writes stuck, queue of 2 blocks: %+v", s)
	}
	close(store.release)
	if err := tier.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := tier.Stats(); s.Writes+s.Dropped != 20 || s.Writes == 0 {
		t.Fatalf("after the store moved again: %+v", s)
	}
}
