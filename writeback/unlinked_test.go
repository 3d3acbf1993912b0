package writeback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// Descriptors open on a file whose name goes away (unlink, or a rename
// over it) keep reading the file's data (POSIX), also when the file was
// durable and its staged copy already freed: then nothing local holds its
// bytes, and the backend object is about to be deleted or replaced.

// openDurable writes key, drains until its upload is recorded and its
// staged copy is freed (the case the race used to hide), and opens it
// read-only as the mount does for a file the Store knows.
func openDurable(t *testing.T, s *Store, key string, data []byte) *Handle {
	t.Helper()
	writeFile(t, s, key, data)
	drain(t, s)
	info, ok := s.Stat(key)
	if !ok || info.Size != int64(len(data)) {
		t.Fatalf("Stat(%q) after upload = %+v, %v", key, info, ok)
	}
	h, err := s.Open(context.Background(), key, &info, OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	staged := h.e.cur != nil
	s.mu.Unlock()
	if staged {
		t.Fatalf("%q still staged after its upload and release: the test would not cover a file read from the backend", key)
	}
	return h
}

// readAll reads the whole file through h, in 64 KiB reads.
func readAll(t *testing.T, h *Handle, size int) []byte {
	t.Helper()
	ctx := context.Background()
	out := make([]byte, 0, size)
	buf := make([]byte, 64<<10)
	for off := int64(0); ; {
		n, err := h.ReadAt(ctx, buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if n == 0 {
			t.Fatalf("read at %d: no bytes and no error", off)
		}
	}
	return out
}

func wantBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %s, want %s", what, describe(got), describe(want))
	}
}

func wantStagingEmpty(t *testing.T, s *Store) {
	t.Helper()
	if blobs, recs := stagingFiles(t, s); blobs != 0 || recs != 0 {
		t.Fatalf("staging keeps %d blobs and %d records, want none", blobs, recs)
	}
}

// TestUnlinkedOpenReadsAfterUpload: a file uploaded and freed from
// staging, opened read-only, then unlinked: the descriptor reads every
// byte, the backend object is gone at once, and nothing stays in staging
// after the last release.
func TestUnlinkedOpenReadsAfterUpload(t *testing.T) {
	b, dir := newNAS(t)
	s := openStore(t, b, t.TempDir(), nil)
	ctx := context.Background()
	data := randBytes(11, 1<<20+333)
	h := openDurable(t, s, "ckpt/a", data)
	if err := s.Remove(ctx, "ckpt/a"); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, dir, "ckpt/a")
	if _, ok := s.Stat("ckpt/a"); ok {
		t.Fatal("the Store still knows an unlinked name")
	}
	if st := h.Stat(); st.Size != int64(len(data)) {
		t.Fatalf("fstat of the unlinked file: size %d, want %d", st.Size, len(data))
	}
	wantBytes(t, "read of the open, unlinked file", readAll(t, h, len(data)), data)
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	wantMissing(t, dir, "ckpt/a")
	wantStagingEmpty(t, s)
}

// TestUnlinkedOpenNameReused: while a descriptor is open on an unlinked,
// uploaded file, a new file is created under the same name (and uploaded);
// another file is renamed over a second, open one; a third is unlinked,
// then another file renamed to its name. Each old descriptor reads the old
// bytes; the new objects are in the backend after every release, and
// stay there.
func TestUnlinkedOpenNameReused(t *testing.T) {
	b, dir := newNAS(t)
	s := openStore(t, b, t.TempDir(), nil)
	ctx := context.Background()
	oldA, newA := randBytes(21, 300<<10), randBytes(22, 200<<10)
	oldX, y := randBytes(23, 150<<10), randBytes(24, 100<<10)

	hA := openDurable(t, s, "a", oldA)
	if err := s.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, s, "a", newA)
	drain(t, s)
	wantFile(t, dir, "a", newA)

	hX := openDurable(t, s, "x", oldX)
	writeFile(t, s, "y", y)
	drain(t, s)
	if err := s.Rename(ctx, "y", "x"); err != nil {
		t.Fatal(err)
	}
	wantFile(t, dir, "x", y)
	wantMissing(t, dir, "y")

	// Unlinked, then another file renamed to the name.
	oldB, z := randBytes(25, 80<<10), randBytes(26, 60<<10)
	hB := openDurable(t, s, "b", oldB)
	if err := s.Remove(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, s, "z", z)
	drain(t, s)
	if err := s.Rename(ctx, "z", "b"); err != nil {
		t.Fatal(err)
	}
	wantFile(t, dir, "b", z)

	wantBytes(t, "old descriptor of a, after a new a", readAll(t, hA, len(oldA)), oldA)
	wantBytes(t, "old descriptor of x, after a rename over x", readAll(t, hX, len(oldX)), oldX)
	wantBytes(t, "old descriptor of b, unlinked, then a rename to b", readAll(t, hB, len(oldB)), oldB)
	// The new files, through new descriptors.
	for key, want := range map[string][]byte{"a": newA, "x": y, "b": z} {
		info, ok := s.Stat(key)
		if !ok {
			t.Fatalf("Stat(%q): unknown", key)
		}
		h, err := s.Open(ctx, key, &info, OpenFlags{})
		if err != nil {
			t.Fatal(err)
		}
		wantBytes(t, "new "+key, readAll(t, h, len(want)), want)
		if err := h.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if err := hA.Release(); err != nil {
		t.Fatal(err)
	}
	if err := hX.Release(); err != nil {
		t.Fatal(err)
	}
	if err := hB.Release(); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	wantFile(t, dir, "a", newA)
	wantFile(t, dir, "x", y)
	wantFile(t, dir, "b", z)
	wantMissing(t, dir, "z")
	wantStagingEmpty(t, s)
}

// TestUnlinkedOpenForWrite: a descriptor opened for writing on an uploaded
// file but not yet written keeps the file's bytes after an unlink and
// writes over them; nothing of it is uploaded.
func TestUnlinkedOpenForWrite(t *testing.T) {
	b, dir := newNAS(t)
	s := openStore(t, b, t.TempDir(), nil)
	ctx := context.Background()
	data := randBytes(31, 100<<10)
	writeFile(t, s, "w", data)
	drain(t, s)
	info, _ := s.Stat("w")
	h, err := s.Open(ctx, "w", &info, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(ctx, []byte("HEAD"), 0); err != nil {
		t.Fatal(err)
	}
	want := append([]byte("HEAD"), data[4:]...)
	wantBytes(t, "unlinked file after a write", readAll(t, h, len(want)), want)
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	wantMissing(t, dir, "w")
	wantStagingEmpty(t, s)
}

// TestOpenRacingUnlinkWaits: an Open of a file being unlinked (the kernel
// does not order an open(2) and an unlink(2) of the same file) waits for
// the unlink and fails with ErrNotExist, instead of opening a descriptor
// that the unlink did not copy the file for (its reads then had no data).
func TestOpenRacingUnlinkWaits(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	s := openStore(t, f, t.TempDir(), nil)
	ctx := context.Background()
	data := randBytes(51, 40<<10)
	writeFile(t, s, "r", data)
	drain(t, s)
	info, _ := s.Stat("r")
	gate := make(chan struct{})
	f.mu.Lock()
	f.deleteGate = gate
	f.mu.Unlock()
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(ctx, "r") }()
	if k := <-f.deleting; k != "r" {
		t.Fatalf("delete of %q, want r", k)
	}
	// The unlink decided no descriptor is open and is deleting the object.
	opened := make(chan error, 1)
	go func() {
		h, err := s.Open(ctx, "r", &info, OpenFlags{})
		if err == nil {
			buf := make([]byte, len(data)+1)
			n, rerr := h.ReadAt(ctx, buf, 0)
			release(t, h)
			err = fmt.Errorf("open succeeded while the file was being unlinked (then read %d bytes, %v)", n, rerr)
		}
		opened <- err
	}()
	waiting := make(chan struct{})
	go func() {
		s.mu.Lock()
		for s.openWaiters == 0 && !s.closed {
			s.cond.Wait()
		}
		s.mu.Unlock()
		close(waiting)
	}()
	select {
	case <-waiting:
	case err := <-opened:
		close(gate)
		t.Fatalf("open racing the unlink did not wait: %v", err)
	}
	close(gate)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	if err := <-opened; !errors.Is(err, backends.ErrNotExist) {
		t.Fatalf("open racing the unlink: %v, want ErrNotExist", err)
	}
	wantMissing(t, dir, "r")
	wantStagingEmpty(t, s)
}
