package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/mounthelper"
)

// helperDir is where mount(8) and umount(8) look for the fuse.mlfsd helpers.
const helperDir = "/sbin"

// installTestHelpers writes /sbin/mount.fuse.mlfsd and umount.fuse.mlfsd
// calling this test binary as mlfsd, for the test's duration. A lock file
// serialises tests of other checkouts doing the same; helpers installed for
// real (not by mlfsd's --install) are never overwritten. It returns the
// run directory the helpers keep their mount records in.
func installTestHelpers(t *testing.T) string {
	t.Helper()
	lock, err := os.OpenFile("/run/lock/mlfsd-mount-helper-test.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(t.TempDir(), "run")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := mounthelper.Install(helperDir, exe, []string{"MLFSD_TEST_MAIN=1", mounthelper.RunDirEnv + "=" + runDir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(filepath.Join(helperDir, mounthelper.MountHelperName))
		os.Remove(filepath.Join(helperDir, mounthelper.UmountHelperName))
		unix.Flock(int(lock.Fd()), unix.LOCK_UN)
		lock.Close()
	})
	return runDir
}

// run runs a system command (mount, umount) with a generous deadline and
// returns its combined output.
func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// fstypeOf returns the filesystem type mounted at mnt ("" if none).
func fstypeOf(t *testing.T, mnt string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && f[4] == mnt && len(g) > 0 {
			return g[0]
		}
	}
	return ""
}

// cleanupMount detaches mnt at the end of the test if a failure left it.
func cleanupMount(t *testing.T, mnt string) {
	t.Cleanup(func() {
		if fstypeOf(t, mnt) != "" {
			t.Errorf("%s still mounted at the end of the test", mnt)
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
}

// alive reports whether pid runs (a zombie waiting for init to reap it
// has exited).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] != 'Z'
}

// waitExit waits until the process pid is gone (polled: it is not our
// child), failing the test after a generous deadline.
func waitExit(t *testing.T, pid int) {
	t.Helper()
	testwait.Eventually(t, func() bool { return !alive(pid) }, "process %d to exit", pid)
}

func randomData(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMountHelperInput: `mount -t fuse.mlfsd -o ro,...` returns with the
// mount ready to read, shows as fuse.mlfsd, and `umount` removes it and
// ends the serving process.
func TestMountHelperInput(t *testing.T) {
	runDir := installTestHelpers(t)
	root := t.TempDir()
	data := filepath.Join(root, "data")
	os.MkdirAll(filepath.Join(data, "shards"), 0o755)
	want := randomData(t, 3<<20+17)
	if err := os.WriteFile(filepath.Join(data, "shards", "0.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	cleanupMount(t, mnt)

	out, err := run(t, "mount", "-t", "fuse.mlfsd", "-o", "ro,cache_dir="+filepath.Join(root, "cache")+",cache_memory=64MiB,staging_dir="+filepath.Join(root, "staging"),
		"nas://"+data+"/", mnt)
	if err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	// Ready on return: no waiting here.
	if got := fstypeOf(t, mnt); got != "fuse.mlfsd" {
		t.Fatalf("%s mounted as %q, want fuse.mlfsd", mnt, got)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "shards", "0.bin"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read through the mount: %d bytes, %v", len(got), err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "new"), []byte("x"), 0o644); err == nil {
		t.Error("wrote to a read-only (ro) mount")
	}
	rec, err := readRecordIn(runDir, mnt)
	if err != nil || rec.PID == 0 {
		t.Fatalf("mount record: %+v, %v", rec, err)
	}

	if out, err := run(t, "umount", mnt); err != nil {
		t.Fatalf("umount: %v\n%s", err, out)
	}
	if got := fstypeOf(t, mnt); got != "" {
		t.Fatalf("%s still mounted (%s) after umount", mnt, got)
	}
	// umount waited for the serving process.
	if alive(rec.PID) {
		t.Errorf("the mlfsd serving %s (pid %d) is still running after umount", mnt, rec.PID)
		waitExit(t, rec.PID)
	}
	if _, err := readRecordIn(runDir, mnt); !os.IsNotExist(err) {
		t.Errorf("mount record left after umount: %v", err)
	}
}

// readRecordIn reads the helper's record of mnt kept in runDir.
func readRecordIn(runDir, mnt string) (mounthelper.Record, error) {
	old, had := os.LookupEnv(mounthelper.RunDirEnv)
	os.Setenv(mounthelper.RunDirEnv, runDir)
	defer func() {
		if had {
			os.Setenv(mounthelper.RunDirEnv, old)
		} else {
			os.Unsetenv(mounthelper.RunDirEnv)
		}
	}()
	return mounthelper.ReadRecord(mnt)
}

// TestMountHelperFstabOutput: an fstab line of type fuse.mlfsd mounts an
// output, and `umount` returns only once what was written is in the store.
// The upload bandwidth cap keeps the uploads going well past the close, so
// the data is there after umount only because umount waited for the drain.
func TestMountHelperFstabOutput(t *testing.T) {
	installTestHelpers(t)
	root := t.TempDir()
	out := filepath.Join(root, "store", "model")
	mnt := filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	cleanupMount(t, mnt)
	fstab := filepath.Join(root, "fstab")
	line := "nas://" + out + "/ " + mnt + " fuse.mlfsd staging_dir=" + filepath.Join(root, "staging") +
		",upload_concurrency=2,upload_bwlimit=8MiB,output_passthrough=false,_netdev,noauto 0 0\n"
	if err := os.WriteFile(fstab, []byte("# test fstab\n"+line), 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err := run(t, "mount", "-T", fstab, mnt); err != nil {
		t.Fatalf("mount -T %s %s: %v\n%s", fstab, mnt, err, o)
	}
	if got := fstypeOf(t, mnt); got != "fuse.mlfsd" {
		t.Fatalf("%s mounted as %q", mnt, got)
	}
	files := map[string][]byte{"model.bin": randomData(t, 24<<20+3), "ckpt/step-1.pt": randomData(t, 1<<20)}
	for name, data := range files {
		p := filepath.Join(mnt, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	if o, err := run(t, "umount", mnt); err != nil {
		t.Fatalf("umount: %v\n%s", err, o)
	}
	// Nothing is polled: umount returned, so the data must be there.
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the store right after umount: %d of %d bytes, %v", name, len(got), len(want), err)
		}
	}
}

// TestMountHelperThroughDaemon: with -o daemon=SOCKET the node daemon makes
// the mount, and umount has the daemon drain and unmount it.
func TestMountHelperThroughDaemon(t *testing.T) {
	runDir := installTestHelpers(t)
	root := t.TempDir()
	d := startNodeDaemon(t, filepath.Join(root, "daemon"))
	out := filepath.Join(root, "store", "out")
	mnt := filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	cleanupMount(t, mnt)
	if o, err := run(t, "mount", "-t", "fuse.mlfsd", "-o", "daemon="+d.socket+",upload_concurrency=2,upload_bwlimit=2MiB", "nas://"+out+"/", mnt); err != nil {
		t.Fatalf("mount: %v\n%s", err, o)
	}
	if got := fstypeOf(t, mnt); got != "fuse.mlfsd" {
		t.Fatalf("%s mounted as %q", mnt, got)
	}
	if rec, err := readRecordIn(runDir, mnt); err != nil || rec.Daemon != d.socket || rec.PID != 0 {
		t.Fatalf("mount record %+v, %v: want one naming the daemon", rec, err)
	}
	want := randomData(t, 5<<20)
	if err := os.WriteFile(filepath.Join(mnt, "w.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err := run(t, "umount", mnt); err != nil {
		t.Fatalf("umount: %v\n%s", err, o)
	}
	got, err := os.ReadFile(filepath.Join(out, "w.bin"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("w.bin in the store right after umount: %d bytes, %v", len(got), err)
	}
	if fstypeOf(t, mnt) != "" {
		t.Error("still mounted after umount")
	}
	if code, stdout, stderr := d.client(t, "status", "--daemon", d.socket); code != 0 || strings.Contains(stdout, mnt) {
		t.Errorf("the daemon still lists %s after umount (exit %d):\n%s%s", mnt, code, stdout, stderr)
	}
}

// TestMountHelperRefusesBadOptions: a bad -o option fails the mount with
// an error naming it, and nothing is left mounted or running.
func TestMountHelperRefusesBadOptions(t *testing.T) {
	installTestHelpers(t)
	root := t.TempDir()
	data := filepath.Join(root, "data")
	os.Mkdir(data, 0o755)
	mnt := filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	cleanupMount(t, mnt)
	for opts, want := range map[string]string{
		"ro,cache_memroy=1GiB":             "cache_memroy",
		"ro,cache_memory=lots":             "cache_memory",
		"upload_concurrency=0":             "upload_concurrency",
		"ro,daemon=/x.sock,cache_dir=/tmp": "cache_dir",
	} {
		o, err := run(t, "mount", "-t", "fuse.mlfsd", "-o", opts, "nas://"+data+"/", mnt)
		if err == nil {
			t.Errorf("-o %s: mount succeeded", opts)
			run(t, "umount", mnt)
			continue
		}
		if !strings.Contains(o, want) {
			t.Errorf("-o %s: error does not name %s:\n%s", opts, want, o)
		}
		if fstypeOf(t, mnt) != "" {
			t.Fatalf("-o %s: left a mount", opts)
		}
	}
	// A mount that fails in mlfsd itself (no such directory) reports
	// mlfsd's error and leaves nothing behind.
	o, err := run(t, "mount", "-t", "fuse.mlfsd", "-o", "ro,cache_dir="+filepath.Join(root, "cache"), "nas://"+filepath.Join(root, "missing")+"/", mnt)
	if err == nil || !strings.Contains(o, "missing") {
		t.Errorf("mount of a missing directory: %v\n%s", err, o)
	}
	if fstypeOf(t, mnt) != "" {
		t.Fatal("a failed mount was left mounted")
	}
}

func TestVersionFlag(t *testing.T) {
	code, stdout, stderr := runMlfsd(t, "--version")
	if code != 0 || !strings.HasPrefix(stdout, "mlfsd ") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("mlfsd --version: exit %d, %q %q", code, stdout, stderr)
	}
	_, v, _ := runMlfsd(t, "version")
	if v != stdout {
		t.Errorf("--version %q and `mlfsd version` %q differ", stdout, v)
	}
}
