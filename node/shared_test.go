package node

import (
	"bytes"
	"context"
	"log/slog"
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
	n := newTestNodeWith(t, "", func(s *Settings) { s.Shared.KeyFile = writeTierKey(t) })
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

// writeTierKey writes a shared cache key file and returns its path.
func writeTierKey(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tier.key")
	if err := os.WriteFile(p, []byte("test-tier-key-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharedCacheNeedsKey: a node whose default tier has no key, or a bad
// key file, does not start, and one without a key refuses a mount naming a
// tier; each error names --shared-cache-key-file.
func TestSharedCacheNeedsKey(t *testing.T) {
	tierURI := "nas://" + t.TempDir() + "/"
	empty := filepath.Join(t.TempDir(), "empty.key")
	os.WriteFile(empty, nil, 0o600)
	for _, c := range []struct {
		name string
		set  func(*Settings)
		want string
	}{
		{"no key", func(s *Settings) { s.Shared.URI = tierURI }, "--shared-cache-key-file"},
		{"missing key file", func(s *Settings) { s.Shared.URI, s.Shared.KeyFile = tierURI, "/nonexistent/tier.key" }, "/nonexistent/tier.key"},
		{"empty key file", func(s *Settings) { s.Shared.URI, s.Shared.KeyFile = tierURI, empty }, "is empty"},
	} {
		s := Defaults()
		s.Cache.Dir = t.TempDir()
		s.Output.StagingDir = t.TempDir()
		c.set(&s)
		n, err := New(t.Context(), Options{Settings: s, Log: slog.New(slog.DiscardHandler)})
		if err == nil {
			n.Close(context.Background())
			t.Errorf("%s: the node started", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--shared-cache-key-file") {
			t.Errorf("%s: %v; want it to name --shared-cache-key-file and say %q", c.name, err, c.want)
		}
	}

	n := newTestNode(t, "")
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644)
	mnt := t.TempDir()
	_, err := n.Mount(t.Context(), MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true,
		Options: map[string]string{"shared-cache": tierURI}})
	if err == nil || !strings.Contains(err.Error(), "--shared-cache-key-file") {
		t.Errorf("a mount naming a tier on a node without its key: %v; want a refusal naming --shared-cache-key-file", err)
	}
	// Nor may a mount name a key file of its own.
	_, err = n.Mount(t.Context(), MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true,
		Options: map[string]string{"shared-cache": tierURI, "shared-cache-key-file": "/etc/hostname"}})
	if err == nil || !strings.Contains(err.Error(), "node-wide") {
		t.Errorf("a mount naming its own key file: %v; want it refused as node-wide", err)
	}
}
