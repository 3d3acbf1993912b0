package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
)

// TestDaemonTakeoverDuringUmountDrain: `mlfsd umount` of an output whose
// uploads are still queued is draining when a new daemon takes over. The
// old daemon cuts the drain (nothing is unmounted) and answers so; the
// client sends the unmount again to the new daemon, which recovered the
// journal, drains and unmounts: the command exits 0, every file is in the
// store whole, and the mount is gone.
func TestDaemonTakeoverDuringUmountDrain(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "out"), 0o755)
	// 2 MiB/s a connection, one upload at a time: the drain of 4 files of
	// 2 MiB takes about 4 s, and the takeover comes during it.
	_, endpoint := startSignedOSS(t, root, ossemu.Options{ConnBandwidth: 2 << 20})
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	out := t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--upload-concurrency", "1", "oss://bkt/out/", out); code != 0 {
		t.Fatalf("mount output: %s", errOut)
	}
	takeover := forkNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	files := writeDrainFiles(t, out)

	umount := mlfsdCmd(t, "umount", "--daemon", d.socket, out)
	ossEnv(umount)
	var uout, uerr bytes.Buffer
	umount.Stdout, umount.Stderr = &uout, &uerr
	if err := umount.Start(); err != nil {
		t.Fatal(err)
	}
	umounted := make(chan error, 1)
	go func() { umounted <- umount.Wait() }()
	t.Cleanup(func() {
		umount.Process.Kill()
		<-umounted
	})
	d2 := takeoverDuringDrain(t, d, takeover)
	if _, err := os.Stat(api.TakeoverMarker(d.socket)); !os.IsNotExist(err) {
		t.Errorf("the takeover marker is still there once the new daemon listens: %v", err)
	}
	select {
	case err := <-umounted:
		umounted <- err
		if err != nil {
			t.Fatalf("mlfsd umount across the takeover: %v; stderr:\n%s\nnew daemon:\n%s", err, &uerr, d2.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("mlfsd umount never returned; stderr:\n%s\nnew daemon:\n%s", &uerr, d2.stderr)
	}
	// Exited 0: drained and unmounted by the new daemon. Nothing waits.
	checkDrainedByNewDaemon(t, filepath.Join(root, "bkt", "out"), files, out, d, d2)
	if code, stdout, _ := d2.client(t, "status", "--daemon", d2.socket); code != 0 || strings.Contains(stdout, out) {
		t.Errorf("the new daemon still lists %s (exit %d):\n%s", out, code, stdout)
	}
}

// writeDrainFiles writes 4 files of 2 MiB into dir, an output mount, and
// returns their contents by name.
func writeDrainFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for i := range 4 {
		name := fmt.Sprintf("f%d.bin", i)
		files[name] = randomBytes(t, 2<<20)
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// takeoverDuringDrain waits until daemon d drains an unmount, then starts
// the new daemon (takeover), waits for d to exit, checks that the switch
// cut the drain, and returns the new daemon.
func takeoverDuringDrain(t *testing.T, d *nodeDaemon, takeover func() *nodeDaemon) *nodeDaemon {
	t.Helper()
	waitDraining(t, d)
	d2 := takeover()
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	if !strings.Contains(d.stderr.String(), "unmount cut by a handover") {
		t.Fatalf("the drain was not under way at the switch (the test lost its point); old daemon:\n%s", d.stderr)
	}
	return d2
}

// waitDraining waits until daemon d says (its API's status) that it
// drains a mount.
func waitDraining(t *testing.T, d *nodeDaemon) {
	t.Helper()
	c := api.NewClient(d.socket)
	testwait.EventuallyNoError(t, func() error {
		st, err := c.Status(context.Background())
		if err != nil {
			return err
		}
		for _, s := range st {
			if s.State == node.StateDraining {
				return nil
			}
		}
		return fmt.Errorf("no mount draining in %+v; daemon:\n%s", st, d.stderr)
	}, "a mount of the daemon to drain")
}

// checkDrainedByNewDaemon checks, once an unmount across a takeover
// returned success, that every file is whole in store (the directory of
// the output's prefix), that target is no longer mounted and the new
// daemon d2 unmounted it, and that neither daemon logged an error.
func checkDrainedByNewDaemon(t *testing.T, store string, files map[string][]byte, target string, d, d2 *nodeDaemon) {
	t.Helper()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(store, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the store after the unmount: %d bytes of %d, %v", name, len(got), len(want), err)
		}
	}
	if isMounted(t, target) {
		t.Errorf("%s still mounted after the unmount succeeded", target)
	}
	if !strings.Contains(d2.stderr.String(), `"msg":"unmounted"`) {
		t.Errorf("the new daemon did not unmount it:\n%s", d2.stderr)
	}
	for _, dd := range []*nodeDaemon{d, d2} {
		if s := dd.stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, `"level":"ERROR"`) {
			t.Errorf("a daemon logged an error:\n%s", s)
		}
	}
}

// TestDaemonUmountOrdinaryErrorNotRetried: an unmount the daemon refuses
// for an ordinary reason fails at once with its message (it is not waited
// on as a takeover would be).
func TestDaemonUmountOrdinaryErrorNotRetried(t *testing.T) {
	d := startNodeDaemon(t, t.TempDir())
	missing := filepath.Join(t.TempDir(), "not-mounted")
	cmd := mlfsdCmd(t, "umount", "--daemon", d.socket, missing)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); !ok || !strings.Contains(errb.String(), missing) || !strings.Contains(errb.String(), "not mounted") {
		t.Fatalf("umount of a target not mounted: %v; stderr:\n%s", err, &errb)
	}
	if strings.Contains(errb.String(), "takeover") {
		t.Errorf("an ordinary error was taken for a takeover:\n%s", &errb)
	}
	if n := strings.Count(d.stderr.String(), `"msg":"api: unmount"`); n != 1 {
		t.Errorf("the daemon saw %d unmount requests, want 1:\n%s", n, d.stderr)
	}
}

// TestDaemonTakeoverDuringRunDrain: `mlfsd run --daemon` is waiting for
// its outputs to be durable when a new daemon takes over. The drain cut by
// the old daemon is sent again to the new one, which uploads what was
// pending; the run exits 0 with every file in the store whole and nothing
// mounted.
func TestDaemonTakeoverDuringRunDrain(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "store")
	os.MkdirAll(filepath.Join(root, "bkt", "out"), 0o755)
	// 64 KiB/s a connection: each 1 MiB file takes about 16 s to upload,
	// longer than a handover waits for uploads in flight.
	_, endpoint := startSignedOSS(t, root, ossemu.Options{ConnBandwidth: 64 << 10})
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	spec := filepath.Join(tmp, "job.yaml")
	if err := os.WriteFile(spec, []byte(`name: drain
command: sh -c 'for i in 0 1 2 3; do yes "line $i" | head -c 1048576 > "$PAI_OUTPUT_MODEL/f$i.txt"; done'
`), 0o644); err != nil {
		t.Fatal(err)
	}
	takeover := forkNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	run := mlfsdCmd(t, "run", "--daemon", d.socket, "--spec", spec, "--root", filepath.Join(tmp, "ml"), "--output-path", "oss://bkt/out/")
	ossEnv(run)
	var rerr syncBuffer
	run.Stderr = &rerr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- run.Wait() }()
	t.Cleanup(func() {
		run.Process.Kill()
		<-ran
	})
	waitDraining(t, d) // the run waits until its output is durable
	d2 := takeover()
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	select {
	case err := <-ran:
		ran <- err
		if err != nil {
			t.Fatalf("mlfsd run across the takeover: %v; stderr:\n%s\nnew daemon:\n%s", err, &rerr, d2.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("mlfsd run never returned; stderr:\n%s\nnew daemon:\n%s", &rerr, d2.stderr)
	}
	// The old daemon cut the drain and answered so (the run sent it again).
	if !strings.Contains(d.stderr.String(), `"path":"/v1/drain","status":503`) {
		t.Errorf("the drain was not cut by the switch (the test lost its point); old daemon:\n%s", d.stderr)
	}
	for i := range 4 {
		want := bytes.Repeat([]byte(fmt.Sprintf("line %d\n", i)), 1<<20/7+1)[:1<<20]
		got, err := os.ReadFile(filepath.Join(root, "bkt", "out", "model", fmt.Sprintf("f%d.txt", i)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("f%d.txt in the store after the run: %d bytes of %d, %v", i, len(got), len(want), err)
		}
	}
	if m := mountsUnder(t, tmp); len(m) > 0 {
		t.Errorf("still mounted after mlfsd run --daemon: %v", m)
	}
}

// TestCSIDaemonUnpublishAcrossTakeover: the CSI plugin, whose mounts the
// node daemon makes, unpublishes an output whose uploads are still queued
// while a new daemon takes over. The old daemon cuts the drain; the plugin's
// API client sends the unmount again to the new daemon, which drains and
// unmounts: NodeUnpublishVolume succeeds, every file is in the store whole,
// and the target is neither mounted nor left behind.
func TestCSIDaemonUnpublishAcrossTakeover(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "store")
	os.MkdirAll(filepath.Join(store, "bkt", "out"), 0o755)
	// 2 MiB/s a connection, one upload at a time: the drain of 4 files of
	// 2 MiB takes about 4 s, and the takeover comes during it.
	_, endpoint := startSignedOSS(t, store, ossemu.Options{ConnBandwidth: 2 << 20})
	dir := filepath.Join(root, "daemon")
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	mountRoot := filepath.Join(root, "pods")
	os.MkdirAll(mountRoot, 0o755)
	csiEndpoint, logs := startCSI(t, mountRoot, "--daemon", d.socket, "--oss-endpoint", endpoint)
	nc, _ := csiClient(t, csiEndpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	target := filepath.Join(mountRoot, "pod", "volumes", "out", "mount")
	os.MkdirAll(filepath.Dir(target), 0o755)
	if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: "out", TargetPath: target,
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		VolumeContext:    map[string]string{"uri": "oss://bkt/out/", "mode": "output", "upload-concurrency": "1"},
	}); err != nil {
		t.Fatalf("publish output: %v\n%s", err, logs)
	}
	takeover := forkNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	files := writeDrainFiles(t, target)

	unpublished := make(chan error, 1)
	go func() {
		_, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "out", TargetPath: target})
		unpublished <- err
	}()
	d2 := takeoverDuringDrain(t, d, takeover)
	select {
	case err := <-unpublished:
		if err != nil {
			t.Fatalf("NodeUnpublishVolume across the takeover: %v\nplugin:\n%s\nnew daemon:\n%s", err, logs, d2.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("NodeUnpublishVolume never returned; plugin:\n%s\nnew daemon:\n%s", logs, d2.stderr)
	}
	checkDrainedByNewDaemon(t, filepath.Join(store, "bkt", "out"), files, target, d, d2)
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target %s not removed by the unpublish: %v", target, err)
	}
}
