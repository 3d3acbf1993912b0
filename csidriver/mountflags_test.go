package csidriver

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/mlfsd/mlfsd/node/nasroots"
)

// TestPublishWithMountOptions: a PersistentVolume's mountOptions (ro,
// allow_other, uid=, gid=, file_mode=, dir_mode=), which kubelet passes
// as the capability's mount flags, set the mount's owners and modes as
// fstab's -o does. Before, they were dropped without a word.
func TestPublishWithMountOptions(t *testing.T) {
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "shard"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(data, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	policy, err := nasroots.Parse([]string{data + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	p := startTrustPlugin(t, Options{NASRoots: policy})
	capWith := func(flags ...string) *csi.VolumeCapability {
		c := fsCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
		c.GetMount().MountFlags = flags
		return c
	}
	target := p.podTarget(t, "pod", "data")
	// An output volume made read-only by its mountOptions' ro.
	attrs := map[string]string{"uri": "nas://" + data + "/", "mode": "output"}
	if _, err := p.node.NodePublishVolume(t.Context(), &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeContext: attrs,
		VolumeCapability: capWith("ro", "allow_other", "uid=1000", "gid=2000", "file_mode=0440", "dir_mode=0550", "noatime")}); err != nil {
		t.Fatal(err)
	}
	defer p.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target})
	for name, want := range map[string]uint32{"shard": syscall.S_IFREG | 0o440, "sub": syscall.S_IFDIR | 0o550} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(target, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode != want || st.Uid != 1000 || st.Gid != 2000 {
			t.Errorf("%s: mode %o owner %d:%d, want %o 1000:2000", name, st.Mode, st.Uid, st.Gid, want)
		}
	}
	if err := os.WriteFile(filepath.Join(target, "new"), nil, 0o644); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("writing to a volume whose mountOptions say ro: %v", err)
	}

	for i, c := range []struct {
		flags []string
		attrs map[string]string
		want  string
	}{
		{[]string{"uid=alice"}, nil, "uid"},
		{[]string{"cache_memory=1GiB"}, nil, "node settings"},
		{[]string{"daemon=/run/mlfsd/api.sock"}, nil, "daemon="},
		{[]string{"suid"}, nil, "nosuid"},
		{[]string{"uid=1000"}, map[string]string{"uid": "2000"}, `"uid" says "2000"`},
	} {
		a := map[string]string{"uri": "nas://" + data + "/"}
		for k, v := range c.attrs {
			a[k] = v
		}
		tgt := p.podTarget(t, "bad", string(rune('a'+i)))
		_, err := p.node.NodePublishVolume(t.Context(), &csi.NodePublishVolumeRequest{VolumeId: "b", TargetPath: tgt, VolumeContext: a, VolumeCapability: capWith(c.flags...)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("mount options %v, attributes %v: %v; want an error saying %s", c.flags, c.attrs, err, c.want)
		}
		if mounted(t, tgt) {
			t.Errorf("mount options %v: refused, yet mounted", c.flags)
		}
	}
}

// TestProvisionedInputMayBeEmpty: an input volume of an empty directory
// fails to publish naming its URI and allow-empty (a static PV naming a
// dataset that is not there), while a volume CreateVolume just made, empty
// by construction, publishes: its context carries allow-empty.
func TestProvisionedInputMayBeEmpty(t *testing.T) {
	store := t.TempDir()
	empty := filepath.Join(store, "empty")
	for _, d := range []string{empty, filepath.Join(store, "volumes")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	policy, err := nasroots.Parse([]string{store + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	p := startTrustPlugin(t, Options{NASRoots: policy})
	capRO := fsCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
	target := p.podTarget(t, "pod", "static")
	_, err = p.node.NodePublishVolume(t.Context(), &csi.NodePublishVolumeRequest{VolumeId: "s", TargetPath: target,
		VolumeContext: map[string]string{"uri": "nas://" + empty + "/"}, VolumeCapability: capRO})
	if err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "allow-empty") {
		t.Errorf("publishing an empty static input: %v; want an error naming %s and allow-empty", err, empty)
	}
	if mounted(t, target) {
		t.Fatal("a refused publish is mounted")
	}

	vol, err := p.controller.CreateVolume(t.Context(), &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{capRO},
		Parameters: map[string]string{"uri": "nas://" + filepath.Join(store, "volumes") + "/", "mode": "input"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := vol.GetVolume().GetVolumeContext()[AttrAllowEmpty]; got != "true" {
		t.Errorf("CreateVolume's context: allow-empty %q, want true", got)
	}
	target = p.podTarget(t, "pod", "provisioned")
	if _, err := p.node.NodePublishVolume(t.Context(), &csi.NodePublishVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId(), TargetPath: target,
		VolumeContext: vol.GetVolume().GetVolumeContext(), VolumeCapability: capRO}); err != nil {
		t.Fatalf("publishing a volume CreateVolume made: %v", err)
	}
	if _, err := p.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId(), TargetPath: target}); err != nil {
		t.Fatal(err)
	}
}
