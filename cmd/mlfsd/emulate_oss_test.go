package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/fs/fstest"
)

// ossEnv is the environment of an mlfsd talking to an emulator (or being
// one): the key pair ossemutest's emulators accept.
func ossEnv(cmd *exec.Cmd) {
	cmd.Env = append(cmd.Env, "OSS_ACCESS_KEY_ID="+ossemutest.AccessKeyID, "OSS_ACCESS_KEY_SECRET="+ossemutest.AccessKeySecret, "OSS_ENDPOINT=")
}

// startSignedOSS starts an OSS emulator over root and puts its key pair in
// this test's environment, which the daemons and clients it starts inherit
// and sign with. It returns the emulator and its endpoint.
func startSignedOSS(t *testing.T, root string, opt ossemu.Options) (*ossemu.Server, string) {
	t.Helper()
	srv, endpoint := ossemutest.Start(t, root, opt)
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	return srv, endpoint
}

// TestEmulateOSSCommand: `mlfsd emulate oss` says where it serves, serves the
// directory (stats endpoint included), takes the injection flags, refuses
// bad ones clearly, and exits 0 on SIGINT.
func TestEmulateOSSCommand(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "d"), 0o755)
	os.WriteFile(filepath.Join(root, "bkt", "d", "f.txt"), []byte("hello"), 0o644)

	cmd := mlfsdCmd(t, "emulate", "oss", "--root", root, "--listen", "127.0.0.1:0",
		"--ttfb", "20ms", "--conn-bandwidth", "100MB/s", "--error-rate", "0", "--error-kinds", "500,reset", "--seed", "3")
	ossEnv(cmd) // the emulator's key pair
	readyFile := withReadyFile(t, cmd)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	addr := waitReady(t, readyFile, waitErr, stderr).Addr
	if !strings.Contains(stderr.String(), addr) {
		t.Errorf("the address served, %s, is not in the log:\n%s", addr, stderr)
	}

	// Unsigned: refused as by a private bucket.
	resp, err := http.Get("http://" + addr + "/bkt/d/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "AccessDenied") {
		t.Errorf("unsigned GET: %d %q", resp.StatusCode, body)
	}
	// Signed with the pair from the environment: served.
	c, err := alioss.New("http://"+addr, ossemutest.AccessKeyID, ossemutest.AccessKeySecret, alioss.ForcePathStyle(true))
	if err != nil {
		t.Fatal(err)
	}
	bkt, _ := c.Bucket("bkt")
	var hdr http.Header
	r, err := bkt.GetObject("d/f.txt", alioss.GetResponseHeader(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(r)
	r.Close()
	if string(body) != "hello" || hdr.Get("X-Oss-Hash-Crc64ecma") == "" {
		t.Errorf("GET: %q, headers %v", body, hdr)
	}
	resp, err = http.Get("http://" + addr + ossemu.StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]int64
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: %v", ossemu.StatsPath, err)
	}
	if st["GetObject"] != 1 {
		t.Errorf("stats %v, want one GetObject", st)
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-waitErr:
		if err != nil {
			t.Errorf("emulator exited with %v after SIGINT", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("emulator did not stop on SIGINT")
	}
	if out := stderr.String(); !strings.Contains(out, "stopped") {
		t.Errorf("no clean stop logged:\n%s", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"emulate", "oss"}, "--root"},
		{[]string{"emulate", "oss", "--root", root, "--error-kinds", "bogus"}, "bogus"},
		{[]string{"emulate", "oss", "--root", root, "--error-rate", "2"}, "error rate"},
		{[]string{"emulate", "oss", "--root", root, "--conn-bandwidth", "fast"}, "--conn-bandwidth"},
		{[]string{"emulate", "oss", "--root", filepath.Join(root, "missing")}, "no such file"},
	} {
		code, _, errOut := runMlfsd(t, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("mlfsd %q: exit %d, stderr %q; want an error naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

// startOSSEmu runs an emulator in this process (the FUSE daemon is a
// subprocess, so reading the mount here cannot deadlock).
func startOSSEmu(t *testing.T, opt ossemu.Options) (*ossemu.Server, string, string) {
	t.Helper()
	root := t.TempDir()
	srv, endpoint := ossemutest.Start(t, root, opt)
	return srv, root, endpoint
}

// mountOSS runs `mlfsd mount --read-only` on uri and waits for the mount;
// the returned stop unmounts with SIGTERM and checks a clean exit.
func mountOSS(t *testing.T, uri string, extra ...string) (mnt string, stop func()) {
	t.Helper()
	mnt = t.TempDir()
	// A private disk cache: the data must come from the emulator.
	args := append([]string{"mount", "--read-only", "--cache-dir", t.TempDir()}, extra...)
	cmd := mlfsdCmd(t, append(args, uri, mnt)...)
	ossEnv(cmd)
	d := startDaemon(t, cmd, mnt)
	return mnt, func() {
		if err := d.stop(t); err != nil {
			t.Errorf("mlfsd mount exited with %v; stderr:\n%s", err, d.stderr)
		}
	}
}

// TestMountOSSDiff: `mlfsd mount --read-only oss://bucket/prefix/` shows
// the same tree as the emulator's directory.
func TestMountOSSDiff(t *testing.T) {
	_, root, ep := startOSSEmu(t, ossemu.Options{})
	src := filepath.Join(root, "bkt", "data")
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 60 {
		dir := filepath.Join(src, "sub", string(rune('a'+i%6)), []string{"", "x y", "p+q", "pct%"}[i%4])
		os.MkdirAll(dir, 0o755)
		data := make([]byte, r.IntN(300_000))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		os.WriteFile(filepath.Join(dir, strings.Repeat("f", i%5+1)+".bin"), data, 0o644)
	}
	os.MkdirAll(filepath.Join(src, "empty-dir"), 0o755)
	os.WriteFile(filepath.Join(src, "empty-file"), nil, 0o644)
	os.WriteFile(filepath.Join(src, "ünï code.txt"), []byte("unicode"), 0o644)
	os.WriteFile(filepath.Join(root, "bkt", "outside-prefix"), []byte("not mounted"), 0o644)

	mnt, stop := mountOSS(t, "oss://bkt/data/", "--oss-endpoint", ep)
	out, err := exec.Command("diff", "-r", src, mnt).CombinedOutput()
	if err != nil {
		t.Errorf("diff -r emulator-dir mount: %v\n%s", err, out)
	}
	fstest.RunReadOnly(t, mnt, src)
	stop()
}

func sha256File(t *testing.T, p string) ([]byte, error) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// TestMountOSSFaulty256MiB: with 5% of requests failing with every kind of
// fault, a 256 MiB object reads back byte-identical through a mount, on
// every seed; seeds run until every kind of fault has struck at least once.
func TestMountOSSFaulty256MiB(t *testing.T) {
	data := make([]byte, 256<<20)
	rand.NewChaCha8([32]byte{4, 2}).Read(data)
	want := sha256.Sum256(data)
	seen := map[string]int64{}
	for seed := uint64(1); seed <= 8; seed++ {
		srv, root, ep := startOSSEmu(t, ossemu.Options{ErrorRate: 0.05, Seed: seed})
		src := filepath.Join(root, "bkt", "data")
		os.MkdirAll(src, 0o755)
		if err := os.WriteFile(filepath.Join(src, "shard-0000.bin"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		// The listing runs under faults too: the mount itself must come up.
		mnt, stop := mountOSS(t, "oss://bkt/data/", "--oss-endpoint", ep)
		got, err := sha256File(t, filepath.Join(mnt, "shard-0000.bin"))
		if err != nil {
			t.Fatalf("seed %d: reading through the mount: %v", seed, err)
		}
		if !bytes.Equal(got, want[:]) {
			t.Fatalf("seed %d: 256 MiB object read through the mount differs", seed)
		}
		stop()
		os.RemoveAll(root)
		all := true
		for _, k := range ossemu.AllFaultKinds() {
			seen[string(k)] += srv.Stats()["fault."+string(k)]
			all = all && seen[string(k)] > 0
		}
		if all && seed >= 3 {
			t.Logf("%d seeds, faults injected %v", seed, seen)
			return
		}
	}
	t.Errorf("8 seeds did not inject every kind of fault: %v", seen)
}

// TestMountOSSRetriesExhaustedEIO: when every request fails past the
// retries, a read through the mount fails with EIO, never with wrong bytes.
func TestMountOSSRetriesExhaustedEIO(t *testing.T) {
	srv, root, ep := startOSSEmu(t, ossemu.Options{Seed: 7})
	src := filepath.Join(root, "bkt", "data")
	os.MkdirAll(src, 0o755)
	data := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{7}).Read(data)
	os.WriteFile(filepath.Join(src, "f.bin"), data, 0o644)
	mnt, stop := mountOSS(t, "oss://bkt/data/", "--oss-endpoint", ep, "--oss-retry-attempts", "2")
	if _, err := os.Stat(filepath.Join(mnt, "f.bin")); err != nil {
		t.Fatal(err)
	}
	srv.SetFaults(1)
	f, err := os.Open(filepath.Join(mnt, "f.bin"))
	if err == nil {
		got, rerr := io.ReadAll(f)
		f.Close()
		err = rerr
		if len(got) > len(data) || !bytes.Equal(got, data[:len(got)]) {
			t.Errorf("the %d bytes read before the failure are wrong", len(got))
		}
	}
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("read with every request failing: %v, want EIO", err)
	}
	srv.SetFaults(0)
	stop()
}

// TestRunOSSChannels: `mlfsd run` takes oss:// input channels (a directory
// and a single object) and writes its outputs to an oss:// output path.
func TestRunOSSChannels(t *testing.T) {
	_, root, ep := startOSSEmu(t, ossemu.Options{})
	data := filepath.Join(root, "bkt", "data")
	os.MkdirAll(filepath.Join(data, "val"), 0o755)
	os.WriteFile(filepath.Join(data, "train.csv"), []byte("x,y\n1,2\n"), 0o644)
	os.WriteFile(filepath.Join(data, "val", "v1.csv"), []byte("v1\n"), 0o644)
	os.WriteFile(filepath.Join(data, "val", "v2.csv"), []byte("v2\n"), 0o644)
	tmp := t.TempDir()
	cleanupMounts(t, tmp)
	spec := filepath.Join(tmp, "job.yaml")
	os.WriteFile(spec, []byte(`name: oss-job
command: cat ../input/data/train/train.csv ../input/data/val/v1.csv ../input/data/val/v2.csv && echo trained > ../output/model/model.txt
inputs:
  train: oss://bkt/data/train.csv
  val: oss://bkt/data/val/
`), 0o644)
	// The job ends right after its last close: close(2) sends FUSE FLUSH
	// synchronously, which journals the file, so the drain must upload it.
	cmd := mlfsdCmd(t, runArgs(t, "--oss-endpoint", ep, "--spec", spec, "--root", filepath.Join(tmp, "ml"), "--output-path", "oss://bkt/out/")...)
	ossEnv(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mlfsd run: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	if want := "x,y\n1,2\nv1\nv2\n"; !strings.Contains(stdout.String(), want) {
		t.Errorf("the job read %q, want %q", stdout.String(), want)
	}
	got, err := os.ReadFile(filepath.Join(root, "bkt", "out", "model", "model.txt"))
	if err != nil || string(got) != "trained\n" {
		t.Errorf("output in OSS: %q, %v\nstderr:\n%s", got, err, &stderr)
	}
}
