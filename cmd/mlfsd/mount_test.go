package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/fs/fstest"
)

func TestMountReadOnlyDiff(t *testing.T) {
	src := t.TempDir()
	for i := 0; i < 40; i++ {
		dir := filepath.Join(src, "sub", string(rune('a'+i%5)))
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, strings.Repeat("x", i%7+1)+".txt"), bytes.Repeat([]byte{byte(i)}, i*1000), 0o644)
	}
	mnt := t.TempDir()
	d := startDaemon(t, mlfsdCmd(t, "mount", "--read-only", "nas://"+src+"/", mnt), mnt)

	out, err := exec.Command("diff", "-r", src, mnt).CombinedOutput()
	if err != nil {
		t.Errorf("diff -r source mount: %v\n%s", err, out)
	}
	fstest.RunReadOnly(t, mnt, src)

	if err := d.stop(t); err != nil {
		t.Fatalf("mlfsd mount exited with %v after SIGTERM; stderr:\n%s", err, d.stderr)
	}
}

func TestMountSingleObject(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "labels.csv"), []byte("id,label\n1,cat\n"), 0o644)
	mnt := t.TempDir()
	d := startDaemon(t, mlfsdCmd(t, "mount", "--read-only", "file://"+src+"/labels.csv", mnt), mnt)
	defer d.stop(t)
	got, err := os.ReadFile(filepath.Join(mnt, "labels.csv"))
	if err != nil || string(got) != "id,label\n1,cat\n" {
		t.Fatalf("read = %q, %v", got, err)
	}
}

func TestMountRefusesBadInput(t *testing.T) {
	src := t.TempDir()
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "keep-me"), []byte("x"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"mount", "--read-only", "nas://" + src + "/", filepath.Join(src, "missing")}, "does not exist"},
		{[]string{"mount", "--read-only", "nas://" + src + "/", full}, "not empty"},
		{[]string{"mount", "--read-only", "gs://bucket/x/", t.TempDir()}, "unknown scheme"},
		{[]string{"mount", "--read-only", "nas://" + src + "/nope/", t.TempDir()}, "does not exist"},
		{[]string{"mount", "--read-only", "nas://" + src + "/"}, "accepts 2 arg"},
		// Nobody would ever find a ready file nobody can write: refused up front.
		{[]string{"mount", "--read-only", "--ready-file", filepath.Join(src, "missing", "ready.json"), "nas://" + src + "/", t.TempDir()}, "--ready-file"},
		{[]string{"mount", "--read-only", "--daemon", filepath.Join(src, "api.sock"), "--ready-file", filepath.Join(src, "ready.json"), "nas://" + src + "/", t.TempDir()}, "--ready-file"},
		{[]string{"daemon", "--state-dir", t.TempDir(), "--socket", filepath.Join(t.TempDir(), "api.sock"), "--ready-file", filepath.Join(src, "missing", "ready.json")}, "--ready-file"},
		{[]string{"emulate", "oss", "--root", src, "--listen", "127.0.0.1:0", "--ready-file", filepath.Join(src, "missing", "ready.json")}, "--ready-file"},
	}
	for _, c := range cases {
		code, _, stderr := runMlfsd(t, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("mlfsd %v: exit %d, stderr %q; want failure mentioning %q", c.args, code, stderr, c.want)
		}
	}
	if data, err := os.ReadFile(filepath.Join(full, "keep-me")); err != nil || string(data) != "x" {
		t.Errorf("non-empty mountpoint was disturbed: %q, %v", data, err)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runMlfsd(t, "version")
	if code != 0 || !strings.HasPrefix(out, "mlfsd ") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
}

// TestMountRecoversStaleMlfsdMount: `mlfsd mount` on a mountpoint that a
// SIGKILLed mlfsd left stale detaches it and serves the mountpoint again.
func TestMountRecoversStaleMlfsdMount(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("first"), 0o644)
	mnt := t.TempDir()
	d := startDaemon(t, mlfsdCmd(t, "mount", "--read-only", "--cache-dir", t.TempDir(), "nas://"+src+"/", mnt), mnt)
	// Killed once mounting is complete (startDaemon waited for its ready
	// file; see TestRunStaleMount).
	d.cmd.Process.Kill()
	<-d.done
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sfs); err != syscall.ENOTCONN {
		t.Fatalf("statfs of the killed mount = %v, want ENOTCONN (a stale mount)", err)
	}
	os.WriteFile(filepath.Join(src, "g"), []byte("second"), 0o644)
	d2 := startDaemon(t, mlfsdCmd(t, "mount", "--read-only", "--cache-dir", t.TempDir(), "nas://"+src+"/", mnt), mnt)
	if !strings.Contains(d2.stderr.String(), "stale mlfsd mount") {
		t.Errorf("no note of the recovered stale mount in stderr:\n%s", d2.stderr)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "g")); err != nil || string(got) != "second" {
		t.Errorf("read g through the recovered mount: %q, %v", got, err)
	}
	if err := d2.stop(t); err != nil {
		t.Errorf("mlfsd mount: %v; stderr:\n%s", err, d2.stderr)
	}
}

// TestMountServesMetrics: a foreground mount serves /metrics with its
// mount label when given --metrics-listen.
func TestMountServesMetrics(t *testing.T) {
	src := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	os.WriteFile(filepath.Join(src, "f.bin"), data, 0o644)
	mnt := t.TempDir()
	d := startDaemon(t, mlfsdCmd(t, "mount", "--read-only", "--cache-dir", t.TempDir(), "--metrics-listen", "127.0.0.1:0", "nas://"+src+"/", mnt), mnt)
	addr := d.ready.Metrics
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("ready file's metrics address %q, want the port picked for 127.0.0.1:0", addr)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "f.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %d bytes, %v", len(got), err)
	}
	mfs := scrapeMetrics(t, addr)
	if v, ok := metricValue(t, mfs, "mlfsd_backend_read_bytes_total", map[string]string{"mount": mnt}); !ok || int(v) < len(data) {
		t.Errorf("mlfsd_backend_read_bytes_total{mount=%q} = %v (present %v); want at least %d", mnt, v, ok, len(data))
	}
	if v, ok := metricValue(t, mfs, "mlfsd_fuse_requests_total", map[string]string{"mount": mnt, "op": "lookup"}); !ok || v == 0 {
		t.Errorf("mlfsd_fuse_requests_total{op=lookup} = %v (present %v)", v, ok)
	}
	if err := d.stop(t); err != nil {
		t.Errorf("mlfsd mount: %v; stderr:\n%s", err, d.stderr)
	}
}
