package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMountTableKeptAndRestored: the state dir holds the live mounts (no
// secret), and a node started on it mounts them again.
func TestMountTableKeptAndRestored(t *testing.T) {
	stateDir := t.TempDir()
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("data"), 0o644)
	mnt := t.TempDir()
	n := newTestNode(t, stateDir)
	req := MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true,
		Credentials: Credentials{OSSAccessKeyID: "AKID", OSSAccessKeySecret: "very-secret"}}
	if _, err := n.Mount(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(stateDir, "mounts.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "very-secret") || strings.Contains(string(data), "AKID") {
		t.Errorf("the mount table holds credentials:\n%s", data)
	}
	var doc stateDoc
	if err := json.Unmarshal(data, &doc); err != nil || len(doc.Mounts) != 1 || doc.Mounts[0].Target != mnt || !doc.Mounts[0].HadCredentials {
		t.Fatalf("mount table: %s, %v", data, err)
	}
	if err := n.Unmount(t.Context(), mnt); err != nil {
		t.Fatal(err)
	}
	// What a crashed node leaves: the table with the mount in it.
	if err := (&stateFile{path: filepath.Join(stateDir, "mounts.json")}).save(doc.Mounts); err != nil {
		t.Fatal(err)
	}
	n2 := newTestNode(t, stateDir)
	restored, err := n2.Restore(t.Context())
	if err != nil || len(restored) != 1 || restored[0].Target != mnt {
		t.Fatalf("Restore: %+v, %v", restored, err)
	}
	if got := readFile(t, filepath.Join(mnt, "f")); string(got) != "data" {
		t.Errorf("read through the restored mount: %q", got)
	}
	// A table entry that cannot be mounted is reported, not fatal.
	bad := append(doc.Mounts, stateMount{Target: filepath.Join(t.TempDir(), "gone"), URI: "nas://" + src + "/", ReadOnly: true})
	if err := n2.Unmount(t.Context(), mnt); err != nil {
		t.Fatal(err)
	}
	if err := n2.state.save(bad); err != nil {
		t.Fatal(err)
	}
	restored, err = n2.Restore(t.Context())
	if len(restored) != 1 || err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Restore with a bad entry: %+v, %v", restored, err)
	}
}
