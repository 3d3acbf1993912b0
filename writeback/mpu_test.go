package writeback

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestCrashDuringMultipartAbortsIt: a daemon killed during a multipart
// upload leaves the upload open in the store; the next start, which
// finds its ID recorded in the staging dir, aborts it, and uploads the
// file again. Against the OSS emulator.
func TestCrashDuringMultipartAbortsIt(t *testing.T) {
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	t.Setenv("OSS_SESSION_TOKEN", "")
	t.Setenv("OSS_ENDPOINT", "")
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "bkt"), 0o755))
	_, endpoint := ossemutest.Start(t, root, ossemu.Options{})
	open := func() backends.Backend {
		u, err := backends.ParseURI("oss://bkt/out/")
		must(t, err)
		b, err := oss.New(context.Background(), u, oss.Options{Endpoint: endpoint, MultipartThreshold: 256 << 10, PartSize: 128 << 10}, nil)
		must(t, err)
		t.Cleanup(func() { b.Close() })
		return b
	}
	ob := open()
	f := newFaulty(ob) // holds the commit: the upload stays open
	staging := t.TempDir()
	s1 := openStore(t, f, staging, nil)
	f.hold()
	data := randBytes(8, 1<<20)
	writeFile(t, s1, "big.pt", data)
	// Every part sent, the commit held: s1 sends nothing more while s2
	// aborts the upload (a part failing on the aborted upload would make
	// s1 retry with a new upload, left open at the end).
	waitCommit(t, f, "big.pt")
	uploadRecords := func(s *Store) int {
		recs, err := filepath.Glob(filepath.Join(s.uploadsDir(), "*.json"))
		must(t, err)
		return len(recs)
	}
	testwait.Eventually(t, func() bool { return uploadRecords(s1) > 0 }, "the multipart upload to be recorded")
	left := s1.leftUploads()
	if len(left) != 1 || left[0].Key != "big.pt" {
		t.Fatalf("recorded uploads = %+v, want one of big.pt", left)
	}
	// The crash: the staging dir as it is now, the upload open in the store.
	snap := t.TempDir()
	ctimes := copyTree(t, staging, snap)
	translateCTimes(t, ctimes, snap)
	open2 := open()
	subs, err := os.ReadDir(snap)
	must(t, err)
	if len(subs) != 1 || subs[0].Name() != stagingKey(open2) {
		t.Fatalf("staging holds %v, want the one sub-directory %s (same bucket and prefix)", subs, stagingKey(open2))
	}
	s2 := openStore(t, open2, snap, nil)
	drain(t, s2)
	got, err := open2.Read(context.Background(), "big.pt", backends.ReadOptions{Length: -1})
	must(t, err)
	must(t, got.Close())
	testwait.Eventually(t, func() bool { return uploadRecords(s2) == 0 }, "the left upload's record to be cleared (abort failed?)")
	// The store no longer holds the upload: aborting it again finds nothing,
	// and the emulator lists no upload in progress.
	if n := openUploads(t, endpoint); n != 0 {
		t.Fatalf("%d multipart uploads still open in the store", n)
	}
	f.release()
}

// openUploads lists the multipart uploads in progress (ListMultipartUploads).
func openUploads(t *testing.T, endpoint string) int {
	t.Helper()
	c, err := alioss.New(endpoint, ossemutest.AccessKeyID, ossemutest.AccessKeySecret, alioss.ForcePathStyle(true))
	must(t, err)
	bkt, err := c.Bucket("bkt")
	must(t, err)
	res, err := bkt.ListMultipartUploads(alioss.Prefix("out/"))
	must(t, err)
	for _, u := range res.Uploads {
		t.Logf("open upload %s of %s", u.UploadID, u.Key)
	}
	return len(res.Uploads)
}
