package node

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/internal/leakcheck"
)

// TestUnmountClosesTheBackend: an OSS input mounted, read and unmounted 20
// times leaves no descriptor and no goroutine behind (the emulator runs in
// this process: its side of a connection ends when the client closes it).
// Before, each unmounted backend kept its connections and their goroutines
// for the transport's 120 s idle timeout: the wait below, which polls the
// counts, ran into its hang guard (leakcheck.Guard, 60 s: shorter
// than the idle timeout, so that the leak fails the test instead of healing).
func TestUnmountClosesTheBackend(t *testing.T) {
	t.Setenv("OSS_ACCESS_KEY_ID", "")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "")
	_, endpoint, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{})
	data := randomBytes(t, 3<<20)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "bkt", "in"), 0o755))
	must(os.WriteFile(filepath.Join(root, "bkt", "in", "shard"), data, 0o644))

	s := Defaults()
	s.Cache.Dir = "" // memory only: every cycle reads from the store
	s.Cache.MemoryBytes = 1 << 20
	s.Output.StagingDir = t.TempDir()
	s.Backend.OSS.Endpoint = endpoint
	n, err := New(t.Context(), Options{Settings: s})
	must(err)
	defer n.Close(t.Context())
	creds := Credentials{OSSAccessKeyID: ossemutest.AccessKeyID, OSSAccessKeySecret: ossemutest.AccessKeySecret}

	cycle := func() {
		mnt := t.TempDir()
		if _, err := n.Mount(t.Context(), MountRequest{URI: "oss://bkt/in/", Target: mnt, ReadOnly: true, Credentials: creds}); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(mnt, "shard")); !bytes.Equal(got, data) {
			t.Fatal("read wrong bytes")
		}
		must(n.Unmount(t.Context(), mnt))
	}
	cycle() // what lives as long as the node (the cache) is in the baseline
	base := leakcheck.Baseline(t)
	for range 20 {
		cycle()
	}
	leakcheck.Back(t, base, "after every unmount")
}
