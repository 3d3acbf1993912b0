package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends/endpointtest"
)

// TestMountHAWithSilentFirstNamenode: `mlfsd mount` of an HA URI whose
// first NameNode accepts connections and never answers mounts through the
// second (an `mlfsd emulate hdfs`), and the mount reads what the store
// holds.
func TestMountHAWithSilentFirstNamenode(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	writeRandom(t, filepath.Join(data, "shard-000.bin"), 1<<20+5)
	writeRandom(t, filepath.Join(data, "sub", "a.txt"), 1000)
	uri := startHDFSEmulator(t, root, "--block-size", "64KiB")
	nn2 := strings.TrimSuffix(strings.TrimPrefix(uri, "hdfs://"), "/")
	ha := "hdfs://" + endpointtest.Silent(t) + "," + nn2 + "/data/"

	mnt := t.TempDir()
	d := startDaemon(t, mlfsdCmd(t, "mount", "--cache-dir", t.TempDir(), "--hdfs-connect-timeout", "1s", "--read-only", ha, mnt), mnt)
	if out, err := exec.Command("diff", "-r", data, mnt).CombinedOutput(); err != nil {
		t.Errorf("diff -r DIR/data mount of %s: %v\n%s", ha, err, out)
	}
	want, err := os.ReadFile(filepath.Join(data, "shard-000.bin"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "shard-000.bin"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("read through the mount: %d bytes, %v", len(got), err)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("mlfsd mount exited with %v; stderr:\n%s", err, d.stderr)
	}
}
