package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// fakeMounter stands in for FUSE: an input "mount" fills the mountpoint with
// the channel's files; an output "mount" is the directory itself, and Drain
// copies what was written into store. Every call is logged in order.
type fakeMounter struct {
	mu        sync.Mutex
	events    []string
	inputs    map[string]map[string]string // channel -> file -> content
	failMount string                       // channel whose mount fails
	failDrain string                       // channel whose drain fails
	onMount   func(ch string)              // called at each mount, before it succeeds
	onDrain   func(ctx context.Context) error
	store     map[string]map[string]string // output channel -> drained files
}

func (f *fakeMounter) log(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf(format, args...))
}

func (f *fakeMounter) MountInput(ctx context.Context, ch Channel, mp string) (Mounted, error) {
	if ch.Name == f.failMount {
		f.log("mount-fail input %s", ch.Name)
		return nil, errors.New("backend says no")
	}
	if f.onMount != nil {
		f.onMount(ch.Name)
	}
	for name, content := range f.inputs[ch.Name] {
		if err := os.WriteFile(filepath.Join(mp, name), []byte(content), 0o444); err != nil {
			return nil, err
		}
	}
	f.log("mount input %s", ch.Name)
	return &fakeMount{f: f, kind: "input", ch: ch, mp: mp}, nil
}

func (f *fakeMounter) MountOutput(ctx context.Context, ch Channel, mp string) (Mounted, error) {
	if ch.Name == f.failMount {
		f.log("mount-fail output %s", ch.Name)
		return nil, errors.New("backend says no")
	}
	f.log("mount output %s", ch.Name)
	return &fakeMount{f: f, kind: "output", ch: ch, mp: mp}, nil
}

type fakeMount struct {
	f        *fakeMounter
	kind, mp string
	ch       Channel
}

func (m *fakeMount) Drain(ctx context.Context) error {
	m.f.log("drain %s %s", m.kind, m.ch.Name)
	if m.ch.Name == m.f.failDrain {
		return errors.New("upload failed: 503 slow down")
	}
	if m.f.onDrain != nil {
		if err := m.f.onDrain(ctx); err != nil {
			return err
		}
	}
	files := map[string]string{}
	err := filepath.Walk(m.mp, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(m.mp, p)
		files[rel] = string(data)
		return err
	})
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	if m.f.store == nil {
		m.f.store = map[string]map[string]string{}
	}
	m.f.store[m.ch.Name] = files
	return err
}

func (m *fakeMount) Unmount() error {
	m.f.log("unmount %s %s", m.kind, m.ch.Name)
	// Like a real unmount, the mountpoint is empty again afterwards.
	entries, _ := os.ReadDir(m.mp)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(m.mp, e.Name()))
	}
	return nil
}

// memBackend is a read-only in-memory backend for the code copy.
type memBackend struct {
	files map[string]string
	modes map[string]uint32
}

func (b *memBackend) ID() string { return "mem://" }
func (b *memBackend) info(k string) backends.ObjectInfo {
	return backends.ObjectInfo{Key: k, Size: int64(len(b.files[k])), Version: "1", Mode: b.modes[k]}
}
func (b *memBackend) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	if _, ok := b.files[key]; !ok {
		return backends.ObjectInfo{}, backends.Wrap("stat", key, backends.ErrNotExist, nil)
	}
	return b.info(key), nil
}
func (b *memBackend) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	var keys []string
	for k := range b.files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// One key per page, to exercise paging.
	for _, k := range keys {
		if k > opt.Token {
			return backends.ListPage{Objects: []backends.ObjectInfo{b.info(k)}, NextToken: k}, nil
		}
	}
	return backends.ListPage{}, nil
}
func (b *memBackend) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(b.files[key][opt.Offset:])), nil
}
func (b *memBackend) Write(context.Context, string, backends.WriteOptions) (backends.Writer, error) {
	return nil, backends.ErrUnsupported
}
func (b *memBackend) Delete(context.Context, string) error { return backends.ErrUnsupported }
func (b *memBackend) Close() error                         { return nil }

// newRunner returns a runner on a temp root with a fake mounter and code backend.
func newRunner(t *testing.T, spec string) (*Runner, *fakeMounter, *bytes.Buffer) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "ml")
	p := mustParse(t, spec, Options{Root: root})
	fm := &fakeMounter{inputs: map[string]map[string]string{
		"train":  {"train.csv": "a,b\n1,2\n"},
		"images": {"0.png": "png0", "1.png": "png1"},
	}}
	code := &memBackend{
		files: map[string]string{"train.sh": "#!/bin/sh\necho trained\n", "lib/util.txt": "util", "lib/": ""},
		modes: map[string]uint32{"train.sh": 0o755},
	}
	var out bytes.Buffer
	r := &Runner{
		Plan:    p,
		Mounter: fm,
		Open: func(ctx context.Context, u backends.URI) (backends.Backend, string, error) {
			return code, u.Base(), nil
		},
		Environ:  []string{"PATH=" + os.Getenv("PATH"), "KEEP=me", "PAI_HPS=stale", "PAI_HPS_STALE=kept", "SECRET_KEY=s3cr3t"},
		Withhold: []string{"SECRET_KEY"},
		Stdout:   &out,
		Stderr:   &out,
	}
	return r, fm, &out
}

const runSpec = `name: run test
code: nas:///code/
command: ./train.sh >/dev/null; env > "$PAI_OUTPUT_MODEL/env.txt"; pwd > "$PAI_OUTPUT_MODEL/pwd.txt"; cat "$PAI_INPUT_TRAIN" > "$PAI_OUTPUT_EVAL/copy.csv"; ls "$PAI_INPUT_IMAGES" > "$PAI_OUTPUT_EVAL/ls.txt"; cat "$PAI_CONFIG_DIR/hyperparameters.json" > "$PAI_OUTPUT_MODEL/hps.json"; exit 7
hyperparameters:
  lr: 1e-5
  opt: adam w
inputs:
  train: nas:///data/train.csv
  images: nas:///data/images/
output_path: nas:///out/
outputs:
  eval: nas:///eval/
`

func TestRunOrderAndEnvironment(t *testing.T) {
	r, fm, out := newRunner(t, runSpec)
	status, err := r.Run(context.Background())
	if err != nil || status != 7 {
		t.Fatalf("Run = %d, %v; want the command's status 7. Output:\n%s", status, err, out)
	}
	wantEvents := []string{
		"mount input train", "mount input images",
		"mount output eval", "mount output model", "mount output checkpoints", "mount output logs", "mount output tensorboard",
		"drain output eval", "drain output model", "drain output checkpoints", "drain output logs", "drain output tensorboard",
		"unmount output tensorboard", "unmount output logs", "unmount output checkpoints", "unmount output model", "unmount output eval",
		"unmount input images", "unmount input train",
	}
	if strings.Join(fm.events, "\n") != strings.Join(wantEvents, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(fm.events, "\n"), strings.Join(wantEvents, "\n"))
	}
	p := r.Plan
	model, eval := fm.store["model"], fm.store["eval"]
	if strings.TrimSpace(model["pwd.txt"]) != p.WorkingDir() {
		t.Errorf("command ran in %q, want %q", model["pwd.txt"], p.WorkingDir())
	}
	if eval["copy.csv"] != "a,b\n1,2\n" || eval["ls.txt"] != "0.png\n1.png\n" {
		t.Errorf("what the command read: %q", eval)
	}
	if model["hps.json"] != `{"lr": "1e-5", "opt": "adam w"}` {
		t.Errorf("hyperparameters.json = %q", model["hps.json"])
	}
	env := map[string]string{}
	for _, line := range strings.Split(model["env.txt"], "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	vars, _ := p.Env()
	for _, v := range vars {
		if !strings.Contains(v.Value, "\n") && env[v.Name] != v.Value {
			t.Errorf("command saw %s=%q, want %q", v.Name, env[v.Name], v.Value)
		}
	}
	if strings.Contains(model["env.txt"], "s3cr3t") {
		t.Error("a withheld credential reached the command")
	}
	if env["KEEP"] != "me" || env["PAI_HPS_STALE"] != "kept" || env["PAI_HPS"] != p.HyperparametersJSON() {
		t.Errorf("inherited environment: KEEP=%q PAI_HPS_STALE=%q PAI_HPS=%q", env["KEEP"], env["PAI_HPS_STALE"], env["PAI_HPS"])
	}
	// The code was copied, with its mode; the layout stays for the next look.
	if fi, err := os.Stat(filepath.Join(p.WorkingDir(), "train.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("train.sh: %v, %v", fi, err)
	}
	if data, _ := os.ReadFile(filepath.Join(p.WorkingDir(), "lib", "util.txt")); string(data) != "util" {
		t.Errorf("lib/util.txt = %q", data)
	}
	if data, _ := os.ReadFile(p.HyperparametersFile()); string(data) != p.HyperparametersJSON() {
		t.Errorf("hyperparameters.json on disk = %q", data)
	}
}

func TestRunMountFailureUndoesEverything(t *testing.T) {
	for _, fail := range []string{"images", "checkpoints"} {
		t.Run(fail, func(t *testing.T) {
			r, fm, _ := newRunner(t, runSpec)
			fm.failMount = fail
			status, err := r.Run(context.Background())
			if err == nil || status != 0 {
				t.Fatalf("Run = %d, %v; want a start error", status, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("channel %q", fail)) || !strings.Contains(err.Error(), "backend says no") {
				t.Errorf("error %q does not name the channel and the cause", err)
			}
			mounted, unmounted := 0, 0
			for _, e := range fm.events {
				if strings.HasPrefix(e, "mount ") {
					mounted++
				}
				if strings.HasPrefix(e, "unmount ") {
					unmounted++
				}
				if strings.HasPrefix(e, "drain") {
					t.Errorf("drain after a failed start: %v", fm.events)
				}
			}
			if mounted == 0 || mounted != unmounted {
				t.Errorf("mounted %d, unmounted %d: %v", mounted, unmounted, fm.events)
			}
			if _, err := os.Stat(r.Plan.Root); !os.IsNotExist(err) {
				t.Errorf("root %s left behind: %v", r.Plan.Root, err)
			}
		})
	}
}

// TestRunKeepsExistingRoot: a failed start removes only what it created.
func TestRunKeepsExistingRoot(t *testing.T) {
	r, fm, _ := newRunner(t, runSpec)
	fm.failMount = "eval"
	keep := filepath.Join(r.Plan.Root, "input", "config", "mine.txt")
	os.MkdirAll(filepath.Dir(keep), 0o755)
	os.WriteFile(keep, []byte("x"), 0o644)
	if _, err := r.Run(context.Background()); err == nil {
		t.Fatal("want an error")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("pre-existing file removed: %v", err)
	}
	if _, err := os.Stat(r.Plan.HyperparametersFile()); !os.IsNotExist(err) {
		t.Errorf("hyperparameters.json left behind: %v", err)
	}
	if _, err := os.Stat(r.Plan.WorkingDir()); !os.IsNotExist(err) {
		t.Errorf("usercode left behind: %v", err)
	}
}

func TestRunRefusesNonEmptyMountpoint(t *testing.T) {
	r, fm, _ := newRunner(t, runSpec)
	dir := r.Plan.InputDir(r.Plan.Inputs[1])
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "precious"), []byte("x"), 0o644)
	_, err := r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `input channel "images"`) || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Errorf("file under the mountpoint removed: %v", err)
	}
	if len(fm.events) != 2 || fm.events[1] != "unmount input train" {
		t.Errorf("events %v", fm.events)
	}
}

func TestRunDrainFailure(t *testing.T) {
	r, fm, _ := newRunner(t, strings.Replace(runSpec, "exit 7", "exit 0", 1))
	fm.failDrain = "model"
	status, err := r.Run(context.Background())
	if status != ExitOutputFailed || err == nil {
		t.Fatalf("Run = %d, %v; want %d and an error", status, err, ExitOutputFailed)
	}
	if !strings.Contains(err.Error(), `output channel "model" (nas:///out/model/)`) || !strings.Contains(err.Error(), "503 slow down") {
		t.Errorf("error %q does not name the channel and the cause", err)
	}
	// Every other output was still drained, and everything unmounted.
	n := 0
	for _, e := range fm.events {
		if strings.HasPrefix(e, "unmount") {
			n++
		}
	}
	if n != 7 || fm.store["eval"] == nil {
		t.Errorf("events %v", fm.events)
	}
}

func TestRunArgvAndUserArgs(t *testing.T) {
	r, fm, _ := newRunner(t, "name: x\nhyperparameters:\n  opt: adam w\n  q: \"it's \\\"x\\\"\"\n  e: ''\noutput_path: nas:///o/\n")
	r.Command = []string{"sh", "-c", `printf '%s\n' "$@" > "$PAI_OUTPUT_MODEL/argv"`, "sh", "first", "$PAI_USER_ARGS", "last"}
	if status, err := r.Run(context.Background()); status != 0 || err != nil {
		t.Fatalf("Run = %d, %v", status, err)
	}
	want := "first\n--opt\nadam w\n--q\nit's \"x\"\n--e\n\nlast\n"
	if got := fm.store["model"]["argv"]; got != want {
		t.Errorf("argv = %q, want %q", got, want)
	}
}

func TestRunCommandNotFound(t *testing.T) {
	r, fm, _ := newRunner(t, "name: x\noutput_path: nas:///o/\n")
	r.Command = []string{"/nonexistent/train"}
	status, err := r.Run(context.Background())
	if status != ExitNotFound || err != nil {
		t.Fatalf("Run = %d, %v", status, err)
	}
	if fm.events[len(fm.events)-1] != "unmount output model" {
		t.Errorf("not unmounted: %v", fm.events)
	}
	r.Command = nil
	if _, err := r.Run(context.Background()); err == nil {
		t.Error("no command accepted")
	}
}

func TestRunForwardsSignals(t *testing.T) {
	cases := []struct {
		cmd  string
		sig  syscall.Signal
		want int
	}{
		// The command handles the signal and exits with its own status.
		{`trap 'echo got TERM > "$PAI_OUTPUT_MODEL/sig"; exit 42' TERM; touch "$PAI_OUTPUT_MODEL/ready"; while :; do sleep 0.05; done`, syscall.SIGTERM, 42},
		// The command dies of the signal: 128+N.
		{`touch "$PAI_OUTPUT_MODEL/ready"; exec sleep 30`, syscall.SIGINT, 128 + int(syscall.SIGINT)},
	}
	for _, c := range cases {
		t.Run(c.sig.String(), func(t *testing.T) {
			r, fm, _ := newRunner(t, "name: x\noutput_path: nas:///o/\n")
			r.Command, r.Shell = []string{c.cmd}, true
			sigs := make(chan os.Signal, 1)
			r.Signals = sigs
			go func() {
				ready := filepath.Join(r.Plan.OutputDir(Channel{Name: "model"}), "ready")
				// Sent at the guard at the latest: Run's status says then.
				testwait.Until(testwait.Guard, func() bool { _, err := os.Stat(ready); return err == nil })
				sigs <- c.sig
			}()
			status, err := r.Run(context.Background())
			if status != c.want || err != nil {
				t.Fatalf("Run = %d, %v; want %d", status, err, c.want)
			}
			if c.want == 42 && fm.store["model"]["sig"] != "got TERM\n" {
				t.Errorf("drained after the signal: %q", fm.store["model"])
			}
		})
	}
}

func TestCopyCodeRefusesEscapingKeys(t *testing.T) {
	b := &memBackend{files: map[string]string{"../evil": "x"}}
	dst := t.TempDir()
	if err := CopyCode(context.Background(), b, "", dst); err == nil {
		t.Error("a key with .. was copied")
	}
	b = &memBackend{files: map[string]string{"dir/one.py": "print(1)"}}
	if err := CopyCode(context.Background(), b, "dir/one.py", dst); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dst, "one.py")); string(data) != "print(1)" {
		t.Errorf("single-object code: %q", data)
	}
}

// TestRunSignalWhileMounting: a signal that arrives before the command
// starts stops the job there: the command never runs, everything unmounts.
func TestRunSignalWhileMounting(t *testing.T) {
	r, fm, _ := newRunner(t, "name: x\ncommand: touch \"$PAI_OUTPUT_MODEL/ran\"\ninputs:\n  train: nas:///d/train.csv\noutput_path: nas:///o/\n")
	sigs := make(chan os.Signal, 1)
	r.Signals = sigs
	fm.onMount = func(string) {
		select {
		case sigs <- syscall.SIGINT:
		default:
		}
	}
	status, err := r.Run(context.Background())
	if status != 128+int(syscall.SIGINT) || err != nil {
		t.Fatalf("Run = %d, %v", status, err)
	}
	if _, ok := fm.store["model"]["ran"]; ok {
		t.Error("the command ran after the signal")
	}
	if last := fm.events[len(fm.events)-1]; last != "unmount input train" {
		t.Errorf("events %v", fm.events)
	}
}

// TestRunSignalsWhileDraining: one signal during the drain only warns (it
// may be the terminal's Ctrl-C that also ended the command); a second one
// aborts the drain, which is then reported as a failure.
func TestRunSignalsWhileDraining(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r, fm, _ := newRunner(t, "name: x\ncommand: 'true'\noutputs:\n  only: nas:///o/\n")
			sigs := make(chan os.Signal, 2)
			r.Signals = sigs
			fm.onDrain = func(ctx context.Context) error {
				for i := 0; i < n; i++ {
					sigs <- syscall.SIGINT
				}
				wait := 300 * time.Millisecond // one signal: the drain goes on and ends
				if n == 2 {
					wait = 5 * time.Minute // two: only the cancellation ends it
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(wait):
					return nil
				}
			}
			status, err := r.Run(context.Background())
			want := 0
			if n == 2 {
				want = ExitOutputFailed
			}
			if status != want {
				t.Fatalf("Run = %d, %v; want %d", status, err, want)
			}
			if n == 2 && (err == nil || !strings.Contains(err.Error(), `output channel "only"`) || !strings.Contains(err.Error(), "context canceled")) {
				t.Errorf("err = %v", err)
			}
			if last := fm.events[len(fm.events)-1]; !strings.HasPrefix(last, "unmount") {
				t.Errorf("events %v", fm.events)
			}
		})
	}
}

// TestRunSignalCancelsSlowStart: a signal while a mount is slow cancels it;
// the job does not start and nothing stays behind.
func TestRunSignalCancelsSlowStart(t *testing.T) {
	r, fm, _ := newRunner(t, "name: x\ncommand: 'true'\ninputs:\n  train: nas:///d/train.csv\n  slow: nas:///d/slow/\n")
	sigs := make(chan os.Signal, 1)
	r.Signals = sigs
	sm := slowMounter{fm, make(chan struct{}), new(atomic.Bool)}
	r.Mounter = sm
	go func() { <-sm.waiting; sigs <- syscall.SIGTERM }()
	status, err := r.Run(context.Background())
	if status != 0 || err == nil || !strings.Contains(err.Error(), "interrupted by terminated") || !strings.Contains(err.Error(), `input channel "slow"`) {
		t.Fatalf("Run = %d, %v", status, err)
	}
	if !sm.cancelled.Load() {
		t.Error("the slow mount was not cancelled")
	}
	if last := fm.events[len(fm.events)-1]; last != "unmount input train" {
		t.Errorf("events %v", fm.events)
	}
	if _, err := os.Stat(r.Plan.Root); !os.IsNotExist(err) {
		t.Errorf("root left behind: %v", err)
	}
}

// slowMounter blocks on the "slow" channel until its context is cancelled
// (closing waiting when it starts to), recording that it was; after a long
// while it gives up and mounts, which fails the test.
type slowMounter struct {
	*fakeMounter
	waiting   chan struct{}
	cancelled *atomic.Bool
}

func (m slowMounter) MountInput(ctx context.Context, ch Channel, mp string) (Mounted, error) {
	if ch.Name == "slow" {
		close(m.waiting)
		select {
		case <-ctx.Done():
			m.cancelled.Store(true)
			return nil, ctx.Err()
		case <-time.After(5 * time.Minute):
		}
	}
	return m.fakeMounter.MountInput(ctx, ch, mp)
}

// TestRunSignalReachesTheWholeJob: under `sh -c`, the shell waits for its
// children; a forwarded signal must reach them too, or they would outlive
// the run and keep writing to outputs being unmounted.
func TestRunSignalReachesTheWholeJob(t *testing.T) {
	r, _, _ := newRunner(t, "name: x\n")
	pidFile := filepath.Join(t.TempDir(), "pid")
	r.Command, r.Shell = []string{`sleep 3600 & echo $! > ` + pidFile + `; wait`}, true
	sigs := make(chan os.Signal, 1)
	r.Signals = sigs
	go func() {
		testwait.Until(testwait.Guard, func() bool {
			data, err := os.ReadFile(pidFile)
			return err == nil && strings.HasSuffix(string(data), "\n")
		})
		sigs <- syscall.SIGTERM
	}()
	// Run returns once the job's processes are gone: only a signal ends
	// the hour-long sleep. The guard is a hang bound, not a speed limit.
	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		status, err := r.Run(context.Background())
		done <- result{status, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(5 * time.Minute):
		if data, err := os.ReadFile(pidFile); err == nil {
			var pid int
			fmt.Sscan(string(data), &pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Fatal("Run did not return: the signal did not reach the job's sleep")
	}
	if status, err := res.status, res.err; status != 128+int(syscall.SIGTERM) || err != nil {
		t.Fatalf("Run = %d, %v", status, err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	fmt.Sscan(string(data), &pid)
	// The shell's child got the signal too (give the kernel a moment to reap it).
	if err := testwait.Until(testwait.Guard, func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(stat), ") Z ") // gone, or a zombie waiting for init
	}); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the job's background process %d survived the signal", pid)
	}
}

// TestRunSageMaker: with compat sagemaker the command sees every SM_*
// variable, names a shell cannot hold included, and reads
// resourceconfig.json and inputdataconfig.json next to hyperparameters.json;
// inherited SM_* variables do not leak in. A failed start removes the two
// files again.
func TestRunSageMaker(t *testing.T) {
	spec := "name: sm run\ncompat: sagemaker\nhyperparameters:\n  batch-size: 32\n  lr: 1e-5\ninputs:\n  train: nas:///data/train.csv\noutput_path: nas:///out/\n"
	r, _, out := newRunner(t, spec)
	r.Environ = append(r.Environ, "SM_HP_MP_PARAMETERS={\"x\":1}", "SM_STALE=1")
	// An argv command, as the toolkit runs a Python entry point: /bin/sh
	// (dash) would drop SM_HP_BATCH-SIZE, a name no shell can hold.
	r.Command = []string{"env", "-0"}
	if status, err := r.Run(context.Background()); status != 0 || err != nil {
		t.Fatalf("Run = %d, %v\n%s", status, err, out)
	}
	p := r.Plan
	if p.Host == nil {
		t.Fatal("Run did not fix the host facts")
	}
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(out.String(), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	vars, _ := p.Env()
	for _, v := range vars {
		if got[v.Name] != v.Value {
			t.Errorf("command saw %s=%q, want %q", v.Name, got[v.Name], v.Value)
		}
	}
	if got["SM_HP_BATCH-SIZE"] != "32" || got["SM_HP_LR"] != "1e-05" || got["TRAINING_JOB_NAME"] != "sm run" {
		t.Errorf("SM_HP_BATCH-SIZE=%q SM_HP_LR=%q TRAINING_JOB_NAME=%q", got["SM_HP_BATCH-SIZE"], got["SM_HP_LR"], got["TRAINING_JOB_NAME"])
	}
	for _, stale := range []string{"SM_HP_MP_PARAMETERS", "SM_STALE"} {
		if _, ok := got[stale]; ok {
			t.Errorf("inherited %s reached the command", stale)
		}
	}
	data := map[string]string{}
	for _, f := range []string{p.ResourceConfigFile(), p.InputDataConfigFile(), p.HyperparametersFile()} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data[filepath.Base(f)] = string(b)
	}
	if data["resourceconfig.json"] != p.ResourceConfigJSON(*p.Host) || data["inputdataconfig.json"] != p.InputDataConfigJSON() ||
		data["hyperparameters.json"] != p.HyperparametersJSON() {
		t.Errorf("config files: %q", data)
	}
	if !strings.Contains(data["inputdataconfig.json"], `{"train": {"TrainingInputMode": "File"`) {
		t.Errorf("inputdataconfig.json = %s", data["inputdataconfig.json"])
	}

	// A shell command is warned that /bin/sh may drop such names.
	r, _, _ = newRunner(t, spec)
	var logs bytes.Buffer
	r.Log = slog.New(slog.NewTextHandler(&logs, nil))
	r.Command, r.Shell = []string{"true"}, true
	if status, err := r.Run(context.Background()); status != 0 || err != nil {
		t.Fatalf("Run = %d, %v", status, err)
	}
	if !strings.Contains(logs.String(), "no shell names") || !strings.Contains(logs.String(), "SM_HP_BATCH-SIZE") {
		t.Errorf("no warning about SM_HP_BATCH-SIZE under sh -c: %s", logs.String())
	}

	r, fm, _ := newRunner(t, spec)
	fm.failMount = "train"
	if _, err := r.Run(context.Background()); err == nil {
		t.Fatal("want a start error")
	}
	for _, f := range []string{r.Plan.ResourceConfigFile(), r.Plan.InputDataConfigFile()} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", f, err)
		}
	}
}

// TestRunWithholdsEveryStoreSecret: with every variable that holds a key
// or token of a scheme's backend set (what `mlfsd run` withholds:
// all.AllSecretEnv), the command's environment holds none of them, for
// each scheme; other variables pass.
func TestRunWithholdsEveryStoreSecret(t *testing.T) {
	for _, scheme := range []string{backends.SchemeOSS, backends.SchemeS3, backends.SchemeHDFS, backends.SchemeNAS} {
		t.Run(scheme, func(t *testing.T) {
			r, fm, out := newRunner(t, runSpec)
			r.Withhold = all.AllSecretEnv()
			secrets := all.SecretEnv(scheme)
			if (scheme == backends.SchemeOSS || scheme == backends.SchemeS3) && len(secrets) < 3 {
				t.Fatalf("%s: secret variables %v: want its keys and token", scheme, secrets)
			}
			for i, name := range secrets {
				r.Environ = append(r.Environ, fmt.Sprintf("%s=withheld-%s-%d", name, scheme, i))
			}
			if status, err := r.Run(context.Background()); err != nil || status != 7 {
				t.Fatalf("Run = %d, %v. Output:\n%s", status, err, out)
			}
			env := fm.store["model"]["env.txt"]
			if strings.Contains(env, "withheld-") {
				t.Errorf("a %s secret reached the command:\n%s", scheme, env)
			}
			if !strings.Contains(env, "KEEP=me") {
				t.Errorf("the rest of the environment did not pass:\n%s", env)
			}
		})
	}
}
