package writeback

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

// ptFile opens key for passthrough writing and returns the staging file as
// the kernel would write it: through the descriptor PassthroughFd hands out.
func ptFile(t *testing.T, s *Store, key string, trunc bool) (*Handle, *os.File) {
	t.Helper()
	h, err := s.Open(context.Background(), key, nil, OpenFlags{Write: true, Truncate: trunc, Passthrough: true})
	if err != nil {
		t.Fatal(err)
	}
	fd, ok := h.PassthroughFd()
	if !ok {
		t.Fatal("passthrough not granted to the only handle of a file")
	}
	// A second descriptor on the same file, as the kernel's backing file.
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return h, f
}

func TestPassthroughStreamVerified(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	s := openStore(t, f, t.TempDir(), func(o *Options) { o.StreamThreshold = 1 << 20 })
	ctx := context.Background()
	data := randBytes(11, 12<<20)

	h, kf := ptFile(t, s, "seq.pt", true)
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := kf.WriteAt(data[off:off+1<<20], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	waitStarted(t, f, "seq.pt") // the stream follows the file by polling
	waitStreaming(t, s, h)
	if info := h.Stat(); info.Size != int64(len(data)) {
		t.Fatalf("Stat sees %d bytes written by the kernel, want %d", info.Size, len(data))
	}
	must(t, h.Flush(ctx))
	must(t, h.Release())
	drain(t, s)
	wantFile(t, dir, "seq.pt", data)
	if n := f.writes.Load(); n != 1 {
		t.Errorf("backend writes = %d, want 1 (the verified stream committed)", n)
	}

	// Bytes rewritten after they were streamed: the hash check catches it.
	h, kf = ptFile(t, s, "rw.pt", true)
	for off := 0; off < 6<<20; off += 1 << 20 {
		if _, err := kf.WriteAt(data[off:off+1<<20], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	waitStarted(t, f, "rw.pt")
	testwait.Eventually(t, func() bool { return s.streamedBytes(h.e) >= 2<<20 }, "the stream to send the first 2 MiB")
	if _, err := kf.WriteAt([]byte("REWRITTEN"), 1000); err != nil {
		t.Fatal(err)
	}
	must(t, h.Flush(ctx))
	must(t, h.Release())
	drain(t, s)
	want := append([]byte(nil), data[:6<<20]...)
	copy(want[1000:], "REWRITTEN")
	wantFile(t, dir, "rw.pt", want)
}

func TestPassthroughFsyncThenMoreWrites(t *testing.T) {
	nb, dir := newNAS(t)
	s := openStore(t, nb, t.TempDir(), nil)
	ctx := context.Background()
	h, kf := ptFile(t, s, "log", true)
	if _, err := kf.WriteAt([]byte("first\n"), 0); err != nil {
		t.Fatal(err)
	}
	must(t, h.Sync(ctx, true))
	wantFile(t, dir, "log", []byte("first\n"))
	if _, err := kf.WriteAt([]byte("second\n"), 6); err != nil {
		t.Fatal(err)
	}
	must(t, h.Flush(ctx))
	must(t, h.Release())
	drain(t, s)
	wantFile(t, dir, "log", []byte("first\nsecond\n"))
}

// TestPassthroughChangedAfterCloseNotPublished: a descriptor that outlives
// the close (dup, fork) writes more, then the daemon dies: what is staged
// is no longer what was closed, and must not be published as if it were.
func TestPassthroughChangedAfterCloseNotPublished(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	staging := t.TempDir()
	s := openStore(t, f, staging, nil)
	ctx := context.Background()
	f.hold()
	h, kf := ptFile(t, s, "m.pt", true)
	if _, err := kf.WriteAt([]byte("closed state"), 0); err != nil {
		t.Fatal(err)
	}
	must(t, h.Flush(ctx))
	if _, err := kf.WriteAt([]byte("LATER"), 0); err != nil { // through the descriptor still open
		t.Fatal(err)
	}
	closeStore(t, s)
	f.release()
	s2 := openStore(t, nb, staging, nil)
	err := s2.Drain(ctx, nil)
	if !errors.Is(err, ErrUploadFailed) {
		t.Fatalf("Drain = %v, want ErrUploadFailed for the changed file", err)
	}
	wantMissing(t, dir, "m.pt")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
