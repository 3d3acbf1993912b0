package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/fs/mountinfo"
	"github.com/mlfsd/mlfsd/internal/ready"
	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// helperEnv makes the test binary run a daemon (the old one of a
// takeover) from the options JSON in it, until SIGTERM; its process must
// differ from the test's, which the handover waits to see exit.
const helperEnv = "MLFSD_DAEMON_TEST_OPTIONS"

func TestMain(m *testing.M) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		os.Exit(m.Run())
	}
	var h helperSpec
	if err := json.Unmarshal([]byte(spec), &h); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, h.options()); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// helperSpec is what a test daemon needs, as JSON for a subprocess.
type helperSpec struct {
	Root string // holds state/, api.sock, cache/, staging/
	NAS  string // the nas root requests may name (rw)
}

func (h helperSpec) options() Options {
	s := node.Defaults()
	s.Cache.Dir = filepath.Join(h.Root, "cache")
	s.Cache.MemoryBytes = 64 << 20
	s.Output.StagingDir = filepath.Join(h.Root, "staging")
	policy, err := nasroots.Parse([]string{h.NAS + ":rw"})
	if err != nil {
		panic(err)
	}
	return Options{
		Settings: s,
		StateDir: filepath.Join(h.Root, "state"),
		Socket:   filepath.Join(h.Root, "api.sock"),
		NASRoots: policy,
		Version:  "test",
		Log:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

func newSpec(t *testing.T) helperSpec {
	t.Helper()
	h := helperSpec{Root: t.TempDir(), NAS: t.TempDir()}
	// The state directory is left for the daemon to make.
	for _, d := range []string{"cache", "staging"} {
		if err := os.Mkdir(filepath.Join(h.Root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// started is a daemon started in this process; stop stops it (once) and
// returns Wait's error.
type started struct {
	*Daemon
	cancel context.CancelFunc
	waited chan error
}

func start(t *testing.T, o Options) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := Start(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &started{Daemon: d, cancel: cancel, waited: make(chan error, 1)}
	go func() { s.waited <- d.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *started) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	err, ok := <-s.waited
	if ok {
		close(s.waited)
	}
	return err
}

// catFile reads path in another process: this one serves the mount.
func catFile(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("cat", path).Output()
	if err != nil {
		t.Fatalf("cat %s: %v", path, err)
	}
	return string(out)
}

func mounted(t *testing.T, target string) bool {
	t.Helper()
	m, ok, err := mountinfo.Lookup(target)
	if err != nil {
		t.Fatal(err)
	}
	return ok && m.FSType == "fuse.mlfsd"
}

// TestDaemonServesAndDrainsOnStop: a started daemon answers its API and
// its metrics server, mounts an input and an output asked for on the API,
// and when its context ends drains the output (the file written reaches
// the store), unmounts both and removes its socket.
func TestDaemonServesAndDrainsOnStop(t *testing.T) {
	h := newSpec(t)
	src, out := filepath.Join(h.NAS, "in"), filepath.Join(h.NAS, "out")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("input data"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := h.options()
	o.MetricsListen = "127.0.0.1:0"
	d := start(t, o)

	resp, err := http.Get("http://" + d.MetricsAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
	// The daemon tells its version in mlfsd_build_info.
	resp, err = http.Get("http://" + d.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^mlfsd_build_info\{.*version="test".*\} 1$`).Match(body) {
		t.Errorf("no mlfsd_build_info with version=\"test\" in /metrics")
	}

	c := api.NewClient(o.Socket)
	inMnt, outMnt := t.TempDir(), t.TempDir()
	if _, err := c.Mount(t.Context(), node.MountRequest{URI: "nas://" + src + "/", Target: inMnt, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mount(t.Context(), node.MountRequest{URI: "nas://" + out + "/", Target: outMnt}); err != nil {
		t.Fatal(err)
	}
	if got := catFile(t, filepath.Join(inMnt, "a")); got != "input data" {
		t.Fatalf("read %q through the input mount", got)
	}
	if err := exec.Command("sh", "-c", "printf 'output data' > "+filepath.Join(outMnt, "b")).Run(); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 {
		t.Fatalf("status lists %d mounts, want 2: %+v", len(st), st)
	}

	if err := d.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(out, "b"))
	if err != nil || string(data) != "output data" {
		t.Fatalf("after the stop the output's file holds %q (%v): the drain did not upload it", data, err)
	}
	for _, m := range []string{inMnt, outMnt} {
		if mounted(t, m) {
			t.Errorf("%s is still mounted after the stop", m)
		}
	}
	if _, err := os.Stat(o.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the API socket is left after the stop: %v", err)
	}
}

// TestReadyFile: a started daemon has written its ready file (its pid, API
// socket and the metrics address the kernel picked); one whose ready file
// could not be written is refused before it starts.
func TestReadyFile(t *testing.T) {
	h := newSpec(t)
	o := h.options()
	o.MetricsListen = "127.0.0.1:0"
	o.ReadyFile = filepath.Join(t.TempDir(), "missing", "ready.json")
	if d, err := Start(t.Context(), o); err == nil {
		d.Wait()
		t.Fatal("started with a ready file in a missing directory")
	} else if !strings.Contains(err.Error(), "--ready-file") {
		t.Errorf("refusal of the ready file does not name the flag: %v", err)
	}
	o.ReadyFile = filepath.Join(t.TempDir(), "ready.json")
	d := start(t, o)
	got, err := ready.Read(o.ReadyFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ready.Info{PID: os.Getpid(), Socket: o.Socket, Metrics: d.MetricsAddr()}); got != want {
		t.Fatalf("ready file %+v, want %+v", got, want)
	}
}

// TestSecondDaemonRefused: a daemon started beside a running one (the
// same flags; another cache directory; another socket too, on the same
// state directory) fails before it touches anything: the first serves
// on, its mount and its mount table as they were (a second daemon that
// restored the table and stopped used to empty it).
func TestSecondDaemonRefused(t *testing.T) {
	h := newSpec(t)
	if err := os.WriteFile(filepath.Join(h.NAS, "a"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := h.options()
	start(t, o)
	mnt := t.TempDir()
	if _, err := api.NewClient(o.Socket).Mount(t.Context(), node.MountRequest{URI: "nas://" + h.NAS + "/", Target: mnt, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(o.StateDir, "mounts.json")
	before, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	otherCache := o
	otherCache.Settings.Cache.Dir = t.TempDir()
	otherSocket := otherCache
	otherSocket.Socket = filepath.Join(t.TempDir(), "other.sock")
	for _, o2 := range []Options{o, otherCache, otherSocket} {
		ctx, cancel := context.WithCancel(t.Context())
		d2, err := Start(ctx, o2)
		if err == nil {
			cancel()
			d2.Wait()
			t.Fatalf("a second daemon started beside a running one (cache %s, socket %s)", o2.Settings.Cache.Dir, o2.Socket)
		}
		cancel()
		t.Logf("second daemon: %v", err)
		if _, err := api.NewClient(o.Socket).Status(t.Context()); err != nil {
			t.Fatalf("the first daemon stopped answering after the second was refused: %v", err)
		}
		if after, err := os.ReadFile(table); err != nil || string(after) != string(before) {
			t.Fatalf("the refused daemon (socket %s) rewrote the mount table: %s (%v), was %s", o2.Socket, after, err, before)
		}
		if got := catFile(t, filepath.Join(mnt, "a")); got != "first" {
			t.Fatalf("after a second daemon was refused the first serves %q", got)
		}
	}
}

// TestOptionsChecked: a daemon without a state directory or socket is
// refused with the flag to give.
func TestOptionsChecked(t *testing.T) {
	for _, o := range []Options{{Socket: "/x.sock"}, {StateDir: "/x"}} {
		if _, err := Start(t.Context(), o); err == nil {
			t.Errorf("started with %+v", o)
		}
	}
}

// TestTakeover: a daemon started with Takeover takes the mounts of the
// one running with its state directory (another process, which exits),
// and serves them: a file is read through the mount taken over, and the
// new daemon's API lists and unmounts it. A takeover the new daemon's
// settings refuse leaves the old one serving.
func TestTakeover(t *testing.T) {
	h := newSpec(t)
	if err := os.WriteFile(filepath.Join(h.NAS, "a"), []byte("taken over"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	old := exec.Command(os.Args[0], "-test.run=^$")
	old.Env = append(os.Environ(), helperEnv+"="+string(spec))
	old.Stderr = os.Stderr
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	oldDone := make(chan error, 1)
	go func() { oldDone <- old.Wait() }()
	t.Cleanup(func() {
		old.Process.Kill()
		<-oldDone
	})
	o := h.options()
	c := api.NewClient(o.Socket)
	testwait.EventuallyNoError(t, func() error { _, err := c.Status(t.Context()); return err }, "the old daemon's API")
	mnt := t.TempDir()
	if _, err := c.Mount(t.Context(), node.MountRequest{URI: "nas://" + h.NAS + "/", Target: mnt, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}

	// A new daemon whose --nas-root no longer allows the mount builds it
	// as it would a fresh one, is refused, and the old daemon serves on.
	o.Takeover = true
	narrow := o
	if narrow.NASRoots, err = nasroots.Parse([]string{t.TempDir() + ":rw"}); err != nil {
		t.Fatal(err)
	}
	if d, err := Start(t.Context(), narrow); err == nil {
		d.Wait()
		t.Fatal("a takeover of a mount the new daemon's NAS roots refuse succeeded")
	} else if !errors.Is(err, nasroots.ErrNotAllowed) {
		t.Fatalf("takeover refused with %v, not nasroots.ErrNotAllowed", err)
	}
	if got := catFile(t, filepath.Join(mnt, "a")); got != "taken over" {
		t.Fatalf("after the refused takeover the old daemon serves %q", got)
	}

	d := start(t, o)
	select {
	case err := <-oldDone:
		oldDone <- err
		if err != nil {
			t.Fatalf("the old daemon exited with %v after handing over", err)
		}
	case <-time.After(testwait.Guard):
		// Start returns once the old process has exited; the goroutine
		// that reaps it may report that a moment later.
		t.Fatal("the old daemon is still running after the takeover")
	}
	if got := catFile(t, filepath.Join(mnt, "a")); got != "taken over" {
		t.Fatalf("read %q through the mount taken over", got)
	}
	st, err := c.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Target != mnt {
		t.Fatalf("the new daemon lists %+v, want the mount at %s", st, mnt)
	}
	if err := c.Unmount(t.Context(), mnt); err != nil {
		t.Fatal(err)
	}
	if mounted(t, mnt) {
		t.Fatal("still mounted after the new daemon unmounted it")
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestErrorsMatchNodeSentinels: the API's answers match the node's
// errors with errors.Is, as a Node's own errors do.
func TestErrorsMatchNodeSentinels(t *testing.T) {
	h := newSpec(t)
	o := h.options()
	start(t, o)
	c := api.NewClient(o.Socket)
	err := c.Unmount(t.Context(), "/nowhere/mounted")
	if !errors.Is(err, node.ErrNotMounted) {
		t.Errorf("unmount of nothing: %v, not node.ErrNotMounted", err)
	}
	elsewhere := t.TempDir()
	_, err = c.Mount(t.Context(), node.MountRequest{URI: "nas://" + elsewhere + "/", Target: t.TempDir(), ReadOnly: true})
	if !errors.Is(err, nasroots.ErrNotAllowed) {
		t.Errorf("mount outside the nas roots: %v, not nasroots.ErrNotAllowed", err)
	}
	if errors.Is(err, node.ErrNotMounted) || errors.Is(err, node.ErrTargetBusy) {
		t.Errorf("mount outside the nas roots matches another sentinel: %v", err)
	}
	mnt := t.TempDir()
	if err := os.WriteFile(filepath.Join(h.NAS, "a"), []byte("x"), 0o644); err != nil {
		t.Fatal(err) // an empty input fails
	}
	if _, err := c.Mount(t.Context(), node.MountRequest{URI: "nas://" + h.NAS + "/", Target: mnt, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Mount(t.Context(), node.MountRequest{URI: "nas://" + h.NAS + "/", Target: mnt})
	if !errors.Is(err, node.ErrTargetBusy) {
		t.Errorf("mount over another mount: %v, not node.ErrTargetBusy", err)
	}
}

// TestTakeoverAutoStartsAfresh: with TakeoverAuto, a daemon that finds
// nobody on the handover socket starts afresh and serves; without it,
// the same start fails.
func TestTakeoverAutoStartsAfresh(t *testing.T) {
	h := newSpec(t)
	o := h.options()
	o.Takeover = true
	if d, err := Start(t.Context(), o); err == nil {
		d.Wait()
		t.Fatal("--takeover without a daemon to take over from started")
	}
	o.TakeoverAuto = true
	start(t, o)
	if _, err := api.NewClient(o.Socket).Status(t.Context()); err != nil {
		t.Fatalf("the daemon started afresh does not answer: %v", err)
	}
}

// TestRetiredFileServesNothing: a daemon started while its RetiredFile
// exists (its pod's daemon handed over already) serves nothing: no API
// socket, no handover socket to take the mounts back through.
func TestRetiredFileServesNothing(t *testing.T) {
	h := newSpec(t)
	o := h.options()
	o.RetiredFile = filepath.Join(h.Root, "retired")
	if err := os.WriteFile(o.RetiredFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d := start(t, o)
	for _, p := range []string{o.Socket, filepath.Join(o.StateDir, "takeover.sock")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a retired daemon made %s", p)
		}
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
}
