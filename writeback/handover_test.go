package writeback

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// TestHandoverStaging: a Store hands its staging dir to another (a daemon
// takeover): a writer mid-file goes on writing into the same staged file
// through the new Store and its close uploads the whole file; a closed
// file whose upload was in flight at the switch (cancelled before its
// commit) is uploaded by the new Store; nothing is published before its
// close.
func TestHandoverStaging(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	staging := t.TempDir()
	ctx := context.Background()
	a := openStore(t, f, staging, nil)

	data := randBytes(1, 3<<20)
	w, err := a.Open(ctx, "w.bin", nil, OpenFlags{Write: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(ctx, data[:1<<20], 0); err != nil {
		t.Fatal(err)
	}
	// A file written and uploaded before the switch: the new Store knows
	// what the backend holds of it (the tree's listing predates it).
	writeFile(t, a, "k.bin", []byte("known"))
	drain(t, a)
	// A file closed before the switch, its upload held at the commit.
	f.hold("p.bin")
	pdata := randBytes(2, 1<<20)
	writeFile(t, a, "p.bin", pdata)
	waitCommit(t, f, "p.bin")

	state := a.Handover()
	raw, err := json.Marshal(state) // it travels as JSON
	if err != nil {
		t.Fatal(err)
	}
	var got HandoverState
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Live) != 1 || got.Live[0].Key != "w.bin" {
		t.Fatalf("handed over %+v, want the one file open for writing", got.Live)
	}
	if len(got.Known) != 2 {
		t.Fatalf("handed over as known %+v, want k.bin and p.bin", got.Known)
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if err := a.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	f.release()
	wantMissing(t, dir, "w.bin")

	b := openStore(t, f, staging, func(o *Options) { o.Handover = &got })
	if info, ok := b.Stat("k.bin"); !ok || info.Size != 5 {
		t.Fatalf("the new Store's view of a file uploaded before the switch: %+v, %v", info, ok)
	}
	// The handle as the new daemon opens it again: no truncation, no base.
	w2, err := b.Open(ctx, "w.bin", nil, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	if st := w2.Stat(); st.Size != 1<<20 {
		t.Fatalf("the file open for writing is %d bytes after the handover, want %d", st.Size, 1<<20)
	}
	if _, err := w2.WriteAt(ctx, data[1<<20:], 1<<20); err != nil {
		t.Fatal(err)
	}
	drain(t, b) // p.bin only: w.bin is not closed yet
	wantFile(t, dir, "p.bin", pdata)
	wantMissing(t, dir, "w.bin")
	if err := w2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w2.Release(); err != nil {
		t.Fatal(err)
	}
	drain(t, b)
	wantFile(t, dir, "w.bin", data)
	if blobs, records := stagingFiles(t, b); blobs != 0 || records != 0 {
		t.Errorf("staging after the drain: %d blobs, %d records", blobs, records)
	}
}

// TestHandoverPauseResume: a paused Store uploads nothing new (a close
// is journaled and queued); resumed, it uploads it.
func TestHandoverPauseResume(t *testing.T) {
	nb, dir := newNAS(t)
	s := openStore(t, nb, t.TempDir(), nil)
	ctx := context.Background()
	s.Pause(ctx)
	writeFile(t, s, "a.txt", []byte("aaa"))
	if s.Pending() != 1 {
		t.Fatalf("pending while paused: %d, want 1", s.Pending())
	}
	wantMissing(t, dir, "a.txt")
	s.Resume()
	drain(t, s)
	wantFile(t, dir, "a.txt", []byte("aaa"))
}
