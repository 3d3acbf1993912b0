package writeback

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
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
	var s *Store
	var problems []string
	s = openStore(t, f, t.TempDir(), func(o *Options) {
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
	for _, p := range problems {
		t.Error(p)
	}
}
