package node

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/sharedcache"
)

// TestInputMountThroughSharedCache: an input mount naming a shared tier (a
// NAS directory here) reads right and fills the tier; a mount naming a tier
// that cannot be opened still mounts and reads from its source; one tier
// URI with other settings is refused, naming both.
func TestInputMountThroughSharedCache(t *testing.T) {
	n := newTestNode(t, "")
	src, tierDir := t.TempDir(), t.TempDir()
	data := randomBytes(t, 3<<20+5)
	os.WriteFile(filepath.Join(src, "shard.bin"), data, 0o644)
	ctx := t.Context()
	mnt := t.TempDir()
	opts := map[string]string{"shared-cache": "nas://" + tierDir + "/", "shared-cache-size": "1GiB"}
	if _, err := n.Mount(ctx, MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true, Options: opts}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "shard.bin")); !bytes.Equal(got, data) {
		t.Fatalf("read through the shared tier: %d bytes, want %d", len(got), len(data))
	}
	n.shared.mu.Lock()
	st := n.shared.tiers["nas://"+tierDir+"/"]
	n.shared.mu.Unlock()
	if st == nil {
		t.Fatal("no tier open after a mount naming one")
	}
	if err := st.t.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := st.t.Stats(); s.WriteBytes != int64(len(data)) {
		t.Errorf("the tier took %d bytes of a %d-byte file read cold (stats %+v)", s.WriteBytes, len(data), s)
	}
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == sharedcache.MetricWriteBytes
	}
	if !found {
		t.Errorf("no %s in the node's registry", sharedcache.MetricWriteBytes)
	}

	// Another size for the same tier: refused, naming both.
	opts2 := map[string]string{"shared-cache": "nas://" + tierDir + "/", "shared-cache-size": "2GiB"}
	_, err = n.Mount(ctx, MountRequest{URI: "nas://" + src + "/", Target: t.TempDir(), ReadOnly: true, Options: opts2})
	if err == nil || !strings.Contains(err.Error(), "1.0GiB") || !strings.Contains(err.Error(), "2.0GiB") {
		t.Errorf("a second size for one tier: %v", err)
	}

	// A tier that cannot be opened (no such directory): the mount reads
	// from its source (another one, which the node's cache does not hold).
	src3 := t.TempDir()
	os.WriteFile(filepath.Join(src3, "shard.bin"), data, 0o644)
	mnt3 := t.TempDir()
	opts3 := map[string]string{"shared-cache": "nas://" + filepath.Join(tierDir, "missing") + "/"}
	if _, err := n.Mount(ctx, MountRequest{URI: "nas://" + src3 + "/", Target: mnt3, ReadOnly: true, Options: opts3}); err != nil {
		t.Fatalf("a mount whose tier is unreachable: %v", err)
	}
	if got := readFile(t, filepath.Join(mnt3, "shard.bin")); !bytes.Equal(got, data) {
		t.Fatalf("read with the tier unreachable: %d bytes, want %d", len(got), len(data))
	}
}
