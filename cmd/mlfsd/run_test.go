package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// mountsUnder lists the mounts at or below dir.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// cleanupMounts detaches anything a failed test left mounted under dir.
func cleanupMounts(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, m := range mountsUnder(t, dir) {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
}

// runArgs are the flags every run test passes: a private staging directory
// and disk cache, so tests share neither the write-back journal nor cached data.
func runArgs(t *testing.T, args ...string) []string {
	return append([]string{"run", "--staging-dir", filepath.Join(t.TempDir(), "staging"), "--cache-dir", t.TempDir()}, args...)
}

// TestRunQuickstart runs examples/quickstart end to end: real FUSE input
// mounts of the example's data, write-back output mounts on a NAS
// directory, the real python3 script. It checks what the script saw and
// what it wrote, and that nothing stays mounted.
func TestRunQuickstart(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "ml")
	store := filepath.Join(tmp, "outputs")
	cleanupMounts(t, tmp)
	spec, err := filepath.Abs("../../examples/quickstart/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runMlfsd(t, runArgs(t, "--spec", spec, "--root", root, "--output-path", "nas://"+store+"/")...)
	if code != 0 {
		t.Fatalf("mlfsd run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "trained 5 epochs on 64 rows") {
		t.Errorf("script output %q", stdout)
	}
	if m := mountsUnder(t, tmp); len(m) > 0 {
		t.Errorf("still mounted after mlfsd run: %v", m)
	}

	// What the script wrote, now in the output channels' store.
	var model struct {
		W, B   float64
		ValMSE float64 `json:"val_mse"`
		Epochs int
	}
	readJSON(t, filepath.Join(store, "model", "model.json"), &model)
	if model.Epochs != 5 || model.W < 2.8 || model.W > 3.2 || model.B < 0.8 || model.B > 1.2 {
		t.Errorf("model.json = %+v, want w≈3, b≈1 after 5 epochs", model)
	}
	for e := 1; e <= 5; e++ {
		var ck map[string]float64
		readJSON(t, filepath.Join(store, "checkpoints", fmt.Sprintf("epoch-%03d.json", e)), &ck)
		if ck["epoch"] != float64(e) {
			t.Errorf("checkpoint %d = %v", e, ck)
		}
	}
	if log, err := os.ReadFile(filepath.Join(store, "logs", "train.log")); err != nil || strings.Count(string(log), "\n") != 5 {
		t.Errorf("train.log = %q, %v", log, err)
	}

	// What the script saw.
	var seen struct {
		Args                map[string]any    `json:"args"`
		HyperparametersFile map[string]string `json:"hyperparameters_file"`
		UserArgs            string            `json:"user_args"`
		Cwd                 string            `json:"cwd"`
		TrainPath           string            `json:"train_path"`
		TrainRows           int               `json:"train_rows"`
		ValidationFiles     []string          `json:"validation_files"`
		ValidationRows      int               `json:"validation_rows"`
		Env                 map[string]string `json:"env"`
	}
	readJSON(t, filepath.Join(store, "logs", "seen.json"), &seen)
	wantArgs := map[string]any{"epochs": 5.0, "learning_rate": 0.05, "batch_size": 8.0, "optimizer": "sgd with momentum", "note": `it's a "quickstart"`}
	if !reflect.DeepEqual(seen.Args, wantArgs) {
		t.Errorf("argparse on $PAI_USER_ARGS gave %v, want %v", seen.Args, wantArgs)
	}
	wantHPs := map[string]string{"epochs": "5", "learning-rate": "0.05", "batch_size": "8", "optimizer": "sgd with momentum", "note": `it's a "quickstart"`}
	if !reflect.DeepEqual(seen.HyperparametersFile, wantHPs) {
		t.Errorf("hyperparameters.json gave %v, want %v", seen.HyperparametersFile, wantHPs)
	}
	if seen.Cwd != filepath.Join(root, "usercode") {
		t.Errorf("cwd %s", seen.Cwd)
	}
	if seen.TrainPath != filepath.Join(root, "input/data/train/train.csv") || seen.TrainRows != 64 {
		t.Errorf("train channel: %s, %d rows", seen.TrainPath, seen.TrainRows)
	}
	if want := []string{"more/part-2.csv", "part-0.csv", "part-1.csv"}; !reflect.DeepEqual(seen.ValidationFiles, want) || seen.ValidationRows != 24 {
		t.Errorf("validation channel: %v, %d rows", seen.ValidationFiles, seen.ValidationRows)
	}
	// The script's PAI_* environment is exactly what mlfsd env prints.
	want := envJSON(t, "--spec", spec, "--root", root, "--output-path", "nas://"+store+"/")
	if !reflect.DeepEqual(seen.Env, want) {
		t.Errorf("the script's environment differs from mlfsd env:\n got %v\nwant %v", seen.Env, want)
	}
	if data, err := os.ReadFile(filepath.Join(root, "input/config/hyperparameters.json")); err != nil ||
		string(data) != `{"epochs": "5", "learning-rate": "0.05", "batch_size": "8", "optimizer": "sgd with momentum", "note": "it's a \"quickstart\""}` {
		t.Errorf("hyperparameters.json = %s, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(root, "usercode/train.py")); err != nil {
		t.Errorf("code not copied: %v", err)
	}

	// Without an output path, the outputs are plain directories under the root.
	root2 := filepath.Join(tmp, "ml2")
	code, stdout, stderr = runMlfsd(t, runArgs(t, "--spec", spec, "--root", root2)...)
	if code != 0 {
		t.Fatalf("mlfsd run without --output-path: exit %d\n%s\n%s", code, stdout, stderr)
	}
	readJSON(t, filepath.Join(root2, "output", "model", "model.json"), &model)
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestRunExitStatus: mlfsd run exits with the command's status, whichever
// way the command is given.
func TestRunExitStatus(t *testing.T) {
	tmp := t.TempDir()
	cleanupMounts(t, tmp)
	data := filepath.Join(tmp, "data")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "x.txt"), []byte("hello"), 0o644)
	spec := writeSpec(t, fmt.Sprintf("name: s\ncommand: exit 5\ninputs:\n  d: nas://%s/\n", data))
	cases := []struct {
		extra []string
		want  int
	}{
		{nil, 5}, // the spec's command, with sh -c
		{[]string{"--", "test \"$(cat $PAI_INPUT_D/x.txt)\" = hello && exit 9"}, 9}, // one argument: sh -c
		{[]string{"--", "sh", "-c", "exit $1", "sh", "11"}, 11},                     // argv
		{[]string{"--", "sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM)},
		{[]string{"--", "/nonexistent/cmd"}, 127},
	}
	for i, c := range cases {
		root := filepath.Join(tmp, fmt.Sprint("root", i))
		code, _, stderr := runMlfsd(t, runArgs(t, append([]string{"--spec", spec, "--root", root}, c.extra...)...)...)
		if code != c.want {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", c.extra, code, c.want, stderr)
		}
		if m := mountsUnder(t, root); len(m) > 0 {
			t.Errorf("%v: still mounted: %v", c.extra, m)
		}
	}
}

// TestRunFailsCleanly: when a channel cannot be mounted, the error names it,
// nothing stays mounted and the layout mlfsd created is gone.
func TestRunFailsCleanly(t *testing.T) {
	tmp := t.TempDir()
	cleanupMounts(t, tmp)
	data := filepath.Join(tmp, "data")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "x.txt"), []byte("x"), 0o644) // "good" holds something
	cases := []struct {
		spec string
		want []string
	}{
		{fmt.Sprintf("name: f\ncommand: 'true'\ninputs:\n  good: nas://%s/\n  missing: nas://%s/nope/\n", data, data),
			[]string{`input channel "missing" (nas://` + data + `/nope/)`, "does not exist"}},
		{fmt.Sprintf("name: f\ncommand: 'true'\ninputs:\n  good: nas://%s/\n  gone: nas://%s/nope.csv\n", data, data),
			[]string{`input channel "gone"`, "does not exist"}},
		{"name: f\n", []string{"command: required by mlfsd run"}},
	}
	for i, c := range cases {
		root := filepath.Join(tmp, fmt.Sprint("root", i))
		code, _, stderr := runMlfsd(t, runArgs(t, "--spec", writeSpec(t, c.spec), "--root", root)...)
		if code == 0 {
			t.Errorf("case %d: exit 0", i)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("case %d: stderr %q lacks %q", i, stderr, w)
			}
		}
		if m := mountsUnder(t, tmp); len(m) > 0 {
			t.Errorf("case %d: still mounted: %v", i, m)
		}
		if _, err := os.Stat(root); !os.IsNotExist(err) {
			t.Errorf("case %d: %s left behind (%v)", i, root, err)
		}
	}
	code, _, stderr := runMlfsd(t, "run", "--spec", writeSpec(t, "name: x\ncommand: 'true'\n"), "stray", "--", "true")
	if code == 0 || !strings.Contains(stderr, `unexpected argument "stray"`) {
		t.Errorf("stray argument: exit %d, %q", code, stderr)
	}
}

// TestRunForwardsSignal: SIGTERM to mlfsd run reaches the command; mlfsd
// then drains, unmounts and exits with the command's status.
func TestRunForwardsSignal(t *testing.T) {
	tmp := t.TempDir()
	cleanupMounts(t, tmp)
	data := filepath.Join(tmp, "data")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "x.txt"), []byte("hello"), 0o644)
	store := filepath.Join(tmp, "store")
	spec := writeSpec(t, fmt.Sprintf(`name: sig
command: >-
  trap 'cp "$PAI_INPUT_D/x.txt" "$PAI_OUTPUT_MODEL/got-term.txt"; exit 42' TERM;
  touch "$PAI_OUTPUT_LOGS/ready"; while :; do sleep 0.05; done
inputs:
  d: nas://%s/
output_path: nas://%s/
`, data, store))
	root := filepath.Join(tmp, "ml")
	cmd := mlfsdCmd(t, runArgs(t, "--spec", spec, "--root", root)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(root, "output", "logs", "ready")
	if err := testwait.Until(testwait.Guard, func() bool { _, err := os.Stat(ready); return err == nil }); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the command never started; stderr:\n%s", &stderr)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("mlfsd run did not exit after SIGTERM; stderr:\n%s", &stderr)
	}
	if code := cmd.ProcessState.ExitCode(); code != 42 {
		t.Errorf("exit %d, want the command's 42; stderr:\n%s", code, &stderr)
	}
	if got, err := os.ReadFile(filepath.Join(store, "model", "got-term.txt")); err != nil || string(got) != "hello" {
		t.Errorf("what the command wrote on SIGTERM: %q, %v", got, err)
	}
	if m := mountsUnder(t, tmp); len(m) > 0 {
		t.Errorf("still mounted: %v", m)
	}
}

// TestRunWithholdsCredentials: the storage keys and tokens mlfsd may read
// from its own environment, of every backend, do not reach the job.
func TestRunWithholdsCredentials(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ml")
	spec := writeSpec(t, "name: c\ncommand: env > \"$PAI_OUTPUT_MODEL/env.txt\"\n")
	cmd := mlfsdCmd(t, runArgs(t, "--spec", spec, "--root", root)...)
	cmd.Env = append(cmd.Env, "OSS_ACCESS_KEY_ID=LTAI-test-id", "OSS_ACCESS_KEY_SECRET=test-secret-value", "OSS_SESSION_TOKEN=test-token", "UNRELATED=kept",
		"ALIBABA_CLOUD_ACCESS_KEY_SECRET=test-ali-secret", "ALIBABA_CLOUD_SECURITY_TOKEN=test-ali-token",
		"AWS_ACCESS_KEY_ID=AKIA-test-id", "AWS_SECRET_ACCESS_KEY=test-aws-secret", "AWS_SESSION_TOKEN=test-aws-token")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mlfsd run: %v\n%s", err, out)
	}
	env, err := os.ReadFile(filepath.Join(root, "output", "model", "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"LTAI-test-id", "test-secret-value", "test-token", "test-ali-secret", "test-ali-token", "AKIA-test-id", "test-aws-secret", "test-aws-token"} {
		if strings.Contains(string(env), secret) || strings.Contains(string(out), secret) {
			t.Errorf("%q reached the job's environment or mlfsd's output", secret)
		}
	}
	if !strings.Contains(string(env), "UNRELATED=kept\n") || !strings.Contains(string(env), "PAI_JOB_NAME=c\n") {
		t.Errorf("job environment:\n%s", env)
	}
}

// TestRunQuickstartOnOSS runs the quickstart's script with every channel on
// the OSS emulator: the code is copied from OSS, the inputs are read-through
// mounts of OSS objects, the outputs are uploaded to OSS before mlfsd exits.
func TestRunQuickstartOnOSS(t *testing.T) {
	_, emuRoot, ep := startOSSEmu(t, ossemu.Options{})
	tmp := t.TempDir()
	cleanupMounts(t, tmp)
	bucket := filepath.Join(emuRoot, "bkt")
	if err := os.MkdirAll(filepath.Join(bucket, "job"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"code", "data"} {
		out, err := exec.Command("cp", "-r", filepath.Join("../../examples/quickstart", dir), filepath.Join(bucket, "job", dir)).CombinedOutput()
		if err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
	}
	spec := writeSpec(t, `name: quickstart-oss
compat: sagemaker
command: [python3, train.py, --epochs, "3"]
code: oss://bkt/job/code/
hyperparameters:
  epochs: 5
  learning-rate: 0.05
  batch_size: 8
  optimizer: sgd with momentum
  note: on OSS
inputs:
  train: oss://bkt/job/data/train.csv
  validation: oss://bkt/job/data/validation/
output_path: oss://bkt/job/out/
`)
	root := filepath.Join(tmp, "ml")
	cmd := mlfsdCmd(t, runArgs(t, "--oss-endpoint", ep, "--spec", spec, "--root", root)...)
	ossEnv(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mlfsd run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "trained 3 epochs on 64 rows") {
		t.Errorf("output:\n%s", out)
	}
	if m := mountsUnder(t, tmp); len(m) > 0 {
		t.Errorf("still mounted: %v", m)
	}
	// The outputs are in the bucket once mlfsd has exited.
	var model map[string]float64
	readJSON(t, filepath.Join(bucket, "job/out/model/model.json"), &model)
	if model["epochs"] != 3 || model["w"] < 2.5 || model["w"] > 3.5 {
		t.Errorf("model.json = %v", model)
	}
	for e := 1; e <= 3; e++ {
		if _, err := os.Stat(filepath.Join(bucket, fmt.Sprintf("job/out/checkpoints/epoch-%03d.json", e))); err != nil {
			t.Error(err)
		}
	}
	var seen struct {
		Args            map[string]any    `json:"args"`
		ValidationFiles []string          `json:"validation_files"`
		Env             map[string]string `json:"env"`
	}
	readJSON(t, filepath.Join(bucket, "job/out/logs/seen.json"), &seen)
	// Arguments after the command's own override $PAI_USER_ARGS.
	if seen.Args["epochs"] != 3.0 || seen.Args["optimizer"] != "sgd with momentum" || seen.Args["note"] != "on OSS" {
		t.Errorf("args %v", seen.Args)
	}
	if want := []string{"more/part-2.csv", "part-0.csv", "part-1.csv"}; !reflect.DeepEqual(seen.ValidationFiles, want) {
		t.Errorf("validation files %v", seen.ValidationFiles)
	}
	if seen.Env["PAI_INPUT_TRAIN"] != filepath.Join(root, "input/data/train/train.csv") || seen.Env["PAI_OUTPUT_MODEL"] != filepath.Join(root, "output/model")+"/" {
		t.Errorf("env %v", seen.Env)
	}
	// SageMaker compatibility: the same places under SM_* names.
	for k, v := range map[string]string{
		"SM_CHANNEL_VALIDATION": filepath.Join(root, "input/data/validation"),
		"SM_CHANNEL_TRAIN":      filepath.Join(root, "input/data/train"),
		"SM_MODEL_DIR":          filepath.Join(root, "output/model"),
		"SM_OUTPUT_DATA_DIR":    filepath.Join(root, "output/data"),
		"SM_CHANNELS":           `["train","validation"]`,
		"SM_HP_LEARNING-RATE":   "0.05", // the toolkit keeps the '-'; an argv command receives it
		"SM_HPS":                `{"batch_size":8,"epochs":5,"learning-rate":0.05,"note":"on OSS","optimizer":"sgd with momentum"}`,
	} {
		if seen.Env[k] != v {
			t.Errorf("%s = %q, want %q", k, seen.Env[k], v)
		}
	}
}

// TestRunOnTerminal runs mlfsd run on a pseudo-terminal (script(1)): the
// job owns the terminal while it runs, so it reads it without being stopped
// and Ctrl-C goes to the job, whose own status mlfsd then returns.
func TestRunOnTerminal(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec := writeSpec(t, "name: tty\n")
	// The job says it waits for input once its trap is set (the quotes
	// keep the word out of the command line, which the terminal may show).
	job := `trap 'echo INT; exit 7' INT; echo "job-""waiting"; read line; echo "got $line"; while :; do sleep 0.05; done`
	inner := fmt.Sprintf("%s run --staging-dir %s --cache-dir %s --spec %s --root %s -- %s",
		exe, filepath.Join(t.TempDir(), "staging"), t.TempDir(), spec, filepath.Join(t.TempDir(), "ml"), shellQuoteTest(job))
	cmd := exec.Command("script", "-qec", inner, "/dev/null")
	cmd.Env = append(os.Environ(), "MLFSD_TEST_MAIN=1", "SHELL=/bin/sh")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("script(1) (util-linux): %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor := func(s string) {
		if err := testwait.Until(testwait.Guard, func() bool { return strings.Contains(out.String(), s) }); err != nil {
			cmd.Process.Kill()
			t.Fatalf("no %q in the terminal:\n%s", s, out.String())
		}
	}
	waitFor("job-waiting")
	if _, err := stdin.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitFor("got hello")
	stdin.Write([]byte{3}) // Ctrl-C
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("mlfsd run did not end after Ctrl-C:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 7 || !strings.Contains(out.String(), "INT") {
		t.Errorf("exit %d, want the job's 7; terminal:\n%s", code, out.String())
	}
}

// shellQuoteTest quotes s for sh.
func shellQuoteTest(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestRunStaleMount: a mount left under the root by a killed mlfsd is
// detached by the next run of the job, which then mounts and runs.
func TestRunStaleMount(t *testing.T) {
	tmp := t.TempDir()
	cleanupMounts(t, tmp)
	data := filepath.Join(tmp, "data")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "x.txt"), []byte("x"), 0o644) // an empty input fails
	root := filepath.Join(tmp, "ml")
	mnt := filepath.Join(root, "input", "data", "d")
	os.MkdirAll(mnt, 0o755)
	cmd := mlfsdCmd(t, "mount", "--read-only", "--cache-dir", t.TempDir(), "nas://"+data+"/", mnt)
	readyFile := withReadyFile(t, cmd)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	// Kill only once mounting is complete (its ready file): go-fuse opens
	// a file on the new mount while mounting, and a daemon killed then
	// waits for itself forever.
	waitReady(t, readyFile, waited, &stderr)
	cmd.Process.Kill() // SIGKILL: the mount stays, its daemon gone
	select {
	case <-waited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the killed mlfsd mount did not exit")
	}

	spec := writeSpec(t, fmt.Sprintf("name: s\ncommand: 'true'\ninputs:\n  d: nas://%s/\n", data))
	code, _, errOut := runMlfsd(t, runArgs(t, "--spec", spec, "--root", root)...)
	if code != 0 || !strings.Contains(errOut, "stale mlfsd mount") {
		t.Errorf("a rerun over the stale mlfsd mount its killed run left: exit %d, stderr %q", code, errOut)
	}
	if m := mountsUnder(t, tmp); len(m) > 0 {
		t.Errorf("still mounted after the rerun: %v", m)
	}
}
