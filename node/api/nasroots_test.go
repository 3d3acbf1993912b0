package api

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/fs/mountinfo"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// TestDaemonRefusesNASRootNotAllowed: through the API socket, a client's
// request for a host directory outside the daemon's --nas-root (by path,
// or by a link under an allowed root) is refused with 403 naming the
// allowed roots, and nothing is mounted; one under an allowed root is
// served.
func TestDaemonRefusesNASRootNotAllowed(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(data, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy, err := nasroots.Parse([]string{data + ":ro"})
	if err != nil {
		t.Fatal(err)
	}
	s := node.Defaults()
	s.Cache.Dir = ""
	s.Output.StagingDir = t.TempDir()
	n, err := node.New(t.Context(), node.Options{Settings: s, NASRoots: &policy})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "api.sock")
	serveNode(t, n, sock)
	c := NewClient(sock)

	target := filepath.Join(dir, "mnt")
	os.MkdirAll(target, 0o755)
	for _, req := range []node.MountRequest{
		{URI: "nas:///etc/", ReadOnly: true},
		{URI: "nas://" + data + "/etc/", ReadOnly: true},
		{URI: "nas://" + data + "/"},
	} {
		req.Target = target
		_, err := c.Mount(t.Context(), req)
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != 403 || !strings.Contains(ae.Message, "--nas-root") {
			t.Errorf("%s (read-only %v): %v, want 403 naming --nas-root", req.URI, req.ReadOnly, err)
		}
		if _, ok, _ := mountinfo.Lookup(target); ok {
			t.Fatalf("%s: refused, yet mounted", req.URI)
		}
	}
	if _, err := c.Mount(t.Context(), node.MountRequest{URI: "nas://" + data + "/", Target: target, ReadOnly: true}); err != nil {
		t.Fatalf("an input of the allowed root: %v", err)
	}
	if err := c.Unmount(t.Context(), target); err != nil {
		t.Fatal(err)
	}
}
