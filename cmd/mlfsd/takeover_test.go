package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/node"
)

// waitExit waits for a daemon to exit and returns its error.
func (d *nodeDaemon) waitExit(t *testing.T) error {
	t.Helper()
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("mlfsd daemon did not exit; stderr:\n%s", d.stderr)
		return nil
	}
}

// readAt reads len(want) bytes at off from f and compares them.
func readAtCheck(t *testing.T, f *os.File, want []byte, off int64) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, off); err != nil && err != io.EOF {
		t.Fatalf("read %s at %d: %v", f.Name(), off, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %s at %d: wrong bytes", f.Name(), off)
	}
}

// TestDaemonTakeoverKeepsOpenFiles: a second `mlfsd daemon --takeover`
// takes the running daemon's input mount while a reader holds a file open
// mid-way; the reader goes on through the same fd with the right bytes,
// the old daemon exits 0 without unmounting, and the new one serves new
// opens, listings and the API, and unmounts on SIGTERM.
func TestDaemonTakeoverKeepsOpenFiles(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "data", "sub"), 0o755)
	big := randomBytes(t, 8<<20)
	os.WriteFile(filepath.Join(root, "bkt", "data", "big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(root, "bkt", "data", "sub", "small.txt"), []byte("small"), 0o644)
	_, endpoint := ossemutest.Start(t, root, ossemu.Options{})
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	in := t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", in); code != 0 {
		t.Fatalf("mount input: %s", errOut)
	}
	f, err := os.Open(filepath.Join(in, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	readAtCheck(t, f, big[:3<<20], 0)
	// A directory handle held open across the takeover as well.
	dh, err := os.Open(filepath.Join(in, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	defer dh.Close()

	d2 := startNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	if !strings.Contains(d.stderr.String(), "handed the mounts over") {
		t.Errorf("old daemon did not log the handover:\n%s", d.stderr)
	}
	if !strings.Contains(d2.stderr.String(), "took over mount") {
		t.Errorf("new daemon did not log the takeover:\n%s", d2.stderr)
	}
	// Same fd, after the old process is gone.
	readAtCheck(t, f, big[3<<20:], 3<<20)
	readAtCheck(t, f, big[:1<<20], 0)
	names, err := dh.Readdirnames(-1)
	if err != nil || len(names) != 1 || names[0] != "small.txt" {
		t.Errorf("listing through the directory handle held across the takeover: %v, %v", names, err)
	}
	if got, err := os.ReadFile(filepath.Join(in, "sub", "small.txt")); err != nil || string(got) != "small" {
		t.Errorf("new open after the takeover: %q, %v", got, err)
	}
	var ms []node.MountInfo
	code, lst, errOut := d2.client(t, "status", "--daemon", d2.socket, "--json")
	if code != 0 || json.Unmarshal([]byte(lst), &ms) != nil || len(ms) != 1 || ms[0].Target != in {
		t.Fatalf("status of the new daemon: %s %s", lst, errOut)
	}
	f.Close()
	dh.Close()
	t.Logf("old daemon:\n%s\nnew daemon:\n%s", d.stderr, d2.stderr)
	d2.stop(t)
	if isMounted(t, in) {
		t.Errorf("%s still mounted after the new daemon stopped", in)
	}
}
