package node

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/job"
)

// asUser runs name as uid:gid in a subprocess (the tests run as root; a
// FUSE server must not serve its own process) and returns its combined
// output.
func asUser(t *testing.T, uid, gid uint32, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// reachableDir is a new empty directory every user may reach: t.TempDir
// makes 0700 directories, which would refuse other users before the mount.
func reachableDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func lstat(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestInputOwnerAndModeOptions: an OSS input mounted with uid=1000,
// gid=1000, file-mode=0440, dir-mode=0550 (as an fstab line or a CSI
// volume's attributes give them) shows them, and the kernel enforces them:
// uid 1000 and a member of group 1000 read, uid 65534 is refused a file
// and a directory. Before, the options did not exist (an unknown mount
// option) and every input was root's, 0444/0555, readable by all.
func TestInputOwnerAndModeOptions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (FUSE, and subprocesses as other users)")
	}
	t.Setenv("OSS_ACCESS_KEY_ID", "")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "")
	_, endpoint, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{})
	mustNil(t, os.MkdirAll(filepath.Join(root, "bkt", "in", "sub"), 0o755))
	mustNil(t, os.WriteFile(filepath.Join(root, "bkt", "in", "shard"), []byte("shard data"), 0o644))
	mustNil(t, os.WriteFile(filepath.Join(root, "bkt", "in", "sub", "f"), []byte("sub data"), 0o644))
	n := newTestNodeWith(t, "", func(s *Settings) { s.Backend.OSS.Endpoint = endpoint })
	creds := Credentials{OSSAccessKeyID: ossemutest.AccessKeyID, OSSAccessKeySecret: ossemutest.AccessKeySecret}
	mnt := reachableDir(t)
	opts := map[string]string{"uid": "1000", "gid": "1000", "file-mode": "0440", "dir-mode": "0550"}
	if _, err := n.Mount(t.Context(), MountRequest{URI: "oss://bkt/in/", Target: mnt, ReadOnly: true, Options: opts, Credentials: creds}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"": syscall.S_IFDIR | 0o550, "shard": syscall.S_IFREG | 0o440, "sub": syscall.S_IFDIR | 0o550, "sub/f": syscall.S_IFREG | 0o440} {
		if st := lstat(t, filepath.Join(mnt, name)); st.Mode != want || st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%q: mode %o owner %d:%d, want %o 1000:1000", name, st.Mode, st.Uid, st.Gid, want)
		}
	}
	for _, who := range []struct{ uid, gid uint32 }{{1000, 1000}, {1001, 1000}} {
		if out, err := asUser(t, who.uid, who.gid, "cat", filepath.Join(mnt, "sub", "f")); err != nil || out != "sub data" {
			t.Errorf("uid %d gid %d reading sub/f: %v, %q", who.uid, who.gid, err, out)
		}
	}
	for _, args := range [][]string{{"cat", filepath.Join(mnt, "shard")}, {"ls", filepath.Join(mnt, "sub")}, {"ls", mnt}} {
		if out, err := asUser(t, 65534, 65534, args[0], args[1:]...); err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("%v as 65534: %v, %q; want Permission denied", args, err, out)
		}
	}
	// Bad values fail the request, naming the option, before any mount.
	for k, v := range map[string]string{"uid": "alice", "file-mode": "0999", "dir-mode": "rwx", "umask": "8"} {
		_, err := n.Mount(t.Context(), MountRequest{URI: "oss://bkt/in/", Target: reachableDir(t), ReadOnly: true, Options: map[string]string{k: v}, Credentials: creds})
		if err == nil || !strings.Contains(err.Error(), "--"+k) {
			t.Errorf("%s=%s: %v; want an error naming --%s", k, v, err, k)
		}
	}
}

// TestNASOwnersKeptUnlessOverridden: a NAS input keeps the owners and
// modes of the NAS (#29); umask masks them, uid and gid replace them. A
// NAS output shows what the NAS held with file-mode and uid, while what a
// user creates through the mount is the creator's.
func TestNASOwnersKeptUnlessOverridden(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (FUSE, chown)")
	}
	src := t.TempDir()
	mustNil(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o664))
	mustNil(t, os.Chmod(filepath.Join(src, "f"), 0o664))
	mustNil(t, os.Chown(filepath.Join(src, "f"), 1234, 5678))
	mustNil(t, os.Mkdir(filepath.Join(src, "d"), 0o775))
	mustNil(t, os.Chmod(filepath.Join(src, "d"), 0o775))
	n := newTestNode(t, "")
	mount := func(ro bool, opts map[string]string) string {
		t.Helper()
		mnt := t.TempDir()
		if _, err := n.Mount(t.Context(), MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: ro, Options: opts}); err != nil {
			t.Fatal(err)
		}
		return mnt
	}
	check := func(what, p string, mode, uid, gid uint32) {
		t.Helper()
		if st := lstat(t, p); st.Mode != mode || st.Uid != uid || st.Gid != gid {
			t.Errorf("%s: mode %o owner %d:%d, want %o %d:%d", what, st.Mode, st.Uid, st.Gid, mode, uid, gid)
		}
	}
	plain := mount(true, nil)
	check("plain input f", filepath.Join(plain, "f"), syscall.S_IFREG|0o664, 1234, 5678)
	check("plain input d", filepath.Join(plain, "d"), syscall.S_IFDIR|0o775, 0, 0)
	masked := mount(true, map[string]string{"umask": "027", "gid": "42"})
	check("umask=027,gid=42 input f", filepath.Join(masked, "f"), syscall.S_IFREG|0o640, 1234, 42)
	check("umask=027,gid=42 input d", filepath.Join(masked, "d"), syscall.S_IFDIR|0o750, 0, 42)

	out := mount(false, map[string]string{"uid": "1000", "file-mode": "0600"})
	check("output f (held)", filepath.Join(out, "f"), syscall.S_IFREG|0o600, 1000, 0) // gid: the daemon's, as output-owner
	mustNil(t, exec.Command("sh", "-c", "umask 022; echo new > "+filepath.Join(out, "new")).Run())
	check("output new (created)", filepath.Join(out, "new"), syscall.S_IFREG|0o644, 0, 0)
}

// TestAllowOtherFalse: allow-other=false leaves a mount to root: another
// user is refused the mountpoint itself, which it may reach by default.
func TestAllowOtherFalse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (FUSE, and a subprocess as another user)")
	}
	src := t.TempDir()
	mustNil(t, os.WriteFile(filepath.Join(src, "f"), []byte("data"), 0o644))
	mustNil(t, os.Chmod(src, 0o755))
	n := newTestNode(t, "")
	for _, allow := range []string{"true", "false"} {
		mnt := reachableDir(t)
		if _, err := n.Mount(t.Context(), MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true, Options: map[string]string{"allow-other": allow}}); err != nil {
			t.Fatal(err)
		}
		out, err := asUser(t, 65534, 65534, "cat", filepath.Join(mnt, "f"))
		switch {
		case allow == "true" && (err != nil || out != "data"):
			t.Errorf("allow-other=true: 65534 reading: %v, %q", err, out)
		case allow == "false" && (err == nil || !strings.Contains(out, "Permission denied")):
			t.Errorf("allow-other=false: 65534 reading: %v, %q; want Permission denied", err, out)
		}
		if got := readFile(t, filepath.Join(mnt, "f")); string(got) != "data" {
			t.Errorf("allow-other=%s: root read %q", allow, got)
		}
	}
}

// TestMissingInputFails: an input whose prefix, directory or object is
// missing (or holds nothing) fails the mount naming its URI, on OSS (one
// LIST, no GET), NAS and HDFS, and nothing stays mounted; allow-empty
// mounts it, empty. Before, a missing OSS prefix mounted empty and a job
// ran on no data.
func TestMissingInputFails(t *testing.T) {
	t.Setenv("OSS_ACCESS_KEY_ID", "")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "")
	emu, endpoint, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{})
	mustNil(t, os.MkdirAll(filepath.Join(root, "bkt", "in"), 0o755))
	mustNil(t, os.WriteFile(filepath.Join(root, "bkt", "in", "shard"), []byte("x"), 0o644))
	nasDir := t.TempDir()
	mustNil(t, os.Mkdir(filepath.Join(nasDir, "empty"), 0o755))
	hroot := t.TempDir()
	mustNil(t, os.MkdirAll(filepath.Join(hroot, "empty"), 0o755))
	hs, err := hdfsemu.New(hdfsemu.Options{Root: hroot})
	mustNil(t, err)
	defer hs.Close()

	n := newTestNodeWith(t, "", func(s *Settings) { s.Backend.OSS.Endpoint = endpoint })
	creds := Credentials{OSSAccessKeyID: ossemutest.AccessKeyID, OSSAccessKeySecret: ossemutest.AccessKeySecret}
	hdfs := "hdfs://" + hs.Addr()
	for _, tc := range []struct {
		uri       string
		emptyOK   bool // allow-empty mounts it (a single missing object cannot be)
		countList bool
	}{
		{"oss://bkt/missing/", true, true},
		{"oss://bkt/in/nope", false, false},
		{"nas://" + nasDir + "/empty/", true, false},
		{"nas://" + nasDir + "/missing/", false, false},
		{hdfs + "/empty/", true, false},
		{hdfs + "/missing/", false, false},
	} {
		mnt := t.TempDir()
		before := emu.Stats()
		_, err = n.Mount(t.Context(), MountRequest{URI: tc.uri, Target: mnt, ReadOnly: true, Credentials: creds})
		if err == nil || !strings.Contains(err.Error(), tc.uri) {
			t.Errorf("%s: %v; want an error naming it", tc.uri, err)
		}
		if tc.emptyOK && (err == nil || !strings.Contains(err.Error(), "allow-empty")) {
			t.Errorf("%s: %v; want the error to name --allow-empty", tc.uri, err)
		}
		lists := func(st map[string]int64) int64 { return st["ListObjects"] + st["ListObjectsV2"] }
		failedLists := lists(emu.Stats()) - lists(before)
		failedGets := emu.Stats()["GetObject"] - before["GetObject"]
		if len(n.List()) != 0 {
			t.Fatalf("%s: a failed mount left %+v", tc.uri, n.List())
		}
		assertNoMountsUnder(t, mnt)
		if !tc.emptyOK {
			continue
		}
		if _, err := n.Mount(t.Context(), MountRequest{URI: tc.uri, Target: mnt, ReadOnly: true, Credentials: creds, Options: map[string]string{"allow-empty": "true"}}); err != nil {
			t.Errorf("%s with allow-empty: %v", tc.uri, err)
			continue
		}
		if tc.countList {
			// The check is one LIST of one key, beyond what opening the
			// backend costs (the OSS backend's connect probe), and no GET.
			emptyLists := lists(emu.Stats()) - lists(before) - failedLists
			if failedLists != emptyLists+1 || failedGets != 0 {
				t.Errorf("%s: %d LISTs and %d GETs to find it missing, %d LISTs to mount it with allow-empty; want one LIST more", tc.uri, failedLists, failedGets, emptyLists)
			}
		}
		if out, err := exec.Command("ls", "-A", mnt).Output(); err != nil || len(bytes.TrimSpace(out)) != 0 {
			t.Errorf("%s with allow-empty: ls %q, %v; want an empty directory", tc.uri, out, err)
		}
		mustNil(t, n.Unmount(t.Context(), mnt))
	}
}

// TestRunStopsOnAMissingInput: `mlfsd run` (job.Runner over the node's
// mounter) with an input that holds nothing fails before the command
// starts, naming the channel and the URI, and leaves nothing mounted.
// Before, the empty channel mounted and the command ran on no data.
func TestRunStopsOnAMissingInput(t *testing.T) {
	data := t.TempDir()
	mustNil(t, os.WriteFile(filepath.Join(data, "shard"), []byte("x"), 0o644))
	missing := t.TempDir() // empty: on OSS, a prefix nothing was uploaded to
	n := newTestNode(t, "")
	ran := filepath.Join(t.TempDir(), "ran")
	spec := "name: j\ncommand: [touch, " + ran + "]\ninputs:\n  train: nas://" + data + "/\n  eval: nas://" + missing + "/\n"
	plan, err := job.Parse([]byte(spec), job.Options{Root: t.TempDir()})
	mustNil(t, err)
	r := &job.Runner{Plan: plan, Mounter: n.JobMounter(nil, Credentials{}), Stdout: io.Discard, Stderr: io.Discard,
		Log: slog.New(slog.DiscardHandler)}
	_, err = r.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), `"eval"`) || !strings.Contains(err.Error(), missing) {
		t.Errorf("run: %v; want an error naming channel \"eval\" and %s", err, missing)
	}
	if _, serr := os.Stat(ran); serr == nil {
		t.Error("the command ran although an input was missing")
	}
	if len(n.List()) != 0 {
		t.Errorf("mounts left: %+v", n.List())
	}
}
