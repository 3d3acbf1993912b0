package node

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/fs/mountinfo"
)

// waitingGauge is the node's MetricMountsWaiting.
func waitingGauge(t *testing.T, n *Node) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == MetricMountsWaiting {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s in the node's registry", MetricMountsWaiting)
	return 0
}

// statusOf returns the status of target.
func statusOf(t *testing.T, n *Node, target string) MountStatus {
	t.Helper()
	for _, s := range n.Status() {
		if s.Target == target {
			return s
		}
	}
	t.Fatalf("%s not in Status: %+v", target, n.Status())
	return MountStatus{}
}

// assertNoCredentialIn fails if any file under dir holds any value of c,
// public or secret.
func assertNoCredentialIn(t *testing.T, dir string, c Credentials) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for name, v := range c.Fields(false) {
			if strings.Contains(string(data), v) {
				t.Errorf("%s holds credential %s", p, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMountTableKeptAndRestored: the state dir holds the live mounts and
// no credential; a node started on it mounts again those made with the
// node's own identity, while one made with a client's credentials waits
// for them (in Status and the metric), is never mounted without them,
// and is mounted once its client brings them again.
func TestMountTableKeptAndRestored(t *testing.T) {
	stateDir := t.TempDir()
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("data"), 0o644)
	mnt, podMnt := t.TempDir(), t.TempDir()
	n := newTestNode(t, stateDir)
	req := MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true}
	if _, err := n.Mount(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	for _, c := range everyCredential(t) {
		podReq := MountRequest{URI: "nas://" + src + "/", Target: podMnt, ReadOnly: true, Credentials: c}
		if _, err := n.Mount(t.Context(), podReq); err != nil {
			t.Fatal(err)
		}
		assertNoCredentialIn(t, stateDir, c)
		if err := n.Unmount(t.Context(), podMnt); err != nil {
			t.Fatal(err)
		}
	}
	podCreds := Credentials{HDFSUser: "pod-user", S3AccessKeyID: "AKIA-pod", S3SecretAccessKey: "pod-secret"}
	podReq := MountRequest{URI: "nas://" + src + "/", Target: podMnt, ReadOnly: true, Credentials: podCreds}
	if _, err := n.Mount(t.Context(), podReq); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(stateDir, "mounts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc stateDoc
	if err := json.Unmarshal(data, &doc); err != nil || len(doc.Mounts) != 2 || doc.Mounts[0].HadCredentials == doc.Mounts[1].HadCredentials {
		t.Fatalf("mount table: %s, %v", data, err)
	}
	for _, target := range []string{mnt, podMnt} {
		if err := n.Unmount(t.Context(), target); err != nil {
			t.Fatal(err)
		}
	}
	// What a crashed node leaves: the table with the mounts in it.
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
	// The pod's mount waits: not mounted, said so in Status and the metric.
	if _, mounted, err := mountinfo.Lookup(podMnt); err != nil || mounted {
		t.Fatalf("the pod's mount was restored without its credentials (mounted %v, %v)", mounted, err)
	}
	if s := statusOf(t, n2, podMnt); s.State != StateWaitingCredentials || statusOf(t, n2, mnt).State != StateMounted {
		t.Errorf("status: %+v", n2.Status())
	}
	if g := waitingGauge(t, n2); g != 1 {
		t.Errorf("%s = %v, want 1", MetricMountsWaiting, g)
	}
	// Kept in the table while it waits (a second crash does not lose it).
	if ms, err := n2.state.load(); err != nil || len(ms) != 2 {
		t.Errorf("mount table while waiting: %+v, %v", ms, err)
	}
	// Never with the node's identity; nothing else at its target.
	if _, err := n2.Mount(t.Context(), MountRequest{URI: podReq.URI, Target: podMnt, ReadOnly: true}); !errors.Is(err, ErrNeedsCredentials) {
		t.Errorf("the pod's mount without credentials: %v", err)
	}
	if _, err := n2.Mount(t.Context(), MountRequest{URI: "nas://" + t.TempDir() + "/", Target: podMnt, ReadOnly: true, Credentials: podCreds}); !errors.Is(err, ErrTargetBusy) {
		t.Errorf("another channel at the waiting target: %v", err)
	}
	// Its client brings them again (a CSI republish): mounted.
	if _, err := n2.Mount(t.Context(), podReq); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(podMnt, "f")); string(got) != "data" {
		t.Errorf("read through the pod's mount: %q", got)
	}
	if s := statusOf(t, n2, podMnt); s.State != StateMounted {
		t.Errorf("status after the republish: %+v", s)
	}
	if g := waitingGauge(t, n2); g != 0 {
		t.Errorf("%s = %v after the republish, want 0", MetricMountsWaiting, g)
	}
	assertNoCredentialIn(t, stateDir, podCreds)

	// A waiting mount is unmounted (the pod went away meanwhile) and
	// forgotten.
	if err := n2.Unmount(t.Context(), podMnt); err != nil {
		t.Fatal(err)
	}
	if err := n2.Unmount(t.Context(), mnt); err != nil {
		t.Fatal(err)
	}
	if err := n2.state.save(doc.Mounts); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.Restore(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n2.Unmount(t.Context(), podMnt); err != nil {
		t.Fatalf("unmount a waiting mount: %v", err)
	}
	if ms, err := n2.state.load(); err != nil || len(ms) != 1 || ms[0].Target != mnt {
		t.Errorf("mount table after unmounting the waiting mount: %+v, %v", ms, err)
	}
	if g := waitingGauge(t, n2); g != 0 {
		t.Errorf("%s = %v, want 0", MetricMountsWaiting, g)
	}

	// A table entry that cannot be mounted is reported, not fatal.
	if err := n2.Unmount(t.Context(), mnt); err != nil {
		t.Fatal(err)
	}
	bad := []stateMount{doc.Mounts[0], doc.Mounts[1], {Target: filepath.Join(t.TempDir(), "gone"), URI: "nas://" + src + "/", ReadOnly: true}}
	if bad[0].HadCredentials {
		bad[0], bad[1] = bad[1], bad[0]
	}
	if err := n2.state.save(bad); err != nil {
		t.Fatal(err)
	}
	restored, err = n2.Restore(t.Context())
	if len(restored) != 1 || err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Restore with a bad entry: %+v, %v", restored, err)
	}
}
