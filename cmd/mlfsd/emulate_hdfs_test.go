package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/fs/fstest"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// startHDFSEmulator runs `mlfsd emulate hdfs` in a subprocess and returns
// the NameNode URI ("hdfs://127.0.0.1:PORT/") from its ready file.
func startHDFSEmulator(t *testing.T, root string, extra ...string) string {
	t.Helper()
	args := append([]string{"emulate", "hdfs", "--root", root, "--listen", "127.0.0.1:0"}, extra...)
	cmd := mlfsdCmd(t, args...)
	readyFile := withReadyFile(t, cmd)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("mlfsd emulate hdfs exited with %v after SIGTERM; stderr:\n%s", err, stderr)
			}
		case <-time.After(testwait.Guard):
			cmd.Process.Kill()
			t.Errorf("mlfsd emulate hdfs did not exit after SIGTERM")
		}
	})
	info := waitReady(t, readyFile, done, stderr)
	if !strings.HasPrefix(info.Addr, "127.0.0.1:") || info.DataNodeAddr == "" {
		t.Fatalf("emulator's ready file: %+v; want its NameNode and DataNode addresses", info)
	}
	return "hdfs://" + info.Addr + "/"
}

func writeRandom(t *testing.T, path string, n int) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEmulateHDFSMountReadOnly serves a directory with `mlfsd emulate hdfs`
// (small blocks, so files span many) and mounts hdfs://.../data/ read-only
// with `mlfsd mount`: the mount shows the same tree as DIR/data, byte for
// byte, and refuses writes.
func TestEmulateHDFSMountReadOnly(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	writeRandom(t, filepath.Join(data, "shard-000.bin"), 3<<20+17) // 49 blocks of 64 KiB
	writeRandom(t, filepath.Join(data, "images", "a.jpg"), 1000)
	writeRandom(t, filepath.Join(data, "images", "b c.jpg"), 65536)
	writeRandom(t, filepath.Join(data, "deep", "er", "x%y+z.txt"), 10)
	os.WriteFile(filepath.Join(data, "empty"), nil, 0o644)
	os.MkdirAll(filepath.Join(data, "emptydir"), 0o755)
	writeRandom(t, filepath.Join(root, "elsewhere", "not-mounted"), 10)
	uri := startHDFSEmulator(t, root, "--block-size", "64KiB")

	mnt := t.TempDir()
	d := startDaemon(t, mlfsdCmd(t, "mount", "--cache-dir", t.TempDir(), "--read-only", uri+"data/", mnt), mnt)
	if out, err := exec.Command("diff", "-r", data, mnt).CombinedOutput(); err != nil {
		t.Errorf("diff -r DIR/data mount: %v\n%s", err, out)
	}
	fstest.RunReadOnly(t, mnt, data)
	if err := d.stop(t); err != nil {
		t.Fatalf("mlfsd mount exited with %v; stderr:\n%s", err, d.stderr)
	}
}

// TestRunOpenPAIJobOnHDFS runs an OpenPAI-style job end to end: its data
// in HDFS (the emulator, fed with the quickstart example's files), its
// outputs written back to hdfs://.../output/<job name>/, the quickstart's
// real python3 script in between. The emulator refuses 10% of block reads
// and writes and drops 5% mid-block: the backend's read retries and the
// write-back queue's re-uploads must absorb them.
func TestRunOpenPAIJobOnHDFS(t *testing.T) {
	tmp := t.TempDir()
	hdfsRoot := filepath.Join(tmp, "hdfs")
	cleanupMounts(t, tmp)
	ex, err := filepath.Abs("../../examples/quickstart")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", filepath.Join(ex, "data"), filepath.Join(hdfsRoot, "datasets", "quickstart")+"/").CombinedOutput(); err != nil {
		// cp needs the parent to exist.
		os.MkdirAll(filepath.Join(hdfsRoot, "datasets"), 0o755)
		if out, err = exec.Command("cp", "-r", filepath.Join(ex, "data"), filepath.Join(hdfsRoot, "datasets", "quickstart")).CombinedOutput(); err != nil {
			t.Fatalf("seeding the HDFS tree: %v\n%s", err, out)
		}
	}
	uri := startHDFSEmulator(t, hdfsRoot, "--block-size", "1KiB", "--error-rate", "0.1", "--drop-rate", "0.05", "--seed", "7")
	const job = "openpai-quickstart"
	spec := filepath.Join(tmp, "job.yaml")
	os.WriteFile(spec, []byte(fmt.Sprintf(`name: %s
command: python3 train.py
code: nas://%s/code/
hyperparameters:
  epochs: 5
  learning-rate: 0.05
  batch_size: 8
  optimizer: sgd with momentum
  note: it's a "quickstart"
inputs:
  train: %sdatasets/quickstart/train.csv
  validation: %sdatasets/quickstart/validation/
output_path: %soutput/%s/
`, job, ex, uri, uri, uri, job)), 0o644)
	code, stdout, stderr := runMlfsd(t, runArgs(t, "--cache-dir", t.TempDir(), "--spec", spec, "--root", filepath.Join(tmp, "ml"))...)
	if code != 0 {
		t.Fatalf("mlfsd run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "trained 5 epochs on 64 rows") {
		t.Errorf("script output %q", stdout)
	}
	if m := mountsUnder(t, tmp); len(m) > 0 {
		t.Errorf("still mounted after mlfsd run: %v", m)
	}
	out := filepath.Join(hdfsRoot, "output", job)
	var model struct {
		W, B   float64
		Epochs int
	}
	readJSON(t, filepath.Join(out, "model", "model.json"), &model)
	if model.Epochs != 5 || model.W < 2.8 || model.W > 3.2 {
		t.Errorf("model.json in HDFS = %+v", model)
	}
	for e := 1; e <= 5; e++ {
		if _, err := os.Stat(filepath.Join(out, "checkpoints", fmt.Sprintf("epoch-%03d.json", e))); err != nil {
			t.Errorf("checkpoint %d not in HDFS: %v", e, err)
		}
	}
	var seen struct {
		TrainRows       int      `json:"train_rows"`
		ValidationFiles []string `json:"validation_files"`
		ValidationRows  int      `json:"validation_rows"`
	}
	readJSON(t, filepath.Join(out, "logs", "seen.json"), &seen)
	if seen.TrainRows != 64 || seen.ValidationRows != 24 || len(seen.ValidationFiles) != 3 {
		t.Errorf("what the job read from HDFS: %+v", seen)
	}
	// Nothing of the write path's staging is left in the namespace.
	filepath.WalkDir(hdfsRoot, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), "mlfsd-staging") {
			t.Errorf("staging left behind in HDFS: %s", p)
		}
		return nil
	})
}

// TestEmulateHDFSBadFlags: bad options are refused with a message naming
// the flag, before anything listens.
func TestEmulateHDFSBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"emulate", "hdfs"}, "--root"},
		{[]string{"emulate", "hdfs", "--root", t.TempDir(), "--block-size", "1000"}, "--block-size"},
		{[]string{"emulate", "hdfs", "--root", t.TempDir(), "--drop-rate", "2"}, "drop rate"},
		{[]string{"emulate", "hdfs", "--root", filepath.Join(t.TempDir(), "missing")}, "root"},
		{[]string{"emulate", "hdfs", "--root", t.TempDir(), "--conn-bandwidth", "fast"}, "--conn-bandwidth"},
		{[]string{"emulate", "hdfs", "--root", t.TempDir(), "--keytab", "/nonexistent"}, "--principal"},
		{[]string{"emulate", "hdfs", "--root", t.TempDir(), "--keytab", "/nonexistent", "--principal", "nn@R"}, "nn/HOST@REALM"},
		{[]string{"emulate", "hdfs", "--root", t.TempDir(), "--keytab", "/nonexistent", "--principal", "nn/h@R"}, "/nonexistent"},
	} {
		code, _, stderr := runMlfsd(t, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("mlfsd %v: exit %d, stderr %q; want a failure naming %q", tc.args, code, stderr, tc.want)
		}
	}
}
