package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// newTestNode returns a node with its cache and staging under the test's
// temp dir, closed (and everything unmounted) when the test ends.
func newTestNode(t *testing.T, stateDir string) *Node {
	t.Helper()
	return newTestNodeWith(t, stateDir, nil)
}

// newTestNodeWith is newTestNode with its settings changed by set first.
func newTestNodeWith(t *testing.T, stateDir string, set func(*Settings)) *Node {
	t.Helper()
	s := Defaults()
	s.Cache.Dir = t.TempDir()
	s.Cache.MemoryBytes = 64 << 20
	s.Cache.FreeFloorBytes = 0
	s.Output.StagingDir = t.TempDir()
	if set != nil {
		set(&s)
	}
	n, err := New(t.Context(), Options{Settings: s, StateDir: stateDir, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNoMountsUnder(t, filepath.Dir(t.TempDir()))
	})
	return n
}

// assertNoMountsUnder fails if anything is mounted under dir.
func assertNoMountsUnder(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], dir) {
			t.Errorf("still mounted: %s", l)
			syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
}

// readFile reads path in another process: a FUSE server must not serve
// reads to its own process (the Go runtime can deadlock).
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	out, err := exec.Command("cat", path).Output()
	if err != nil {
		t.Fatalf("cat %s: %v", path, err)
	}
	return out
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestInputMountsShareTheCache(t *testing.T) {
	n := newTestNode(t, "")
	src := t.TempDir()
	data := randomBytes(t, 6<<20)
	os.WriteFile(filepath.Join(src, "shard.bin"), data, 0o644)
	a, b := t.TempDir(), t.TempDir()
	ctx := t.Context()
	for _, mnt := range []string{a, b} {
		if _, err := n.Mount(ctx, MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true}); err != nil {
			t.Fatal(err)
		}
	}
	if got := readFile(t, filepath.Join(a, "shard.bin")); !bytes.Equal(got, data) {
		t.Fatal("first mount read wrong bytes")
	}
	if got := readFile(t, filepath.Join(b, "shard.bin")); !bytes.Equal(got, data) {
		t.Fatal("second mount read wrong bytes")
	}
	st := n.Status()
	if len(st) != 2 {
		t.Fatalf("status: %+v", st)
	}
	var first, second MountStatus
	for _, s := range st {
		if s.Target == a {
			first = s
		} else {
			second = s
		}
	}
	if first.BackendReadBytes < int64(len(data)) {
		t.Errorf("first mount read %d bytes from the store, want at least %d", first.BackendReadBytes, len(data))
	}
	if second.BackendReadBytes != 0 {
		t.Errorf("second mount read %d bytes from the store; the shared cache should have served them all", second.BackendReadBytes)
	}
	if len(n.List()) != 2 {
		t.Errorf("List: %+v", n.List())
	}
	for _, mnt := range []string{a, b} {
		if err := n.Unmount(ctx, mnt); err != nil {
			t.Fatal(err)
		}
	}
	if len(n.List()) != 0 {
		t.Errorf("List after unmount: %+v", n.List())
	}
}

func TestMountRequestsRefusedCleanly(t *testing.T) {
	n := newTestNode(t, "")
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644)
	ctx := t.Context()
	mnt := t.TempDir()
	req := MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true}
	info, err := n.Mount(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// The same request again is the same mount.
	again, err := n.Mount(ctx, req)
	if err != nil || again.Target != info.Target || !again.MountedAt.Equal(info.MountedAt) {
		t.Fatalf("identical request: %+v, %v", again, err)
	}
	other := req
	other.ReadOnly = false
	if _, err := n.Mount(ctx, other); !errors.Is(err, ErrTargetBusy) || !strings.Contains(err.Error(), mnt) {
		t.Errorf("different request on a mounted target: %v", err)
	}
	fresh := t.TempDir()
	for _, c := range []struct {
		req  MountRequest
		want string
	}{
		{MountRequest{URI: "nas://" + src + "/", ReadOnly: true}, "target"},
		{MountRequest{URI: "nas://" + src + "/", Target: filepath.Join(fresh, "missing"), ReadOnly: true}, "does not exist"},
		{MountRequest{URI: "gs://bucket/x/", Target: fresh, ReadOnly: true}, "scheme"},
		{MountRequest{URI: "nas://" + src + "/", Target: fresh, ReadOnly: true, Options: map[string]string{"oss-part-size": "0"}}, "--oss-part-size"},
		{MountRequest{URI: "nas://" + src + "/", Target: fresh, ReadOnly: true, Options: map[string]string{"cache-memory": "1GiB"}}, "node-wide"},
		{MountRequest{URI: "nas://" + src + "/nope/", Target: fresh, ReadOnly: true}, "does not exist"},
		{MountRequest{URI: "nas://" + src + "/f", Target: fresh}, "directory URI"},
	} {
		if _, err := n.Mount(ctx, c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Mount(%+v) = %v; want an error mentioning %q", c.req, err, c.want)
		}
	}
	assertNoMountsUnder(t, fresh)
	if err := n.Unmount(ctx, fresh); !errors.Is(err, ErrNotMounted) {
		t.Errorf("Unmount of an unknown target: %v", err)
	}
	if len(n.List()) != 1 {
		t.Errorf("List: %+v", n.List())
	}
}

func TestOutputUnmountDrains(t *testing.T) {
	n := newTestNode(t, "")
	dst := filepath.Join(t.TempDir(), "out")
	mnt := t.TempDir()
	ctx := t.Context()
	if _, err := n.Mount(ctx, MountRequest{URI: "nas://" + dst + "/", Target: mnt}); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(t, 3<<20)
	cmd := exec.Command("sh", "-c", "cat > "+filepath.Join(mnt, "ckpt.bin"))
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("write: %v %s", err, out)
	}
	if err := n.Unmount(ctx, mnt); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dst, "ckpt.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after Unmount the store holds %d bytes, %v; want the %d written", len(got), err, len(data))
	}
}
