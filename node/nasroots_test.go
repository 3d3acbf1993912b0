package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/fs/mountinfo"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// TestMountChecksNASRoots: a node given the administrator's nas roots (as
// the daemon is) refuses a request naming any other host directory, by
// path, through "..", through a link out of an allowed root, as an output
// of a read-only root, or as a shared cache tier, and mounts nothing for
// it; a request under an allowed root is served.
func TestMountChecksNASRoots(t *testing.T) {
	dir := t.TempDir()
	data, out := filepath.Join(dir, "data"), filepath.Join(dir, "out")
	for _, d := range []string{data, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := randomBytes(t, 100<<10)
	if err := os.WriteFile(filepath.Join(data, "x.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(data, "etc")); err != nil {
		t.Fatal(err)
	}
	policy, err := nasroots.Parse([]string{data + ":ro", out + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	s := Defaults()
	s.Cache.Dir = t.TempDir()
	s.Cache.MemoryBytes = 64 << 20
	s.Cache.FreeFloorBytes = 0
	s.Output.StagingDir = t.TempDir()
	n, err := New(t.Context(), Options{Settings: s, NASRoots: &policy, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNoMountsUnder(t, dir)
	})

	for _, req := range []MountRequest{
		{URI: "nas:///etc/", ReadOnly: true},
		{URI: "nas:///etc/"},
		{URI: "nas://" + data + "/"},                     // an output of a read-only root
		{URI: "nas://" + data + "/etc/", ReadOnly: true}, // a link out of the root
		{URI: "nas://" + dir + "/", ReadOnly: true},      // above the roots
		{URI: "nas://" + data + "/", ReadOnly: true, Options: map[string]string{"shared-cache": "nas://" + filepath.Join(dir, "tier") + "/"}},
	} {
		req.Target = filepath.Join(dir, "mnt")
		if err := os.MkdirAll(req.Target, 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := n.Mount(t.Context(), req)
		if !errors.Is(err, nasroots.ErrNotAllowed) {
			t.Errorf("%s (read-only %v, options %v): %v, want a refusal", req.URI, req.ReadOnly, req.Options, err)
		}
		if _, mounted, _ := mountinfo.Lookup(req.Target); mounted {
			t.Fatalf("%s: refused, but %s is mounted", req.URI, req.Target)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tier")); !os.IsNotExist(err) {
		t.Errorf("the refused shared cache tier was created: %v", err)
	}

	in := filepath.Join(dir, "in")
	os.MkdirAll(in, 0o755)
	if _, err := n.Mount(t.Context(), MountRequest{URI: "nas://" + data + "/", Target: in, ReadOnly: true}); err != nil {
		t.Fatalf("an input of an allowed root: %v", err)
	}
	if got := readFile(t, filepath.Join(in, "x.bin")); !bytes.Equal(got, want) {
		t.Errorf("read %d bytes through the allowed input, want %d", len(got), len(want))
	}
	o := filepath.Join(dir, "o")
	os.MkdirAll(o, 0o755)
	if _, err := n.Mount(t.Context(), MountRequest{URI: "nas://" + out + "/run1/", Target: o}); err != nil {
		t.Fatalf("an output of a read-write root: %v", err)
	}
}
