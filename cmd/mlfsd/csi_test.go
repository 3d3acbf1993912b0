package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// csiSanityVersion is the csi-test release the suite runs.
const csiSanityVersion = "v5.6.0"

// expectedSkips are the csi-sanity specs skipped because mlfsd does not
// advertise the capability they test, by the skip message csi-sanity
// gives. Any other skip fails the test. Keep the README's list in step.
var expectedSkips = map[string]string{
	"GetCapacity not supported":                                 "no GET_CAPACITY: a store prefix has no capacity",
	"ListVolumes not supported":                                 "no LIST_VOLUMES: the controller keeps no state",
	"capacity of the volume is unknown":                         "volumes report capacity 0 (unknown)",
	"Snapshot not supported":                                    "no snapshots",
	"Volume Cloning not supported":                              "no cloning",
	"Modify volume not supported":                               "no MODIFY_VOLUME",
	"Modify Volume not supported":                               "no MODIFY_VOLUME",
	"ControllerPublishVolume not supported":                     "nothing to attach",
	"Controller Publish, UnpublishVolume not supported":         "nothing to attach",
	"ControllerUnpublishVolume not supported":                   "nothing to attach",
	"ListSnapshots not supported":                               "no snapshots",
	"GetSnapshot not supported":                                 "no snapshots",
	"DeleteSnapshot not supported":                              "no snapshots",
	"CreateSnapshot not supported":                              "no snapshots",
	"ControllerExpandVolume not supported":                      "no expansion",
	"ControllerModifyVolume not supported":                      "no MODIFY_VOLUME",
	"ControllerGetVolumeHealth not supported":                   "no volume health",
	"ControllerListVolumeHealth not supported":                  "no volume health",
	"Service does not have single node multi writer capability": "no SINGLE_NODE_MULTI_WRITER",
	"NodeStageVolume not supported":                             "no staging",
	"NodeUnstageVolume not supported":                           "no staging",
	"NodeGetVolume not supported":                               "no GET_VOLUME_STATS",
	"GroupControllerService not supported":                      "no group controller service",
	"NodeExpandVolume not supported":                            "no expansion",
	"NodeGetVolumeHealth not supported":                         "no volume health",
	"NodeGetStorageHealth not supported":                        "no storage health",
}

// startCSI runs `mlfsd csi` in a subprocess and waits until it answers,
// with mountRoot as its kubelet root, the test's temp dirs as its nas
// root, and a controller key.
// The plugin is stopped (SIGTERM) and every mount under mountRoot checked
// gone at the end of the test.
func startCSI(t *testing.T, mountRoot string, args ...string) (endpoint string, logs *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	endpoint = "unix://" + sock
	key := filepath.Join(dir, "controller.key")
	if err := os.WriteFile(key, []byte("test-controller-key-"+t.Name()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := mlfsdCmd(t, append([]string{"--log-level=debug", "csi", "--endpoint", endpoint, "--node-id", "sanity-node",
		"--kubelet-root", mountRoot, "--nas-root", testNASRoot(t), "--controller-key-file", key}, args...)...)
	logs = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			<-exited
			t.Errorf("mlfsd csi did not stop on SIGINT; logs:\n%s", logs)
		}
		for _, m := range csiMountsUnder(t, mountRoot) {
			t.Errorf("%s still mounted after the test", m)
			exec.Command("umount", "-l", m).Run()
		}
	})
	// Probe is the CSI plugin's readiness check (what the kubelet asks).
	var probeErr error
	gone := false
	if err := testwait.Until(testwait.Guard, func() bool {
		select {
		case <-exited:
			gone = true
			return true
		default:
		}
		conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
			cancel()
			conn.Close()
		}
		probeErr = err
		return err == nil
	}); err != nil {
		t.Fatalf("mlfsd csi did not answer Probe: %v; logs:\n%s", probeErr, logs)
	}
	if gone {
		t.Fatalf("mlfsd csi exited; logs:\n%s", logs)
	}
	return endpoint, logs
}

// csiMountsUnder lists the mountpoints under root.
func csiMountsUnder(t *testing.T, root string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], root+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// ginkgoReport is the part of a Ginkgo JSON report the test reads.
type ginkgoReport []struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		State                   string
		Failure                 struct {
			Message string
		}
	}
}

// runSanity runs csi-sanity against endpoint with the volume parameters
// and secrets given, and checks that every spec passed or was skipped for
// an expected reason. It returns the full names of the passed specs.
func runSanity(t *testing.T, sanity, endpoint, mountRoot string, params, secrets map[string]any) []string {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, v map[string]any) string {
		data, err := json.Marshal(v) // JSON is YAML
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	report := filepath.Join(dir, "report.json")
	if err := os.MkdirAll(mountRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sanity,
		"--csi.endpoint", endpoint,
		"--csi.mountdir", filepath.Join(mountRoot, "target"),
		"--csi.stagingdir", filepath.Join(mountRoot, "staging"),
		"--csi.testvolumeparameters", write("params.yaml", params),
		"--csi.secrets", write("secrets.yaml", secrets),
		"--ginkgo.json-report", report,
		"--ginkgo.no-color",
		"--ginkgo.timeout", "30m",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("csi-sanity wrote no report (%v): %v\n%s", runErr, err, out.String())
	}
	var rep ginkgoReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("csi-sanity report: %v", err)
	}
	var passed []string
	skipped := map[string][]string{}
	for _, r := range rep {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != "It" {
				if s.State != "passed" {
					t.Errorf("csi-sanity %s %s: %s: %s", s.LeafNodeType, strings.Join(s.ContainerHierarchyTexts, " "), s.State, s.Failure.Message)
				}
				continue
			}
			name := strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
			switch s.State {
			case "passed":
				passed = append(passed, name)
			case "skipped", "pending":
				msg := strings.TrimSpace(s.Failure.Message)
				if s.State == "pending" {
					msg = "pending (XIt in csi-sanity)"
				} else if _, ok := expectedSkips[msg]; !ok {
					t.Errorf("csi-sanity skipped %q: %q (not an expected skip)", name, msg)
				}
				skipped[msg] = append(skipped[msg], name)
			default:
				t.Errorf("csi-sanity %q: %s: %s", name, s.State, s.Failure.Message)
			}
		}
	}
	if t.Failed() {
		t.Logf("csi-sanity output:\n%s", out.String())
	}
	if len(passed) == 0 {
		t.Fatalf("csi-sanity passed no spec (%v):\n%s", runErr, out.String())
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("csi-sanity failed (%v) though every spec passed:\n%s", runErr, out.String())
	}
	reasons := make([]string, 0, len(skipped))
	for r := range skipped {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		t.Logf("skipped %d spec(s): %s", len(skipped[r]), r)
	}
	t.Logf("csi-sanity: %d specs passed", len(passed))
	for _, want := range []string{"Node Service should work", "Node Service should be idempotent",
		"Controller Service [Controller Server] CreateVolume should not fail when requesting to create a volume with already existing name and same capacity"} {
		found := false
		for _, p := range passed {
			if strings.HasSuffix(p, want) || p == want {
				found = true
			}
		}
		if !found {
			t.Errorf("csi-sanity spec %q did not pass", want)
		}
	}
	return passed
}

// sanityBinary builds csi-sanity from the Go module proxy (a released
// version, installed outside this module) once, and keeps it in the user
// cache dir for later runs. A parallel build elsewhere is harmless: each
// installs into its own temp dir and renames into place.
func sanityBinary(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	final := filepath.Join(cache, "mlfsd-test", "csi-sanity-"+csiSanityVersion)
	if _, err := os.Stat(final); err == nil {
		return final
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.MkdirTemp(filepath.Dir(final), "build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	cmd := exec.Command("go", "install", "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@"+csiSanityVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-mod=mod")
	cmd.Dir = bin
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install csi-sanity@%s: %v\n%s", csiSanityVersion, err, out)
	}
	if err := os.Rename(filepath.Join(bin, "csi-sanity"), final); err != nil {
		t.Fatal(err)
	}
	return final
}

func TestCSISanityNAS(t *testing.T) {
	sanity := sanityBinary(t)
	root := t.TempDir()
	base := filepath.Join(root, "store", "volumes")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mountRoot := filepath.Join(root, "mnt")
	endpoint, logs := startCSI(t, mountRoot, "--cache-dir", filepath.Join(root, "cache"), "--staging-dir", filepath.Join(root, "staging"))
	runSanity(t, sanity, endpoint, mountRoot,
		map[string]any{"uri": "nas://" + base + "/", "mode": "output", "onDelete": "delete"},
		map[string]any{})
	// onDelete: delete removed every volume's prefix.
	left, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("volumes left in the store after DeleteVolume with onDelete: delete: %v", left)
	}
	if t.Failed() {
		t.Logf("mlfsd csi logs:\n%s", logs)
	}
}

func TestCSISanityOSS(t *testing.T) {
	sanity := sanityBinary(t)
	root := t.TempDir()
	store := filepath.Join(root, "oss")
	if err := os.MkdirAll(filepath.Join(store, "bkt", "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	const keyID, secret = "sanity-key-id", "sanity-secret-d3adb33f"
	_, ossEndpoint := ossemutest.Start(t, store, ossemu.Options{AccessKeyID: keyID, AccessKeySecret: secret})
	// Mounts go through the node daemon here (the NAS run mounts in the
	// plugin's own process).
	d := startNodeDaemon(t, filepath.Join(root, "daemon"), "--oss-endpoint", ossEndpoint)
	mountRoot := filepath.Join(root, "mnt")
	endpoint, logs := startCSI(t, mountRoot, "--daemon", d.socket, "--oss-endpoint", ossEndpoint)
	creds := map[string]string{"oss-access-key-id": keyID, "oss-access-key-secret": secret}
	runSanity(t, sanity, endpoint, mountRoot,
		map[string]any{"uri": "oss://bkt/volumes/", "mode": "input"},
		map[string]any{"CreateVolumeSecret": creds, "DeleteVolumeSecret": creds, "NodePublishVolumeSecret": creds,
			"ControllerValidateVolumeCapabilitiesSecret": creds})
	// onDelete defaults to retain: the volumes' prefixes are still there.
	left, err := os.ReadDir(filepath.Join(store, "bkt", "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) == 0 {
		t.Error("no volume prefix retained in the store after DeleteVolume with the default onDelete: retain")
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the OSS secret reached the plugin's log:\n%s", logs)
	}
	if strings.Contains(d.stderr.String(), secret) {
		t.Errorf("the OSS secret reached the daemon's log:\n%s", d.stderr)
	}
	if got := d.stderr.String(); !strings.Contains(got, "sanity-node-full") {
		t.Errorf("the daemon made none of the plugin's mounts; its log:\n%s", got)
	}
	if t.Failed() {
		t.Logf("mlfsd csi logs:\n%s", logs)
	}
}

// csiClient connects to the plugin at endpoint.
func csiClient(t *testing.T, endpoint string) (csi.NodeClient, csi.ControllerClient) {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return csi.NewNodeClient(conn), csi.NewControllerClient(conn)
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

// TestCSINodePublish drives the node service directly: an output published
// and written, published again (same: OK; different: AlreadyExists), bad
// attributes refused naming the key, unpublish draining into the store, a
// read-only publish of an output, an inline ephemeral input.
func TestCSINodePublish(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "store")
	os.MkdirAll(filepath.Join(store, "data"), 0o755)
	want := randomData(t, 2<<20+5)
	os.WriteFile(filepath.Join(store, "data", "in.bin"), want, 0o644)
	mountRoot := filepath.Join(root, "pods")
	os.MkdirAll(mountRoot, 0o755)
	endpoint, logs := startCSI(t, mountRoot, "--cache-dir", filepath.Join(root, "cache"), "--staging-dir", filepath.Join(root, "staging"))
	nc, _ := csiClient(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer func() {
		if t.Failed() {
			t.Logf("mlfsd csi logs:\n%s", logs)
		}
	}()

	outURI := "nas://" + store + "/out/"
	target := filepath.Join(mountRoot, "pod1", "volumes", "model", "mount")
	os.MkdirAll(filepath.Dir(target), 0o755)
	pub := &csi.NodePublishVolumeRequest{
		VolumeId: "model", TargetPath: target,
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		VolumeContext:    map[string]string{"uri": outURI, "mode": "output", "upload-concurrency": "2"},
	}
	if _, err := nc.NodePublishVolume(ctx, pub); err != nil {
		t.Fatalf("publish output: %v", err)
	}
	if _, err := nc.NodePublishVolume(ctx, pub); err != nil {
		t.Errorf("publishing the same volume again: %v, want OK", err)
	}
	other := proto.Clone(pub).(*csi.NodePublishVolumeRequest)
	other.VolumeContext = map[string]string{"uri": outURI, "mode": "output", "upload-concurrency": "3"}
	if _, err := nc.NodePublishVolume(ctx, other); status.Code(err) != codes.AlreadyExists {
		t.Errorf("publishing different options at the same target: %v, want AlreadyExists", err)
	}
	model := randomData(t, 6<<20+1)
	if err := os.WriteFile(filepath.Join(target, "model.pt"), model, 0o644); err != nil {
		t.Fatalf("write through the published output: %v", err)
	}

	for key, attrs := range map[string]map[string]string{
		"upload-concurrency": {"uri": outURI, "mode": "output", "upload-concurrency": "none"},
		"mode":               {"uri": outURI, "mode": "scratch"},
		"cache-memory":       {"uri": outURI, "cache-memory": "1GiB"},
		"uri":                {"uri": "ftp://host/x/"},
	} {
		bad := proto.Clone(pub).(*csi.NodePublishVolumeRequest)
		bad.TargetPath = filepath.Join(mountRoot, "pod2", "bad")
		bad.VolumeContext = attrs
		_, err := nc.NodePublishVolume(ctx, bad)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"`+key+`"`) {
			t.Errorf("attributes %v: %v, want InvalidArgument naming %q", attrs, err, key)
		}
		if _, serr := os.Stat(bad.TargetPath); serr == nil {
			t.Errorf("a refused publish left %s behind", bad.TargetPath)
		}
	}

	if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "model", TargetPath: target}); err != nil {
		t.Fatalf("unpublish output: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(store, "out", "model.pt"))
	if err != nil || !bytes.Equal(got, model) {
		t.Fatalf("model.pt in the store right after unpublish: %d of %d bytes, %v", len(got), len(model), err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target %s not removed by unpublish: %v", target, err)
	}
	if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "model", TargetPath: target}); err != nil {
		t.Errorf("unpublishing again: %v, want OK", err)
	}

	// The same output published read-only: an input of its prefix.
	ro := proto.Clone(pub).(*csi.NodePublishVolumeRequest)
	ro.Readonly = true
	if _, err := nc.NodePublishVolume(ctx, ro); err != nil {
		t.Fatalf("publish read-only: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(target, "model.pt")); err != nil || !bytes.Equal(got, model) {
		t.Errorf("model.pt through the read-only publish: %d bytes, %v", len(got), err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), []byte("x"), 0o644); err == nil {
		t.Error("wrote through a read-only publish")
	}
	if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "model", TargetPath: target}); err != nil {
		t.Fatalf("unpublish read-only: %v", err)
	}

	// An inline ephemeral input: kubelet adds its own keys.
	eph := &csi.NodePublishVolumeRequest{
		VolumeId: "csi-0f3a", TargetPath: filepath.Join(mountRoot, "pod3", "train"),
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		VolumeContext: map[string]string{"uri": "nas://" + store + "/data/", "mode": "input",
			"csi.storage.k8s.io/ephemeral": "true", "csi.storage.k8s.io/pod.name": "train-0",
			"csi.storage.k8s.io/pod.namespace": "default", "csi.storage.k8s.io/serviceAccount.name": "default"},
	}
	os.MkdirAll(filepath.Dir(eph.TargetPath), 0o755)
	if _, err := nc.NodePublishVolume(ctx, eph); err != nil {
		t.Fatalf("publish inline input: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(eph.TargetPath, "in.bin")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("in.bin through the inline volume: %d bytes, %v", len(got), err)
	}
	if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: eph.VolumeId, TargetPath: eph.TargetPath}); err != nil {
		t.Fatalf("unpublish inline input: %v", err)
	}
}

// TestCSIUnpublishDrainTimeout: an output whose uploads cannot finish
// within --unpublish-drain-timeout is unmounted anyway, the call reports
// DeadlineExceeded once, the retry succeeds, and what was left is uploaded
// at the next publish of the same channel.
func TestCSIUnpublishDrainTimeout(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "store")
	mountRoot := filepath.Join(root, "pods")
	os.MkdirAll(mountRoot, 0o755)
	endpoint, logs := startCSI(t, mountRoot, "--cache-dir", filepath.Join(root, "cache"), "--staging-dir", filepath.Join(root, "staging"),
		"--unpublish-drain-timeout", "1s")
	nc, _ := csiClient(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	target := filepath.Join(mountRoot, "pod", "out")
	pub := &csi.NodePublishVolumeRequest{
		VolumeId: "out", TargetPath: target,
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		// 64 KiB/s: 8 MiB takes about two minutes, far past the 1s bound.
		VolumeContext: map[string]string{"uri": "nas://" + store + "/out/", "mode": "output", "upload-bwlimit": "64KiB"},
	}
	if _, err := nc.NodePublishVolume(ctx, pub); err != nil {
		t.Fatalf("publish: %v", err)
	}
	data := randomData(t, 8<<20)
	if err := os.WriteFile(filepath.Join(target, "big.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "out", TargetPath: target})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "journaled") {
		t.Fatalf("unpublish with a drain that cannot finish: %v, want DeadlineExceeded saying what stays journaled\n%s", err, logs)
	}
	if isMounted(t, target) {
		t.Fatal("still mounted after the bounded drain")
	}
	if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "out", TargetPath: target}); err != nil {
		t.Fatalf("retried unpublish: %v", err)
	}
	// Publishing the channel again (no cap now) uploads what was left.
	pub.VolumeContext = map[string]string{"uri": "nas://" + store + "/out/", "mode": "output"}
	if _, err := nc.NodePublishVolume(ctx, pub); err != nil {
		t.Fatalf("publish again: %v", err)
	}
	if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "out", TargetPath: target}); err != nil {
		t.Fatalf("unpublish after the journaled upload: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(store, "out", "big.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("big.bin in the store after the second publish drained: %d of %d bytes, %v", len(got), len(data), err)
	}
}
