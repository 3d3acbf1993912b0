package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestJobOfSameUserCannotReadEnviron: mlfsd is not dumpable, so a process
// of its own user (a job run without --run-as, here both as uid 65534)
// cannot read its /proc/<pid>/environ, where the storage keys are; the
// same reader can read the environ of an ordinary process of that user.
func TestJobOfSameUserCannotReadEnviron(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs processes as uid 65534 and needs root")
	}
	// The test binary sits in a directory only root may enter: give uid
	// 65534 a copy it can run.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // t.TempDir's are 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "mlfsd")
	copyFile(t, exe, bin, 0o755)
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	const secret = "OSS_ACCESS_KEY_SECRET=do-not-read-me"

	// start runs name as uid 65534; the channel gets its exit.
	start := func(stderr *syncBuffer, name string, args ...string) (*exec.Cmd, chan error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = "/"
		cmd.Env = []string{"MLFSD_TEST_MAIN=1", "OSS_ACCESS_KEY_ID=nondumpable-test", secret, "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = nobody
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { cmd.Process.Kill(); <-done })
		return cmd, done
	}
	readEnviron := func(pid int) (string, error) {
		cmd := exec.Command("cat", "/proc/"+strconv.Itoa(pid)+"/environ")
		cmd.SysProcAttr = nobody
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// An ordinary process of uid 65534: its environ is readable.
	plain, _ := start(&syncBuffer{}, "sleep", "600")
	waitEnviron(t, plain.Process.Pid)
	if out, err := readEnviron(plain.Process.Pid); err != nil || !strings.Contains(out, secret) {
		t.Fatalf("control: reading a plain process's environ as its own user: %q, %v", out, err)
	}

	// mlfsd as uid 65534 (the OSS emulator: a long-running command that
	// needs no root).
	root := filepath.Join(dir, "emu")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	readyDir := filepath.Join(dir, "ready")
	if err := os.Mkdir(readyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(readyDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	readyFile := filepath.Join(readyDir, "ready.json")
	var stderr syncBuffer
	daemon, done := start(&stderr, bin, "emulate", "oss", "--root", root, "--listen", "127.0.0.1:0", "--ready-file", readyFile)
	waitReady(t, readyFile, done, &stderr)
	// Serving, so well past the prctl that comes first thing.
	out, err := readEnviron(daemon.Process.Pid)
	if err == nil || strings.Contains(out, secret) {
		t.Errorf("mlfsd's environ, read by its own user: %q, %v; want permission denied", out, err)
	}
	// mlfsd still reads its own /proc/self (FUSE and passthrough do:
	// every mount test runs mlfsd like this).
}

// waitEnviron waits until the process has exec'd (its environ is no
// longer the parent's copy being replaced).
func waitEnviron(t *testing.T, pid int) {
	t.Helper()
	testwait.EventuallyNoError(t, func() error {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err == nil && !strings.Contains(string(data), "do-not-read-me") {
			err = errors.New("not exec'd yet")
		}
		return err
	}, "process %d: its environ", pid)
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
}
