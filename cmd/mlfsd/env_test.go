package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// trickySpec has values that only survive correct quoting.
const trickySpec = `name: "tricky 'job' \"x\""
hyperparameters:
  space: adam w
  quotes: it's "x" '' \
  empty: ""
  newline: "a\nb\n"
  unicode: "学习率 ✓ 😀"
  学习率: 0.1
  dollar: "$HOME $(id) ` + "`id`" + `"
inputs:
  train-data.v1: nas:///data/train.csv
  images: nas:///data/images/
`

func writeSpec(t *testing.T, spec string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func envJSON(t *testing.T, args ...string) map[string]string {
	t.Helper()
	code, out, stderr := runMlfsd(t, append([]string{"env", "--format", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("mlfsd env: exit %d: %s", code, stderr)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("mlfsd env --format json: %v\n%s", err, out)
	}
	return m
}

// TestEnvShellEval: eval "$(mlfsd env ...)" in a real shell reproduces
// every value byte for byte, as the json format states them.
func TestEnvShellEval(t *testing.T) {
	spec := writeSpec(t, trickySpec)
	want := envJSON(t, "--spec", spec, "--root", "/tmp/a root", "--compat", "sagemaker")
	if want["PAI_HPS_QUOTES"] != `it's "x" '' \` || want["PAI_HPS_NEWLINE"] != "a\nb\n" || want["PAI_INPUT_TRAIN_DATA_V1"] != "/tmp/a root/input/data/train-data.v1/train.csv" {
		t.Fatalf("unexpected values: %q", want)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("env", "-i", "MLFSD_TEST_MAIN=1", "MLFSD="+exe, "SPEC="+spec, "sh", "-c",
		`eval "$("$MLFSD" env --spec "$SPEC" --root '/tmp/a root' --compat sagemaker)" && exec env -0`)
	out, err := sh.Output()
	if err != nil {
		t.Fatalf("eval: %v", err)
	}
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for k, v := range want {
		if strings.ContainsAny(k, "-.学") {
			continue // SM_HP_学习率, SM_CHANNEL_TRAIN-DATA.V1: no shell names, left as comments
		}
		if got[k] != v {
			t.Errorf("after eval %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestEnvDotenvMatchesJSON(t *testing.T) {
	spec := writeSpec(t, trickySpec)
	want := envJSON(t, "--spec", spec)
	code, out, stderr := runMlfsd(t, "env", "--spec", spec, "--format", "dotenv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if n := strings.Count(out, "\n"); n != len(want) {
		t.Errorf("%d lines for %d variables", n, len(want))
	}
	for k, v := range want {
		line := k + `="` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`).Replace(v) + `"` + "\n"
		if strings.HasSuffix(v, `\`) {
			line = k + "=" + v + "\n" // unquoted: python-dotenv cannot end a quoted value in \
		}
		if !strings.Contains(out, line) {
			t.Errorf("dotenv lacks %s=%q", k, v)
		}
	}
}

func TestEnvErrors(t *testing.T) {
	bad := writeSpec(t, "name: x\ncomand: train\ninputs:\n  a b: gs://x/\n")
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"env", "--spec", bad}, []string{"line 2: comand: unknown key", `line 4: inputs.a b: invalid channel name "a b"`, `inputs.a b: URI "gs://x/": unknown scheme "gs"`}},
		{[]string{"env"}, []string{"--spec is required"}},
		{[]string{"env", "--spec", filepath.Join(t.TempDir(), "none.yaml")}, []string{"no such file"}},
		{[]string{"env", "--spec", writeSpec(t, "name: x\n"), "--format", "xml"}, []string{"--format: want shell, dotenv or json"}},
		{[]string{"env", "--spec", writeSpec(t, "name: x\n"), "--compat", "azure"}, []string{`--compat "azure": want "sagemaker" or "none"`}},
		{[]string{"env", "--spec", writeSpec(t, "name: x\ncompat: azure\n"), "--compat", "none"}, nil}, // the flag overrides the spec
	}
	for _, c := range cases {
		code, out, stderr := runMlfsd(t, c.args...)
		if c.want == nil {
			if code != 0 {
				t.Errorf("mlfsd %v: exit %d: %s", c.args, code, stderr)
			}
			continue
		}
		if strings.Contains(stderr, "invalid job spec") && strings.Contains(strings.Join(c.args, " "), "azure") {
			t.Errorf("mlfsd %v: the flag's mistake blamed on the spec: %s", c.args, stderr)
		}
		if code == 0 || out != "" {
			t.Errorf("mlfsd %v: exit %d, stdout %q", c.args, code, out)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("mlfsd %v: stderr %q lacks %q", c.args, stderr, w)
			}
		}
	}
}

// TestEnvDropsOversizedAggregate: the warning goes to stderr, the variable
// is left out, and everything else is still printed.
func TestEnvDropsOversizedAggregate(t *testing.T) {
	big := strings.Repeat("v", 70*1024)
	spec := writeSpec(t, "name: x\nhyperparameters:\n  a: "+big+"\n  b: "+big+"\n")
	code, out, stderr := runMlfsd(t, "env", "--spec", spec, "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["PAI_HPS"]; ok || m["PAI_HPS_A"] != big || m["PAI_HPS_B"] != big {
		t.Errorf("PAI_HPS kept or per-value variables lost")
	}
	if !strings.Contains(stderr, "PAI_HPS left out") || !strings.Contains(stderr, "PAI_USER_ARGS left out") {
		t.Errorf("stderr lacks the warnings: %q", stderr)
	}
}

// TestEnvDotenvPythonDotenv: python-dotenv (Debian python3-dotenv) reads
// `mlfsd env --format dotenv` back to the json format's values, including
// one that ends in a backslash followed by another variable.
func TestEnvDotenvPythonDotenv(t *testing.T) {
	spec := writeSpec(t, trickySpec)
	want := envJSON(t, "--spec", spec, "--compat", "sagemaker")
	code, out, stderr := runMlfsd(t, "env", "--spec", spec, "--compat", "sagemaker", "--format", "dotenv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	file := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	py := `import dotenv, json, sys
print(json.dumps(dotenv.dotenv_values(sys.argv[1], interpolate=False)))`
	res, err := exec.Command("/usr/bin/python3", "-c", py, file).Output()
	if err != nil {
		t.Fatalf("python-dotenv (apt package python3-dotenv): %v", err)
	}
	var got map[string]string
	if err := json.Unmarshal(res, &got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(want["PAI_HPS_QUOTES"], `\`) {
		t.Fatalf("the spec lost its value ending in a backslash: %q", want["PAI_HPS_QUOTES"])
	}
	if len(got) != len(want) {
		t.Errorf("python-dotenv read %d variables, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("python-dotenv read %s = %q, want %q", k, got[k], v)
		}
	}
}
