package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/internal/ready"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestMain lets the test binary act as mlfsd itself when MLFSD_TEST_MAIN is
// set, so CLI tests run the real command in a subprocess (a FUSE daemon must
// not serve reads to its own process) without a separate build step.
func TestMain(m *testing.M) {
	if os.Getenv("MLFSD_TEST_MAIN") == "1" {
		if err := nonDumpable(); err != nil { // as main does
			fmt.Fprintln(os.Stderr, "mlfsd:", err)
			os.Exit(1)
		}
		os.Exit(execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if mnt := os.Getenv("MLFSD_TEST_FOREIGN_FUSE"); mnt != "" {
		os.Exit(serveForeignFUSE(mnt))
	}
	// mlfsd subprocesses keep their default disk cache in a dir of this
	// run (XDG_CACHE_HOME, see mlfsdCmd), not in the user's ~/.cache, where
	// it grew from run to run and was shared with any other run at once.
	cacheHome, err := os.MkdirTemp("", "mlfsd-test-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(testCacheHomeEnv, cacheHome)
	code := m.Run()
	os.RemoveAll(cacheHome)
	os.Exit(code)
}

// testCacheHomeEnv names the variable that passes the run's cache home
// from TestMain to mlfsdCmd.
const testCacheHomeEnv = "MLFSD_TEST_CACHE_HOME"

// mlfsdCmd returns a command running mlfsd with args in a subprocess.
func mlfsdCmd(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "MLFSD_TEST_MAIN=1")
	if d := os.Getenv(testCacheHomeEnv); d != "" {
		cmd.Env = append(cmd.Env, "XDG_CACHE_HOME="+d)
	}
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
func isMounted(t testing.TB, mnt string) bool {
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
func waitMounted(t *testing.T, mnt string, cmd *exec.Cmd, stderr fmt.Stringer) {
	t.Helper()
	if err := testwait.Until(testwait.Guard, func() bool { return cmd.ProcessState != nil || isMounted(t, mnt) }); err != nil || !isMounted(t, mnt) {
		t.Fatalf("%s was not mounted; mlfsd stderr:\n%s", mnt, stderr)
	}
}

// withReadyFile adds --ready-file to cmd, a serving mlfsd subcommand not
// started yet, and returns the file's path (in a fresh temp dir).
func withReadyFile(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ready.json")
	cmd.Args = append(cmd.Args, "--ready-file", path)
	return path
}

// waitReady waits until the mlfsd that writes the ready file at path says
// it serves, and returns what it wrote. done delivers the process's exit
// (cmd.Wait's error): an exit first fails the test with out (its stderr),
// and the exit is put back for the test's later look.
func waitReady(t testing.TB, path string, done chan error, out fmt.Stringer) ready.Info {
	t.Helper()
	var info ready.Info
	var exit error
	exited := false
	err := testwait.Until(testwait.Guard, func() bool {
		var err error
		if info, err = ready.Read(path); err == nil {
			return true
		}
		select {
		case exit = <-done:
			exited = true
			return true
		default:
			return false
		}
	})
	if exited {
		done <- exit
		t.Fatalf("mlfsd exited (%v) before it was ready; stderr:\n%s", exit, out)
	}
	if err != nil {
		t.Fatalf("mlfsd not ready after %v; stderr:\n%s", testwait.Guard, out)
	}
	return info
}

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is an `mlfsd mount` running in a subprocess.
type daemon struct {
	cmd    *exec.Cmd
	mnt    string
	stderr *syncBuffer
	done   chan error
	ready  ready.Info // what its ready file says

	stopped bool  // stop was called (test goroutine only)
	exitErr error // what stop returned
}

// startDaemon starts cmd, an mlfsd mount whose mountpoint is mnt, and waits
// until it says it serves mnt (its --ready-file). When the test ends the
// process is killed and the mount detached, whatever happened.
func startDaemon(t *testing.T, cmd *exec.Cmd, mnt string) *daemon {
	t.Helper()
	d := &daemon{cmd: cmd, mnt: mnt, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = d.stderr
	readyFile := withReadyFile(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if isMounted(t, mnt) {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	d.ready = waitReady(t, readyFile, d.done, d.stderr)
	if !isMounted(t, mnt) {
		t.Fatalf("mlfsd mount said it serves %s, which is not mounted; stderr:\n%s", d.ready.Mountpoint, d.stderr)
	}
	return d
}

// stop sends SIGTERM and returns the exit error once mlfsd has drained and
// exited, checking that nothing stays mounted. It may be called again.
func (d *daemon) stop(t *testing.T) error {
	t.Helper()
	if d.stopped {
		return d.exitErr
	}
	d.stopped = true
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		if isMounted(t, d.mnt) {
			t.Errorf("%s still mounted after mlfsd exited", d.mnt)
		}
		d.exitErr = err
		return err
	case <-time.After(2 * time.Minute):
		d.cmd.Process.Kill()
		t.Fatalf("mlfsd mount did not exit after SIGTERM; stderr:\n%s", d.stderr)
		return nil
	}
}
