package fs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/cache"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestSharedCacheFetchesOnce: two input mounts of one OSS channel, each
// with its own backend client (two all.Open calls of one URI, as two jobs
// on one host have) and its own View of one shared cache, read the same
// object: the store serves it once, as the emulator's counters show.
func TestSharedCacheFetchesOnce(t *testing.T) {
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	t.Setenv("OSS_SESSION_TOKEN", "")
	t.Setenv("OSS_ENDPOINT", "")
	root := t.TempDir()
	data := bytes.Repeat([]byte("shared cache, fetched once\n"), 300_000) // ~7.7 MiB
	if err := os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bkt", "data", "shard-0"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	emu, endpoint := ossemutest.Start(t, root, ossemu.Options{})
	u, err := backends.ParseURI("oss://bkt/data/")
	if err != nil {
		t.Fatal(err)
	}
	openBackend := func() backends.Backend {
		b, _, err := all.Open(context.Background(), u, all.Options{OSS: oss.Options{Endpoint: endpoint}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b1, b2 := openBackend(), openBackend()
	if b1.ID() != b2.ID() {
		t.Fatalf("two clients of one store and root have different IDs %q and %q: they could not share cached data", b1.ID(), b2.ID())
	}

	c, err := cache.New(cache.Options{Dir: t.TempDir(), MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	v1, v2 := c.View(), c.View()
	mnt1 := testMount(t, b1, mfs.InputOptions{Source: v1})
	mnt2 := testMount(t, b2, mfs.InputOptions{Source: v2})

	got, err := os.ReadFile(filepath.Join(mnt1, "shard-0"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("mount 1 read differs from the object")
	}
	// Wait for the copy to reach the disk tier (the writes run behind the
	// reader), so that the second mount cannot find a block in neither tier.
	testwait.Eventually(t, func() bool { return c.Stats().DiskBytes >= int64(len(data)) }, "the disk tier to hold the %d bytes read", len(data))
	first := emu.Stats()
	if first["bytes.out"] < int64(len(data)) || first["bytes.out"] > int64(len(data))*105/100 {
		t.Fatalf("the store sent %d bytes for a %d-byte object read once", first["bytes.out"], len(data))
	}

	got, err = os.ReadFile(filepath.Join(mnt2, "shard-0"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("mount 2 read differs from the object")
	}
	second := emu.Stats()
	if second["GetObject"] != first["GetObject"] || second["bytes.out"] != first["bytes.out"] {
		t.Fatalf("mount 2 fetched again: GetObject %d -> %d, bytes out %d -> %d",
			first["GetObject"], second["GetObject"], first["bytes.out"], second["bytes.out"])
	}
	s1, s2 := v1.Stats(), v2.Stats()
	if s1.BackendBytes < int64(len(data)) || s2.BackendBytes != 0 {
		t.Fatalf("backend bytes per mount: %d and %d, want all on mount 1 and none on mount 2", s1.BackendBytes, s2.BackendBytes)
	}
	if s2.MemoryHitBytes+s2.DiskHitBytes+s2.PassthroughBytes < int64(len(data)) {
		t.Fatalf("mount 2 stats %+v: want the whole object from the cache tiers", s2)
	}
}
