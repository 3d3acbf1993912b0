package writeback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mlfsd/mlfsd/backends"
)

func TestUploadOnClose(t *testing.T) {
	b, dir := newNAS(t)
	s := openStore(t, b, t.TempDir(), nil)
	data := randBytes(1, 3<<20+17)
	writeFile(t, s, "a/b/c.bin", data)
	writeFile(t, s, "empty", nil)
	drain(t, s)
	wantFile(t, dir, "a/b/c.bin", data)
	wantFile(t, dir, "empty", nil)
	if blobs, recs := stagingFiles(t, s); blobs != 0 || recs != 0 {
		t.Fatalf("staging keeps %d blobs and %d journal records after drain, want none", blobs, recs)
	}
	if info, ok := s.Stat("a/b/c.bin"); !ok || info.Size != int64(len(data)) {
		t.Fatalf("Stat after upload = %+v, %v", info, ok)
	}
}

func TestReadSeesStagedBytes(t *testing.T) {
	b, dir := newNAS(t)
	s := openStore(t, b, t.TempDir(), nil)
	ctx := context.Background()
	h, err := s.Open(ctx, "f", nil, OpenFlags{Write: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, h)
	writeAt(t, ctx, h, []byte("hello world"), 0)
	writeAt(t, ctx, h, []byte("W"), 6)
	r, err := s.Open(ctx, "f", nil, OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, r)
	buf := make([]byte, 64)
	n, err := r.ReadAt(ctx, buf, 0)
	if err != io.EOF || string(buf[:n]) != "hello World" {
		t.Fatalf("read staged = %q, %v; want %q, EOF", buf[:n], err, "hello World")
	}
	wantMissing(t, dir, "f") // not closed: not uploaded
}

func TestCopyOnOpenForWrite(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "y"), []byte("old content"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, f, t.TempDir(), nil)
	ctx := context.Background()
	info, err := nb.Stat(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Open(ctx, "x", &info, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, ctx, h, []byte("AB"), 2)
	writeAt(t, ctx, h, []byte("!"), 10) // append
	flush(t, ctx, h)
	release(t, h)
	yinfo, err := nb.Stat(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	reads := f.reads.Load()
	h, err = s.Open(ctx, "y", &yinfo, OpenFlags{Write: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, ctx, h, []byte("new"), 0)
	flush(t, ctx, h)
	release(t, h)
	if f.reads.Load() != reads {
		t.Errorf("O_TRUNC fetched the old object from the backend")
	}
	drain(t, s)
	wantFile(t, dir, "x", []byte("01AB456789!"))
	wantFile(t, dir, "y", []byte("new"))
}

func TestLatestCloseWins(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	s := openStore(t, f, t.TempDir(), nil)
	f.hold()
	v1, v2, v3 := randBytes(1, 1<<20), randBytes(2, 2<<20), randBytes(3, 5000)
	writeFile(t, s, "ckpt", v1)
	waitStarted(t, f, "ckpt") // v1 is uploading (held at commit)
	writeFile(t, s, "ckpt", v2)
	writeFile(t, s, "ckpt", v3)
	f.release()
	drain(t, s)
	wantFile(t, dir, "ckpt", v3)
	if blobs, recs := stagingFiles(t, s); blobs != 0 || recs != 0 {
		t.Fatalf("staging keeps %d blobs and %d records", blobs, recs)
	}
}

// TestRecoverAfterCrash closes files while uploads cannot finish, stops the
// Store as a crash would (uploads aborted, journal left), and checks that a
// new Store on the same staging dir uploads every closed file, and nothing
// of a file whose close never returned.
func TestRecoverAfterCrash(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	staging := t.TempDir()
	s1 := openStore(t, f, staging, func(o *Options) { o.StreamThreshold = 16 << 20 })
	f.hold()
	want := map[string][]byte{}
	for i, k := range []string{"m/1.pt", "m/2.pt", "big.pt", "e"} {
		n := (i + 1) * 700 << 10
		if k == "big.pt" {
			n = 40 << 20 // streams before close
		}
		if k == "e" {
			n = 0
		}
		want[k] = randBytes(uint64(i), n)
		writeFile(t, s1, k, want[k])
	}
	ctx := context.Background()
	open, err := s1.Open(ctx, "half.pt", nil, OpenFlags{Write: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, ctx, open, randBytes(9, 1<<20), 0) // never closed
	closeStore(t, s1)                             // the "crash": aborts uploads
	f.release()
	for k := range want {
		wantMissing(t, dir, k)
	}
	s2 := openStore(t, nb, staging, nil)
	drain(t, s2)
	for k, data := range want {
		wantFile(t, dir, k, data)
	}
	wantMissing(t, dir, "half.pt")
	if blobs, recs := stagingFiles(t, s2); blobs != 0 || recs != 0 {
		t.Fatalf("staging keeps %d blobs and %d records after recovery", blobs, recs)
	}
}

func TestStagingDirLocked(t *testing.T) {
	b, _ := newNAS(t)
	staging := t.TempDir()
	openStore(t, b, staging, nil)
	_, err := Open(context.Background(), b, Options{StagingDir: staging})
	want := fmt.Sprintf("output channel %s is already mounted, by this mlfsd (pid %d)", b.ID(), os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second Open on the same staging dir: err = %v, want %q", err, want)
	}
}

func TestTransientFailuresRetried(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	f.failCommits = 3
	reg := prometheus.NewRegistry()
	s := openStore(t, f, t.TempDir(), func(o *Options) { o.Registry = reg; o.StreamThreshold = 0 })
	data := randBytes(5, 2<<20)
	writeFile(t, s, "r.bin", data)
	drain(t, s)
	wantFile(t, dir, "r.bin", data)
	if got := testutil.ToFloat64(s.m.uploads.WithLabelValues("retry")); got != 3 {
		t.Errorf("retry metric = %v, want 3", got)
	}
	if got := testutil.ToFloat64(s.m.uploads.WithLabelValues("ok")); got != 1 {
		t.Errorf("ok metric = %v, want 1", got)
	}
	// A stream broken mid-body is retried too.
	f.mu.Lock()
	f.failAfter = 1 << 20
	f.mu.Unlock()
	writeFile(t, s, "r2.bin", data)
	drain(t, s)
	wantFile(t, dir, "r2.bin", data)
}

// A file whose upload fails for good before its writer closes is set aside
// once: setting it aside links the live blob (a ctime change), which the
// close must not take for new bytes to seal and fail again.
func TestPermanentFailureBeforeCloseSetAsideOnce(t *testing.T) {
	nb, _ := newNAS(t)
	f := newFaulty(nb)
	f.failAll = backends.ErrPermission
	reg := prometheus.NewRegistry()
	s := openStore(t, f, t.TempDir(), func(o *Options) { o.Registry = reg })
	ctx := context.Background()
	h, err := s.Open(ctx, "denied.bin", nil, OpenFlags{Write: true, Truncate: true})
	must(t, err)
	if _, err := h.WriteAt(ctx, randBytes(6, 1000), 0); err != nil {
		t.Fatal(err)
	}
	must(t, h.Flush(ctx))
	// The upload has failed and been set aside once Drain returns.
	if err := s.Drain(ctx, nil); !errors.Is(err, ErrUploadFailed) {
		t.Fatalf("Drain = %v, want ErrUploadFailed", err)
	}
	must(t, h.Release())
	if err := s.Drain(ctx, nil); !errors.Is(err, ErrUploadFailed) {
		t.Fatalf("Drain after the close = %v, want ErrUploadFailed", err)
	}
	if got := testutil.ToFloat64(s.m.permanentFails); got != 1 {
		t.Errorf("permanent failure metric = %v, want 1", got)
	}
	if got := testutil.ToFloat64(s.m.uploads.WithLabelValues("failed")); got != 1 {
		t.Errorf("failed uploads = %v, want 1", got)
	}
	des, err := os.ReadDir(s.asideDir())
	must(t, err)
	var records int
	for _, de := range des {
		if filepath.Ext(de.Name()) == ".json" {
			records++
		}
	}
	if records != 1 {
		t.Errorf("set-aside records = %d, want 1", records)
	}
}

func TestPermanentFailureIsLoudAndKept(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	f.failAll = backends.ErrPermission
	staging := t.TempDir()
	reg := prometheus.NewRegistry()
	s := openStore(t, f, staging, func(o *Options) { o.Registry = reg })
	data := randBytes(6, 1000)
	writeFile(t, s, "denied.bin", data)
	err := s.Drain(context.Background(), nil)
	if !errors.Is(err, ErrUploadFailed) || !strings.Contains(err.Error(), "denied.bin") {
		t.Fatalf("Drain = %v, want ErrUploadFailed naming denied.bin", err)
	}
	if got := testutil.ToFloat64(s.m.permanentFails); got != 1 {
		t.Errorf("permanent failure metric = %v, want 1", got)
	}
	// Set aside, not journaled: it never blocks the channel's next start.
	if _, recs := stagingFiles(t, s); recs != 0 {
		t.Fatalf("journal records = %d, want the failed file set aside", recs)
	}
	asideData := func(s *Store) []byte {
		des, err := os.ReadDir(s.asideDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range des {
			if filepath.Ext(de.Name()) != ".json" {
				b, err := os.ReadFile(filepath.Join(s.asideDir(), de.Name()))
				must(t, err)
				return b
			}
		}
		t.Fatal("nothing set aside")
		return nil
	}
	if got := asideData(s); !bytes.Equal(got, data) {
		t.Fatalf("set-aside data is %d bytes, want the %d closed", len(got), len(data))
	}
	closeStore(t, s)
	s2 := openStore(t, nb, staging, nil)
	drain(t, s2) // nothing pending, nothing failing
	wantMissing(t, dir, "denied.bin")
	if got := asideData(s2); !bytes.Equal(got, data) {
		t.Fatal("set-aside data lost at restart")
	}
}

func TestRenameDuringUpload(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*faulty) backends.Backend
	}{
		{"copy-delete", func(f *faulty) backends.Backend { return f }},
		{"server-rename", func(f *faulty) backends.Backend { return renamer{f} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nb, dir := newNAS(t)
			f := newFaulty(nb)
			s := openStore(t, tc.wrap(f), t.TempDir(), nil)
			ctx := context.Background()
			a, c := randBytes(1, 1<<20), randBytes(2, 3000)
			writeFile(t, s, "done.txt", c)
			drain(t, s)
			f.hold("a.bin")
			writeFile(t, s, "a.bin", a)
			waitStarted(t, f, "a.bin")
			if err := s.Rename(ctx, "a.bin", "d/b.bin"); err != nil {
				t.Fatal(err)
			}
			if err := s.Rename(ctx, "done.txt", "d/done.txt"); err != nil { // durable: renamed in the backend
				t.Fatal(err)
			}
			f.release()
			drain(t, s)
			wantFile(t, dir, "d/b.bin", a)
			wantFile(t, dir, "d/done.txt", c)
			wantMissing(t, dir, "a.bin")
			wantMissing(t, dir, "done.txt")
			// A whole directory, with a pending and a durable file.
			f.hold("d/new.bin")
			writeFile(t, s, "d/new.bin", a)
			waitStarted(t, f, "d/new.bin")
			if err := s.RenameDir(ctx, "d", "e/f"); err != nil {
				t.Fatal(err)
			}
			f.release()
			drain(t, s)
			for _, k := range []string{"b.bin", "new.bin"} {
				wantFile(t, dir, "e/f/"+k, a)
			}
			wantFile(t, dir, "e/f/done.txt", c)
			wantMissing(t, dir, "d/b.bin")
			wantMissing(t, dir, "d/new.bin")
		})
	}
}

func TestRemoveDuringUpload(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	s := openStore(t, f, t.TempDir(), nil)
	ctx := context.Background()
	f.hold()
	writeFile(t, s, "gone.bin", randBytes(1, 1<<20))
	waitStarted(t, f, "gone.bin")
	if err := s.Remove(ctx, "gone.bin"); err != nil {
		t.Fatal(err)
	}
	f.release()
	drain(t, s)
	wantMissing(t, dir, "gone.bin")
	// Removing a durable file deletes it from the backend.
	writeFile(t, s, "x", []byte("x"))
	drain(t, s)
	if err := s.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, dir, "x")
	if blobs, recs := stagingFiles(t, s); blobs != 0 || recs != 0 {
		t.Fatalf("staging keeps %d blobs and %d records", blobs, recs)
	}
}

func TestUnlinkedWhileOpenIsNotUploaded(t *testing.T) {
	nb, dir := newNAS(t)
	s := openStore(t, nb, t.TempDir(), nil)
	ctx := context.Background()
	h, err := s.Open(ctx, "tmp", nil, OpenFlags{Write: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, ctx, h, []byte("scratch"), 0)
	if err := s.Remove(ctx, "tmp"); err != nil {
		t.Fatal(err)
	}
	writeAt(t, ctx, h, []byte("!"), 7)
	buf := make([]byte, 8)
	if n, err := h.ReadAt(ctx, buf, 0); (err != nil && err != io.EOF) || string(buf[:n]) != "scratch!" {
		t.Fatalf("read after unlink = %q", buf[:n])
	}
	flush(t, ctx, h)
	release(t, h)
	drain(t, s)
	wantMissing(t, dir, "tmp")
}

func TestFsyncDurable(t *testing.T) {
	nb, dir := newNAS(t)
	s := openStore(t, nb, t.TempDir(), nil)
	ctx := context.Background()
	h, err := s.Open(ctx, "log.txt", nil, OpenFlags{Write: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, h)
	writeAt(t, ctx, h, []byte("line 1\n"), 0)
	if err := h.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	wantFile(t, dir, "log.txt", []byte("line 1\n")) // no drain: fsync waited
	writeAt(t, ctx, h, []byte("line 2\n"), 7)
	if err := h.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	wantFile(t, dir, "log.txt", []byte("line 1\nline 2\n"))
}

func TestStreamingUpload(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	s := openStore(t, f, t.TempDir(), func(o *Options) { o.StreamThreshold = 1 << 20 })
	ctx := context.Background()
	data := randBytes(7, 16<<20)
	h, err := s.Open(ctx, "seq.bin", nil, OpenFlags{Write: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		writeAt(t, ctx, h, data[off:off+1<<20], int64(off))
	}
	waitStarted(t, f, "seq.bin") // began before close
	waitStreaming(t, s, h)
	flush(t, ctx, h)
	release(t, h)
	drain(t, s)
	wantFile(t, dir, "seq.bin", data)
	if n := f.writes.Load(); n != 1 {
		t.Errorf("backend writes = %d, want 1 (the stream committed)", n)
	}

	// A rewrite in the middle abandons the stream; the file still lands whole.
	h, err = s.Open(ctx, "rw.bin", nil, OpenFlags{Write: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < 4<<20; off += 1 << 20 {
		writeAt(t, ctx, h, data[off:off+1<<20], int64(off))
	}
	waitStarted(t, f, "rw.bin")
	writeAt(t, ctx, h, []byte("REWRITE"), 100)
	flush(t, ctx, h)
	release(t, h)
	drain(t, s)
	want := append([]byte(nil), data[:4<<20]...)
	copy(want[100:], "REWRITE")
	wantFile(t, dir, "rw.bin", want)
}

func TestDrainProgress(t *testing.T) {
	nb, _ := newNAS(t)
	f := newFaulty(nb)
	s := openStore(t, f, t.TempDir(), func(o *Options) { o.BandwidthLimit = 4 << 20; o.StreamThreshold = 0 })
	// No upload starts before the drain has sent a progress report while
	// files were pending: the test needs no wall-clock luck to see one.
	start := make(chan struct{})
	f.mu.Lock()
	f.startGate = start
	f.mu.Unlock()
	for i := range 4 {
		writeFile(t, s, string(rune('a'+i)), randBytes(uint64(i), 2<<20))
	}
	var reports []Progress
	var released time.Time
	if err := s.Drain(context.Background(), func(p Progress) {
		reports = append(reports, p)
		if released.IsZero() {
			released = time.Now()
			close(start)
		}
	}); err != nil {
		t.Fatal(err)
	}
	// A lower bound only: a loaded machine makes it longer, never shorter.
	if took := time.Since(released); took < time.Second {
		t.Fatalf("8 MiB at 4 MiB/s drained in %v: bandwidth limit not applied", took)
	}
	if len(reports) < 2 {
		t.Fatalf("got %d progress reports, want one while files were pending and a final one", len(reports))
	}
	last := reports[len(reports)-1]
	if last.FilesDone != 4 || last.FilesTotal != 4 || last.BytesDone != 8<<20 || last.Rate() <= 0 {
		t.Fatalf("final progress = %+v", last)
	}
	if first := reports[0]; first.FilesTotal != 4 || first.BytesTotal != 8<<20 || first.FilesDone >= 4 {
		t.Fatalf("first progress = %+v, want totals 4 files, 8 MiB, not done", first)
	}
	if !strings.Contains(last.String(), "4/4 files, 8.0 MiB/8.0 MiB") {
		t.Fatalf("progress line %q", last)
	}
}
