package csidriver

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/fs/mountinfo"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// plugin is a driver served over gRPC on a unix socket, as the kubelet
// and the provisioner reach it, mounting through an in-process node.
type plugin struct {
	node       csi.NodeClient
	n          *node.Node // the in-process node it mounts through
	controller csi.ControllerClient
	log        *syncBuffer
	kubelet    string // the kubelet root
}

// startPlugin serves a driver whose kubelet root is a temp dir; opt's
// NASRoots, EphemeralAttributes and ControllerKey are used as given (the
// node gets the same NAS roots, as the daemon would).
func startTrustPlugin(t *testing.T, opt Options) *plugin {
	t.Helper()
	p := &plugin{log: &syncBuffer{}, kubelet: t.TempDir()}
	s := node.Defaults()
	s.Cache.Dir = t.TempDir()
	s.Cache.MemoryBytes = 64 << 20
	s.Cache.FreeFloorBytes = 0
	s.Output.StagingDir = t.TempDir()
	policy := opt.NASRoots
	n, err := node.New(t.Context(), node.Options{Settings: s, NASRoots: &policy})
	if err != nil {
		t.Fatal(err)
	}
	opt.NodeID, opt.Mounter, opt.KubeletRoot = "trust-node", n, p.kubelet
	opt.Settings = s
	opt.Log = slog.New(slog.NewJSONHandler(p.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, l) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer ccancel()
		if err := n.Close(cctx); err != nil {
			t.Errorf("node Close: %v", err)
		}
		if t.Failed() {
			t.Logf("plugin log:\n%s", p.log)
		}
	})
	p.node, p.controller, p.n = csi.NewNodeClient(conn), csi.NewControllerClient(conn), n
	return p
}

func fsCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

// podTarget returns a kubelet-style target for a pod's volume, its parent
// made as the kubelet makes it.
func (p *plugin) podTarget(t *testing.T, pod, vol string) string {
	t.Helper()
	dir := filepath.Join(p.kubelet, "pods", pod, "volumes", "kubernetes.io~csi", vol)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "mount")
}

func mounted(t *testing.T, path string) bool {
	t.Helper()
	_, ok, err := mountinfo.Lookup(path)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestHostileVolumeAttributes: a pod author's inline volume (and a
// PersistentVolume) can name a host directory only under the
// administrator's --nas-root, an output only under a read-write one, and
// an inline volume can set only the allowed attributes, never
// shared-cache; nothing is mounted or created for a refused one. A volume
// under an allowed root mounts.
func TestHostileVolumeAttributes(t *testing.T) {
	store := t.TempDir()
	data, out := filepath.Join(store, "data"), filepath.Join(store, "out")
	for _, d := range []string{data, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(data, "etc")); err != nil {
		t.Fatal(err)
	}
	// The allowed input below must hold something (an empty input fails).
	if err := os.WriteFile(filepath.Join(data, "shard"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy, err := nasroots.Parse([]string{data + ":ro", out + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	p := startTrustPlugin(t, Options{NASRoots: policy})
	ctx := t.Context()
	eph := func(attrs map[string]string) map[string]string {
		attrs["csi.storage.k8s.io/ephemeral"] = "true"
		attrs["csi.storage.k8s.io/pod.name"] = "evil"
		return attrs
	}
	for i, c := range []struct {
		attrs map[string]string
		want  string // in the error
	}{
		{eph(map[string]string{"uri": "nas:///etc/"}), "not an allowed nas root"},
		{eph(map[string]string{"uri": "nas:///etc/", "mode": "output"}), "not an allowed nas root"},
		{eph(map[string]string{"uri": "nas://" + data + "/etc/"}), "not an allowed nas root"},
		{eph(map[string]string{"uri": "nas://" + data + "/", "mode": "output"}), "read-only"},
		{eph(map[string]string{"uri": "nas://" + data + "/", AttrSharedCache: "nas://" + out + "/tier/"}), `"shared-cache"`},
		{eph(map[string]string{"uri": "nas://" + data + "/", AttrSharedCacheSize: "1GiB"}), `"shared-cache-size"`},
		{eph(map[string]string{"uri": "nas://" + data + "/", "upload-concurrency": "2"}), `"upload-concurrency"`},
		{map[string]string{"uri": "nas:///etc/"}, "not an allowed nas root"},
		{map[string]string{"uri": "nas://" + data + "/", AttrSharedCache: "nas://" + data + "/tier/"}, "read-only"},
	} {
		target := p.podTarget(t, "evil", "v"+string(rune('a'+i)))
		_, err := p.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: "v", TargetPath: target, VolumeContext: c.attrs,
			VolumeCapability: fsCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want InvalidArgument saying %s", c.attrs, err, c.want)
		}
		if mounted(t, target) {
			t.Fatalf("%v: refused, yet %s is mounted", c.attrs, target)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Errorf("%v: a refused publish left %s behind", c.attrs, target)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "tier")); !os.IsNotExist(err) {
		t.Errorf("a refused shared cache tier was created: %v", err)
	}

	// Allowed: an inline input of the read-only root, and an output of
	// the read-write one.
	for _, attrs := range []map[string]string{
		eph(map[string]string{"uri": "nas://" + data + "/", "mode": "input"}),
		{"uri": "nas://" + out + "/run/", "mode": "output"},
	} {
		target := p.podTarget(t, "good", attrs["mode"])
		req := &csi.NodePublishVolumeRequest{VolumeId: "g", TargetPath: target, VolumeContext: attrs,
			VolumeCapability: fsCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}
		if _, err := p.node.NodePublishVolume(ctx, req); err != nil {
			t.Fatalf("%v: %v", attrs, err)
		}
		if !mounted(t, target) {
			t.Fatalf("%v: published, not mounted", attrs)
		}
		if _, err := p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "g", TargetPath: target}); err != nil {
			t.Fatalf("unpublish %v: %v", attrs, err)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Errorf("unpublish left the target %s: %v", target, err)
		}
	}
}

// TestEphemeralAttributesNeverSharedCache: the administrator cannot hand
// the shared cache tier to pods.
func TestEphemeralAttributesNeverSharedCache(t *testing.T) {
	for _, k := range []string{AttrSharedCache, AttrSharedCacheSize, "cache-memory", "no-such-option"} {
		_, err := New(Options{NodeID: "n", Mounter: refuse{}, EphemeralAttributes: []string{AttrURI, k}})
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("--ephemeral-attributes with %s: %v, want an error naming it", k, err)
		}
	}
	if _, err := New(Options{NodeID: "n", Mounter: refuse{}, EphemeralAttributes: []string{AttrURI, AttrMode, "upload-concurrency"}}); err != nil {
		t.Errorf("a mount option on the list: %v", err)
	}
}

// TestTargetsOnlyUnderKubeletRoot: publish and unpublish act only on
// targets under the kubelet root: a target outside it, one reached by
// "../", one that is a link out of it are refused; unpublish removes no
// regular file and leaves a mount that is not mlfsd's alone.
func TestTargetsOnlyUnderKubeletRoot(t *testing.T) {
	store := t.TempDir()
	policy, err := nasroots.Parse([]string{store + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	p := startTrustPlugin(t, Options{NASRoots: policy})
	ctx := t.Context()
	outside := t.TempDir()
	victimDir := filepath.Join(outside, "empty")
	victimFile := filepath.Join(outside, "file")
	os.MkdirAll(victimDir, 0o755)
	os.WriteFile(victimFile, []byte("keep"), 0o644)
	link := p.podTarget(t, "pod", "link")
	if err := os.Symlink(victimDir, link); err != nil {
		t.Fatal(err)
	}
	dotdot := p.kubelet + "/pods/../../" + filepath.Base(outside) + "/empty"
	if rel, err := filepath.Rel(filepath.Dir(p.kubelet), outside); err == nil && !strings.HasPrefix(rel, "..") {
		dotdot = p.kubelet + "/../" + rel + "/empty"
	}
	attrs := map[string]string{"uri": "nas://" + store + "/", "mode": "output"}
	for _, target := range []string{victimDir, filepath.Join(outside, "new"), dotdot, link, "relative/target"} {
		_, err := p.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target,
			VolumeContext: attrs, VolumeCapability: fsCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("publish at %s: %v, want InvalidArgument", target, err)
		}
		_, err = p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("unpublish at %s: %v, want InvalidArgument", target, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); !os.IsNotExist(err) {
		t.Errorf("publish outside the kubelet root created a directory: %v", err)
	}
	for _, path := range []string{victimDir, victimFile, link} {
		if _, err := os.Lstat(path); err != nil || mounted(t, path) {
			t.Errorf("%s: %v, mounted %v; want it there as it was", path, err, mounted(t, path))
		}
	}

	// Under the root: a regular file is not removed, and not mounted on.
	file := p.podTarget(t, "pod", "file")
	os.WriteFile(file, []byte("kubelet's"), 0o644)
	_, err = p.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: file,
		VolumeContext: attrs, VolumeCapability: fsCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("publish at a regular file: %v, want InvalidArgument", err)
	}
	_, err = p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: file})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("unpublish of a regular file: %v, want FailedPrecondition", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "kubelet's" {
		t.Errorf("the regular file after unpublish: %q, %v", b, err)
	}

	// A mount that is not mlfsd's stays.
	foreign := p.podTarget(t, "pod", "tmpfs")
	os.MkdirAll(foreign, 0o755)
	if err := unix.Mount("tmpfs", foreign, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(foreign, unix.MNT_DETACH) })
	_, err = p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: foreign})
	if status.Code(err) != codes.FailedPrecondition || !mounted(t, foreign) {
		t.Errorf("unpublish of a tmpfs: %v (still mounted: %v), want FailedPrecondition and the tmpfs left", err, mounted(t, foreign))
	}

	// An empty directory kubelet gave, never mounted: removed.
	empty := p.podTarget(t, "pod", "empty")
	os.MkdirAll(empty, 0o750)
	if _, err := p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: empty}); err != nil {
		t.Errorf("unpublish of the kubelet's empty target: %v", err)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("the empty target stays: %v", err)
	}
}

// TestDeleteVolumeOnlyWhatItCreated: DeleteVolume with an ID someone
// wrote (the old unsigned form, a made-up MAC, a MAC under another key)
// deletes nothing; a volume this controller created with onDelete: delete
// is deleted.
func TestDeleteVolumeOnlyWhatItCreated(t *testing.T) {
	store := t.TempDir()
	base := filepath.Join(store, "volumes")
	victim := filepath.Join(store, "precious")
	for _, d := range []string{base, victim} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(victim, "model.pt"), []byte("weights"), 0o644)
	policy, err := nasroots.Parse([]string{store + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("the-controller-key-of-this-cluster")
	p := startTrustPlugin(t, Options{NASRoots: policy, ControllerKey: key})
	ctx := t.Context()
	vu, err := policy.Check(mustURI(t, "nas://"+victim+"/"), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{
		"mlfsd:delete:nas://" + victim + "/",
		"mlfsd:delete:AAAAAAAAAAAAAAAAAAAAAA:nas://" + victim + "/",
		volumeID([]byte("some-other-clusters-key"), policyDelete, vu),
	} {
		if _, err := p.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("DeleteVolume %s: %v, want OK (nothing of ours)", id, err)
		}
		if b, err := os.ReadFile(filepath.Join(victim, "model.pt")); err != nil || string(b) != "weights" {
			t.Fatalf("DeleteVolume %s removed data it did not create: %q, %v", id, b, err)
		}
	}
	if !strings.Contains(p.log.String(), "did not sign") {
		t.Errorf("no warning about the unsigned IDs in the log")
	}

	created, err := p.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-1",
		Parameters:         map[string]string{"uri": "nas://" + base + "/", "mode": "output", ParamOnDelete: policyDelete},
		VolumeCapabilities: []*csi.VolumeCapability{fsCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(base, "pvc-1", "ckpt"), []byte("x"), 0o644)
	if _, err := p.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: created.GetVolume().GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "pvc-1")); !os.IsNotExist(err) {
		t.Errorf("the volume this controller created was not deleted: %v", err)
	}

	// A StorageClass whose base is not an allowed root provisions nothing.
	_, err = p.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-2",
		Parameters:         map[string]string{"uri": "nas:///etc/", "mode": "output"},
		VolumeCapabilities: []*csi.VolumeCapability{fsCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("CreateVolume under /etc: %v, want InvalidArgument", err)
	}
	if _, err := os.Stat("/etc/pvc-2"); !os.IsNotExist(err) {
		t.Errorf("CreateVolume made /etc/pvc-2: %v", err)
	}
}

// TestOnDeleteNeedsKey: without a controller key, a volume that would be
// deleted is not provisioned.
func TestOnDeleteNeedsKey(t *testing.T) {
	store := t.TempDir()
	policy, err := nasroots.Parse([]string{store + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	p := startTrustPlugin(t, Options{NASRoots: policy})
	_, err = p.controller.CreateVolume(t.Context(), &csi.CreateVolumeRequest{Name: "pvc-1",
		Parameters:         map[string]string{"uri": "nas://" + store + "/", ParamOnDelete: policyDelete},
		VolumeCapabilities: []*csi.VolumeCapability{fsCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--controller-key-file") {
		t.Errorf("onDelete: delete without a key: %v, want InvalidArgument naming --controller-key-file", err)
	}
}

// TestCallLogHidesEveryField: a uri carrying user:secret@, a secret put
// in an attribute instead of a Secret, and the error answered to the
// kubelet: none of them carries the secret into the log or the answer.
func TestCallLogHidesEveryField(t *testing.T) {
	p := startTrustPlugin(t, Options{})
	target := p.podTarget(t, "pod", "leak")
	for _, attrs := range []map[string]string{
		{"uri": "oss://LTAIkeyid:Sup3rSecretValue@bkt/data/"},
		{"uri": "oss://bkt/data/", "oss-access-key-secret": "Sup3rSecretValue"},
		{"uri": "s3://bkt/data/?endpoint=http://minio:9000&secret_key=Sup3rSecretValue"},
	} {
		_, err := p.node.NodePublishVolume(t.Context(), &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target,
			VolumeContext: attrs, VolumeCapability: fsCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)})
		if err == nil {
			t.Fatalf("%v: published", attrs)
		}
		if strings.Contains(err.Error(), "Sup3rSecretValue") {
			t.Errorf("the secret is in the answer to the kubelet: %v", err)
		}
	}
	log := p.log.String()
	if !strings.Contains(log, "NodePublishVolume") || !strings.Contains(log, "bkt/data/") {
		t.Fatalf("the calls were not logged:\n%s", log)
	}
	if strings.Contains(log, "Sup3rSecretValue") {
		t.Errorf("the secret reached the log:\n%s", log)
	}
}

func mustURI(t *testing.T, s string) backends.URI {
	t.Helper()
	u, err := backends.ParseURI(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
