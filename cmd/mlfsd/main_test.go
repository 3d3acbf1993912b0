package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary act as mlfsd itself when MLFSD_TEST_MAIN is
// set, so CLI tests run the real command in a subprocess (a FUSE daemon must
// not serve reads to its own process) without a separate build step.
func TestMain(m *testing.M) {
	if os.Getenv("MLFSD_TEST_MAIN") == "1" {
		os.Exit(execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// mlfsdCmd returns a command running mlfsd with args in a subprocess.
func mlfsdCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "MLFSD_TEST_MAIN=1")
	return cmd
}

// runMlfsd runs mlfsd to completion and returns its exit code and output.
func runMlfsd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := mlfsdCmd(t, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// isMounted reports whether mnt appears in /proc/self/mountinfo.
func isMounted(t *testing.T, mnt string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == mnt {
			return true
		}
	}
	return false
}

// waitMounted waits until mnt is mounted, failing the test after a while.
func waitMounted(t *testing.T, mnt string, cmd *exec.Cmd, stderr *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !isMounted(t, mnt) {
		if cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("%s was not mounted; mlfsd stderr:\n%s", mnt, stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
