package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

func startOutputMount(t *testing.T, back, staging string, extra ...string) *daemon {
	t.Helper()
	return startOutputMountURI(t, "nas://"+back+"/", staging, extra...)
}

func startOutputMountURI(t *testing.T, uri, staging string, extra ...string) *daemon {
	t.Helper()
	mnt := t.TempDir()
	args := append([]string{"mount", "--staging-dir", staging}, extra...)
	args = append(args, uri, mnt)
	return startDaemon(t, mlfsdCmd(t, args...), mnt)
}

func randData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// store is the backend of an output channel, as the test sees it.
type store struct {
	uri   string
	extra []string                         // flags for mlfsd mount
	get   func(name string) ([]byte, bool) // content, or false if absent
	size  func(name string) (int64, bool)  // cheap existence check
}

func nasStore(t *testing.T) store {
	back := t.TempDir()
	return store{
		uri: "nas://" + back + "/",
		get: func(name string) ([]byte, bool) {
			b, err := os.ReadFile(filepath.Join(back, name))
			return b, err == nil
		},
		size: func(name string) (int64, bool) {
			st, err := os.Stat(filepath.Join(back, name))
			if err != nil {
				return 0, false
			}
			return st.Size(), true
		},
	}
}

// ossStore runs `mlfsd emulate oss` in a subprocess and reads it back
// through the OSS backend.
func ossStore(t *testing.T) store {
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "bkt"), 0o755)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t.Setenv("OSS_ACCESS_KEY_ID", "test-id")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "test-secret")
	t.Setenv("OSS_SESSION_TOKEN", "")
	t.Setenv("OSS_ENDPOINT", "")
	emu := mlfsdCmd(t, "emulate", "oss", "--root", root, "--listen", addr)
	emuReady := withReadyFile(t, emu)
	emuErr := &syncBuffer{}
	emu.Stderr = emuErr
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	emuDone := make(chan error, 1)
	go func() { emuDone <- emu.Wait() }()
	t.Cleanup(func() { emu.Process.Kill(); <-emuDone })
	if got := waitReady(t, emuReady, emuDone, emuErr).Addr; got != addr {
		t.Fatalf("emulator serves %s, want %s", got, addr)
	}
	u, _ := backends.ParseURI("oss://bkt/out/")
	b, err := oss.New(context.Background(), u, oss.Options{Endpoint: "http://" + addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return store{
		uri:   "oss://bkt/out/",
		extra: []string{"--oss-endpoint", "http://" + addr},
		get: func(name string) ([]byte, bool) {
			r, err := b.Read(context.Background(), name, backends.ReadOptions{Length: -1})
			if err != nil {
				return nil, false
			}
			defer r.Close()
			data, err := io.ReadAll(r)
			return data, err == nil
		},
		size: func(name string) (int64, bool) {
			info, err := b.Stat(context.Background(), name)
			return info.Size, err == nil
		},
	}
}

// TestOutputSurvivesSIGKILL writes and closes files on an output mount
// whose uploads are slow, kills the daemon with SIGKILL mid-upload,
// restarts it on the same staging dir, and checks that every closed file
// lands byte-identical, that the file whose close never returned does not,
// and that no partial file ever appeared under a final name. It runs on a
// NAS directory and on the OSS emulator (multipart uploads).
func TestOutputSurvivesSIGKILL(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(*testing.T) store
	}{{"nas", nasStore}, {"oss", ossStore}} {
		t.Run(tc.name, func(t *testing.T) { survivesSIGKILL(t, tc.open(t)) })
	}
}

func survivesSIGKILL(t *testing.T, back store) {
	staging := t.TempDir()
	slow := append([]string{"--upload-bwlimit", "4MiB", "--upload-stream-threshold", "1MiB"}, back.extra...)
	d := startOutputMountURI(t, back.uri, staging, slow...)

	want := map[string][]byte{}
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("ckpt/step-%02d.pt", i)
		want[name] = randData(uint64(i), (1+i%3)<<20+i*1111)
	}
	want["ckpt/large.pt"] = randData(99, 24<<20) // streams before close
	want["empty"] = nil

	// A watcher checks that whatever appears in the backend is complete.
	var stopWatch atomic.Bool
	var watchErr atomic.Value
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for !stopWatch.Load() {
			for name, data := range want {
				if size, ok := back.size(name); ok && size != int64(len(data)) {
					watchErr.Store(fmt.Sprintf("%s visible with %d of %d bytes", name, size, len(data)))
				}
			}
			time.Sleep(5 * time.Millisecond) // the watcher's pace: it looks, it does not wait for anything
		}
	}()

	for name, data := range want {
		p := filepath.Join(d.mnt, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil { // returns after close
			t.Fatal(err)
		}
	}
	// A file being written when the daemon dies: its close never returns.
	half, err := os.Create(filepath.Join(d.mnt, "ckpt", "half.pt"))
	if err != nil {
		t.Fatal(err)
	}
	half.Write(randData(7, 2<<20))

	// Killed mid-upload: once the first closed file has landed (the rest
	// queue behind the bandwidth limit).
	testwait.Eventually(t, func() bool {
		for name := range want {
			if _, ok := back.size(name); ok {
				return true
			}
		}
		return false
	}, "a first closed file to land in the backend")
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	half.Close()
	syscall.Unmount(d.mnt, syscall.MNT_DETACH)

	landed := 0
	for name := range want {
		if _, ok := back.size(name); ok {
			landed++
		}
	}
	if landed == len(want) {
		t.Fatalf("every file was uploaded before the kill; the test proves nothing (slow the uploads)")
	}
	t.Logf("%d of %d closed files were in the backend when the daemon was killed", landed, len(want))

	// Restart on the same staging dir, at full speed.
	d2 := startOutputMountURI(t, back.uri, staging, back.extra...)
	for name, data := range want { // the mount shows staged files at once
		got, err := os.ReadFile(filepath.Join(d2.mnt, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s through the restarted mount: %d bytes, err %v", name, len(got), err)
		}
	}
	if err := d2.stop(t); err != nil {
		t.Fatalf("mlfsd mount exited with %v; stderr:\n%s", err, d2.stderr)
	}
	stopWatch.Store(true)
	<-watched
	if e := watchErr.Load(); e != nil {
		t.Errorf("partial file published: %s", e)
	}
	for name, data := range want {
		got, ok := back.get(name)
		if !ok || !bytes.Equal(got, data) {
			t.Errorf("%s in the backend: %d bytes (present %v); want %d bytes", name, len(got), ok, len(data))
		}
	}
	if _, ok := back.size("ckpt/half.pt"); ok {
		t.Errorf("half.pt, whose close never returned, was published")
	}
	if !strings.Contains(d2.stderr.String(), "files") {
		t.Errorf("no drain progress in stderr:\n%s", d2.stderr)
	}
}

// TestOutputDrainShowsProgressAndFailsLoudly checks that SIGTERM drains
// with progress lines, and that a file the backend refuses makes mlfsd
// exit non-zero, naming it.
func TestOutputDrainShowsProgressAndFailsLoudly(t *testing.T) {
	back, staging := t.TempDir(), t.TempDir()
	d := startOutputMount(t, back, staging, "--upload-bwlimit", "8MiB", "--upload-retries", "2")
	if err := os.Mkdir(filepath.Join(d.mnt, "blocked"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Behind the mount's back, the backend's directory becomes a file:
	// uploads under it cannot succeed.
	os.Remove(filepath.Join(back, "blocked"))
	os.WriteFile(filepath.Join(back, "blocked"), []byte("in the way"), 0o644)
	for i := 0; i < 4; i++ {
		os.WriteFile(filepath.Join(d.mnt, fmt.Sprintf("ok-%d", i)), randData(uint64(i), 6<<20), 0o644)
	}
	os.WriteFile(filepath.Join(d.mnt, "blocked", "model.pt"), []byte("weights"), 0o644)
	err := d.stop(t)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() == 0 {
		t.Fatalf("mlfsd mount exited with %v, want a non-zero status; stderr:\n%s", err, d.stderr)
	}
	stderr := d.stderr.String()
	if !strings.Contains(stderr, "blocked/model.pt") {
		t.Errorf("stderr does not name the failed file:\n%s", stderr)
	}
	// Files uploaded before the signal are not part of the drain.
	if !regexp.MustCompile(`uploading nas://\S+: (\d)/(\d) files, [0-9.]+ MiB/[0-9.]+ MiB, [0-9.]+ MiB/s, 1 failed`).MatchString(stderr) {
		t.Errorf("stderr shows no drain progress (files, bytes, rate):\n%s", stderr)
	}
	for i := 0; i < 4; i++ {
		got, _ := os.ReadFile(filepath.Join(back, fmt.Sprintf("ok-%d", i)))
		if !bytes.Equal(got, randData(uint64(i), 6<<20)) {
			t.Errorf("ok-%d not uploaded intact", i)
		}
	}
}

// TestOutputExternalUnmountDrains: when someone else unmounts an output
// mount (umount), mlfsd still uploads what was closed before it exits.
func TestOutputExternalUnmountDrains(t *testing.T) {
	back, staging := t.TempDir(), t.TempDir()
	d := startOutputMount(t, back, staging, "--upload-bwlimit", "8MiB")
	data := randData(5, 12<<20)
	if err := os.WriteFile(filepath.Join(d.mnt, "late.pt"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(d.mnt, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("mlfsd exited with %v; stderr:\n%s", err, d.stderr)
		}
	case <-time.After(time.Minute):
		t.Fatalf("mlfsd did not exit after an external unmount; stderr:\n%s", d.stderr)
	}
	got, err := os.ReadFile(filepath.Join(back, "late.pt"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("late.pt in the backend: %d bytes, err %v; want %d", len(got), err, len(data))
	}
}
