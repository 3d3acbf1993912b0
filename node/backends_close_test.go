package node

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestUnmountClosesTheBackend: an OSS input mounted, read and unmounted 20
// times leaves no descriptor and no goroutine behind (the emulator runs in
// this process: its side of a connection ends when the client closes it).
// Before, each unmounted backend kept its connections and their goroutines
// for the transport's 120 s idle timeout: the wait below, which polls the
// counts, ran into its 60 s hang guard.
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
	fds, gs := settleCounts(t, -1, -1)
	for range 20 {
		cycle()
	}
	settleCounts(t, fds, gs)
}

// settleCounts waits until the process's descriptors and goroutines are
// back to at most fds and gs (plus a little slack), and returns the counts
// it saw. Negative bounds wait only until the counts stop changing.
func settleCounts(t *testing.T, fds, gs int) (int, int) {
	t.Helper()
	f, g, prevF, prevG := -1, -1, -1, -1
	settled := func() bool {
		runtime.GC()
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		prevF, prevG = f, g
		f, g = len(ents), runtime.NumGoroutine()
		if fds >= 0 {
			return f <= fds+2 && g <= gs+2
		}
		return f == prevF && g == prevG
	}
	if testwait.Until(testwait.Guard, settled) != nil {
		t.Fatalf("after every unmount: %d descriptors and %d goroutines, against %d and %d before", f, g, fds, gs)
	}
	return f, g
}
