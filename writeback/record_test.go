package writeback

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// TestRecordKeepsItsBlob: a journal record never names a blob that is
// gone. An upload that finishes after the file was reopened with O_TRUNC
// (so the entry's live blob is another) used to delete the version's blob
// before removing its record: a crash in between made the restart set the
// file aside as lost though it was uploaded (a drain failure, `mlfsd run`
// exiting 3). Seen as TestCrashAtEveryTransition failing at "staged" in
// about 2 runs of 5 on a busy machine.
func TestRecordKeepsItsBlob(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	s, problems := openStoreCheckingRecords(t, f)
	ctx := context.Background()
	A := randBytes(41, 64<<10)
	f.hold()
	h1, err := s.Open(ctx, "ckpt", nil, OpenFlags{Write: true, Truncate: true})
	must(t, err)
	_, err = h1.WriteAt(ctx, A, 0)
	must(t, err)
	must(t, h1.Flush(ctx))
	waitCommit(t, f, "ckpt")
	h2, err := s.Open(ctx, "ckpt", nil, OpenFlags{Write: true, Truncate: true})
	must(t, err)
	must(t, h1.Release())
	f.release()
	drain(t, s)
	wantFile(t, dir, "ckpt", A)
	must(t, h2.Release())
	drain(t, s)
	wantFile(t, dir, "ckpt", nil)
	if blobs, recs := stagingFiles(t, s); blobs != 0 || recs != 0 {
		t.Fatalf("staging keeps %d blobs and %d records, want none", blobs, recs)
	}
	for _, p := range *problems {
		t.Error(p)
	}
}

// TestRecordKeepsItsPreservedBlob: the same with FUSE passthrough, where
// a writer reopening the file moves the closed version, still uploading,
// to a copy (preserved) and re-points the record at it: the upload's end
// freed that copy before removing the record.
func TestRecordKeepsItsPreservedBlob(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	s, problems := openStoreCheckingRecords(t, f)
	ctx := context.Background()
	A := randBytes(42, 64<<10)
	f.hold()
	h1, err := s.Open(ctx, "ckpt", nil, OpenFlags{Write: true, Truncate: true, Passthrough: true})
	must(t, err)
	fd, ok := h1.PassthroughFd()
	if !ok {
		t.Fatal("passthrough not granted")
	}
	kf, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDWR, 0)
	must(t, err)
	defer kf.Close()
	_, err = kf.WriteAt(A, 0) // as the kernel would
	must(t, err)
	must(t, h1.Flush(ctx))
	waitCommit(t, f, "ckpt")
	// A writer reopens it while the upload of A is publishing: A moves
	// to a copy of its own (preserved), the record follows it.
	h2, err := s.Open(ctx, "ckpt", nil, OpenFlags{Write: true, Passthrough: true})
	must(t, err)
	must(t, h1.Release())
	f.release()
	drain(t, s)
	wantFile(t, dir, "ckpt", A)
	must(t, h2.Release())
	drain(t, s)
	if blobs, recs := stagingFiles(t, s); blobs != 0 || recs != 0 {
		t.Fatalf("staging keeps %d blobs and %d records, want none", blobs, recs)
	}
	for _, p := range *problems {
		t.Error(p)
	}
}

// openStoreCheckingRecords opens a Store over b that, each time an upload
// is committed (before its record is removed), checks that every journal
// record names a blob still in staging; what it finds wrong is appended
// to the returned list.
func openStoreCheckingRecords(t *testing.T, b backends.Backend) (*Store, *[]string) {
	t.Helper()
	var s *Store
	var problems []string
	s = openStore(t, b, t.TempDir(), func(o *Options) {
		o.crashHook = func(p string) {
			if p != crashCommitted {
				return
			}
			recs, _, err := s.jr.load()
			if err != nil {
				problems = append(problems, err.Error())
			}
			for _, r := range recs {
				if _, err := os.Stat(filepath.Join(s.blobDir, r.Blob)); err != nil {
					problems = append(problems, fmt.Sprintf("record of %q names a missing blob: %v", r.Key, err))
				}
			}
		}
	})
	return s, &problems
}
