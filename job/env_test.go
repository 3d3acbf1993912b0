package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func mustParse(t *testing.T, spec string, opt Options) *Plan {
	t.Helper()
	p, err := Parse([]byte(spec), opt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func envMap(vars []Var) map[string]string {
	m := make(map[string]string, len(vars))
	for _, v := range vars {
		m[v.Name] = v.Value
	}
	return m
}

// TestSpecExamples checks the examples written in JOB-ENVIRONMENT.md literally.
func TestSpecExamples(t *testing.T) {
	p := mustParse(t, "name: x\nhyperparameters:\n  batch_size: 32\n  learning-rate: 0.01\n", Options{})
	if got, want := p.HyperparametersJSON(), `{"batch_size": "32", "learning-rate": "0.01"}`; got != want {
		t.Errorf("hyperparameters.json = %s, want %s", got, want)
	}
	p = mustParse(t, "name: x\nhyperparameters:\n  epochs: 10\n  batch-size: 32\n  learning-rate: 0.001\n  flag: true\n  exp: 1e-5\n  train.learning_rate: 0.1\n", Options{})
	env := envMap(must(p.Env()))
	want := map[string]string{
		"PAI_USER_ARGS":               "--epochs 10 --batch-size 32 --learning-rate 0.001 --flag true --exp 1e-5 --train.learning_rate 0.1",
		"PAI_HPS_BATCH_SIZE":          "32",
		"PAI_HPS_LEARNING_RATE":       "0.001",
		"PAI_HPS_TRAIN_LEARNING_RATE": "0.1",
		"PAI_HPS_FLAG":                "true",
		"PAI_HPS_EXP":                 "1e-5",
		"PAI_CONFIG_DIR":              "/ml/input/config/",
		"PAI_WORKING_DIR":             "/ml/usercode/",
		"PAI_OUTPUT_MODEL":            "/ml/output/model/",
		"PAI_OUTPUT_CHECKPOINTS":      "/ml/output/checkpoints/",
		"PAI_OUTPUT_LOGS":             "/ml/output/logs/",
		"PAI_OUTPUT_TENSORBOARD":      "/ml/output/tensorboard/",
		"PAI_JOB_NAME":                "x",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if env["PAI_HPS"] != p.HyperparametersJSON() {
		t.Errorf("PAI_HPS = %q, want the file's content %q", env["PAI_HPS"], p.HyperparametersJSON())
	}
}

func must(vars []Var, warnings []string) []Var {
	if len(warnings) > 0 {
		panic(strings.Join(warnings, "; "))
	}
	return vars
}

func TestVarName(t *testing.T) {
	for in, want := range map[string]string{
		"batch-size":          "BATCH_SIZE",
		"train.learning_rate": "TRAIN_LEARNING_RATE",
		"学习率":                 "___",
		"a b=c":               "A_B_C",
		"Already_OK9":         "ALREADY_OK9",
		"é":                   "_",
	} {
		if got := VarName(in); got != want {
			t.Errorf("VarName(%q) = %q, want %q", in, got, want)
		}
	}
}

// trickyValues are hyperparameter values that must survive every format.
func trickyValues() []Hyperparameter {
	return []Hyperparameter{
		{"space", "adam w"},
		{"single", "it's"},
		{"double", `say "hi"`},
		{"mixed", `'"'"''\'`},
		{"empty", ""},
		{"newline", "a\nb"},
		{"trailing-newlines", "end\n\n"},
		{"cr", "a\r\nb"},
		{"backslash", `C:\path\n\\`},
		{"dollar", "$HOME ${PATH} `id` $(id) !x"},
		{"unicode", "学习 ✓ é 😀"},
		{"tab", "\tx\t"},
		{"控制", "\x01\x1b[0m"},
		{"long", strings.Repeat("0123456789 '\"\n", 100*1024/14)},
	}
}

func trickyPlan() *Plan {
	return &Plan{Name: "tricky 'name' \"x\"\n", Root: "/tmp/root with 'quote'", Hyperparameters: trickyValues()}
}

// TestShellEvalRoundTrip evaluates the shell format in a real sh and checks
// that every variable comes back byte for byte.
func TestShellEvalRoundTrip(t *testing.T) {
	p := trickyPlan()
	p.Compat = CompatSageMaker
	vars, _ := p.Env()
	var b bytes.Buffer
	if err := WriteEnv(&b, FormatShell, vars); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sh := range []string{"sh", "bash"} {
		if _, err := exec.LookPath(sh); err != nil {
			if sh == "sh" {
				t.Fatal(err)
			}
			continue
		}
		// `env -0` separates variables with NUL, so newlines survive.
		out, err := exec.Command("env", "-i", sh, "-c", `eval "$(cat "$1")"; exec env -0`, sh, file).Output()
		if err != nil {
			t.Fatalf("%s: %v", sh, err)
		}
		got := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		for _, v := range vars {
			if !isShellName(v.Name) {
				// SM_HP_TRAILING-NEWLINES and the like: a comment, not set.
				if _, ok := got[v.Name]; ok || !strings.Contains(b.String(), "\n# not a shell name: "+v.Name+"\n") {
					t.Errorf("%s: %s is no shell name, want it as a comment line only", sh, v.Name)
				}
				continue
			}
			if got[v.Name] != v.Value {
				t.Errorf("%s: %s = %q after eval, want %q", sh, v.Name, trunc(got[v.Name]), trunc(v.Value))
			}
		}
		// The same through printf, the way the issue states it.
		out, err = exec.Command("env", "-i", sh, "-c", `eval "$(cat "$1")"; printf %s "$PAI_HPS_MIXED"`, sh, file).Output()
		if err != nil || string(out) != `'"'"''\'` {
			t.Errorf("%s: printf PAI_HPS_MIXED = %q, %v", sh, out, err)
		}
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func TestDotenvRoundTrip(t *testing.T) {
	vars, _ := trickyPlan().Env()
	var b bytes.Buffer
	if err := WriteEnv(&b, FormatDotenv, vars); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b.Bytes(), []byte("\n")); n != len(vars) {
		t.Errorf("dotenv has %d lines for %d variables: a raw newline leaked", n, len(vars))
	}
	got, err := ParseDotenv(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(vars) {
		t.Fatalf("read back %d variables, want %d", len(got), len(vars))
	}
	for i := range vars {
		if got[i] != vars[i] {
			t.Errorf("variable %d: read back %q=%q, want %q=%q", i, got[i].Name, trunc(got[i].Value), vars[i].Name, trunc(vars[i].Value))
		}
	}
	for _, bad := range []string{"X\n", "X=\"a\"b\"\n", "X=\"a\\\"\n", "X=\"\\q\"\n"} {
		if _, err := ParseDotenv(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseDotenv(%q) accepted it", bad)
		}
	}
}

func TestJSONFormat(t *testing.T) {
	vars, _ := trickyPlan().Env()
	var b bytes.Buffer
	if err := WriteEnv(&b, FormatJSON, vars); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(vars) {
		t.Errorf("%d keys, want %d", len(got), len(vars))
	}
	for _, v := range vars {
		if got[v.Name] != v.Value {
			t.Errorf("%s = %q, want %q", v.Name, trunc(got[v.Name]), trunc(v.Value))
		}
	}
	if bytes.Contains(b.Bytes(), []byte(`\u003c`)) {
		t.Error("HTML escaping in JSON output")
	}
	if err := WriteEnv(&b, "yaml", vars); err == nil {
		t.Error("unknown format accepted")
	}
}

// TestUserArgsMatchesPython checks PAI_USER_ARGS against Python's own
// shlex.quote, and that shlex.split restores every value.
func TestUserArgsMatchesPython(t *testing.T) {
	p := trickyPlan()
	args, err := json.Marshal(p.UserArgv())
	if err != nil {
		t.Fatal(err)
	}
	// Through stdin: the long value would not fit in one argument.
	py := `import json, shlex, sys
argv, user_args = json.load(sys.stdin)
quoted = " ".join(shlex.quote(a) for a in argv)
sys.stdout.write(json.dumps([quoted, shlex.split(user_args) == argv]))`
	in, err := json.Marshal([]any{json.RawMessage(args), p.UserArgs()})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-c", py)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 (needed by the tests and the example): %v", err)
	}
	var res []any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if res[0] != p.UserArgs() {
		t.Errorf("PAI_USER_ARGS differs from Python's shlex.quote:\n got %q\nwant %q", trunc(p.UserArgs()), trunc(res[0].(string)))
	}
	if res[1] != true {
		t.Error("shlex.split(PAI_USER_ARGS) does not restore the hyperparameters")
	}
}

// TestOversizedAggregates: a value near 128 KiB still reaches its own
// variable, while PAI_HPS and PAI_USER_ARGS, which would exceed what
// execve accepts, are left out with a warning; a value that cannot fit even
// alone is a validation error.
func TestOversizedAggregates(t *testing.T) {
	big := strings.Repeat("x", 100*1024)
	p := mustParse(t, "name: x\nhyperparameters:\n  a: "+big+"\n", Options{})
	vars, warnings := p.Env()
	if len(warnings) != 0 {
		t.Errorf("one 100 KiB value: warnings %q", warnings)
	}
	if m := envMap(vars); m["PAI_HPS_A"] != big || m["PAI_HPS"] == "" || m["PAI_USER_ARGS"] != "--a "+big {
		t.Error("one 100 KiB value: not carried by PAI_HPS_A, PAI_HPS and PAI_USER_ARGS")
	}

	p = mustParse(t, "name: x\ncompat: sagemaker\nhyperparameters:\n  a: "+big+"\n  b: "+big[:40*1024]+"\n", Options{})
	vars, warnings = p.Env()
	m := envMap(vars)
	for _, name := range []string{"PAI_HPS", "PAI_USER_ARGS", "SM_HPS", "SM_USER_ARGS", "SM_TRAINING_ENV"} {
		if _, ok := m[name]; ok {
			t.Errorf("%s kept although it exceeds 128 KiB", name)
		}
	}
	if len(warnings) != 5 || !strings.Contains(warnings[0], "PAI_HPS left out") || !strings.Contains(warnings[0], "hyperparameters.json") {
		t.Errorf("warnings = %q", warnings)
	}
	if m["PAI_HPS_A"] != big || m["PAI_HPS_B"] != big[:40*1024] || m["SM_HP_A"] != big {
		t.Error("per-hyperparameter variables lost")
	}
	for _, v := range vars {
		if len(v.Name)+len(v.Value)+2 > 128*1024 {
			t.Errorf("%s is too long to exec", v.Name)
		}
	}

	_, err := Parse([]byte("name: x\nhyperparameters:\n  a: "+strings.Repeat("y", 128*1024)+"\n"), Options{})
	if err == nil || !strings.Contains(err.Error(), "hyperparameters.a: value is 131072 bytes") {
		t.Errorf("a 128 KiB value: err = %v", err)
	}
}

func TestOutputsAndRoot(t *testing.T) {
	p := mustParse(t, `name: x
output_path: oss://bucket/jobs/run-1
outputs:
  Model: nas:///models/
  extra: oss://bucket/extra/
`, Options{Root: "rel/root"})
	wd, _ := os.Getwd()
	if p.Root != filepath.Join(wd, "rel/root") {
		t.Errorf("Root = %s, want it absolute", p.Root)
	}
	want := []struct {
		name, uri string
	}{
		{"Model", "nas:///models/"},
		{"extra", "oss://bucket/extra/"},
		{"checkpoints", "oss://bucket/jobs/run-1/checkpoints/"},
		{"logs", "oss://bucket/jobs/run-1/logs/"},
		{"tensorboard", "oss://bucket/jobs/run-1/tensorboard/"},
	}
	if len(p.Outputs) != len(want) {
		t.Fatalf("outputs = %+v", p.Outputs)
	}
	for i, w := range want {
		if o := p.Outputs[i]; o.Name != w.name || o.URI.String() != w.uri || o.Local {
			t.Errorf("output %d = %s %s (local %v), want %s %s", i, o.Name, o.URI, o.Local, w.name, w.uri)
		}
	}

	p = mustParse(t, "name: x\nroot: /srv/ml/\n", Options{})
	if p.Root != "/srv/ml" || len(p.Outputs) != 4 {
		t.Fatalf("root %s, outputs %+v", p.Root, p.Outputs)
	}
	for _, o := range p.Outputs {
		if !o.Local {
			t.Errorf("without output_path, default channel %s should be a local directory", o.Name)
		}
	}
}

func TestSpecDir(t *testing.T) {
	dir := "/tmp/dir with space/100%/#x"
	p := mustParse(t, "name: x\ncode: nas://${SPEC_DIR}/code/\ninputs:\n  d: file://${SPEC_DIR}/data.csv\n", Options{SpecDir: dir})
	if p.Code.Path != dir+"/code/" {
		t.Errorf("code path = %q", p.Code.Path)
	}
	if p.Inputs[0].URI.Path != dir+"/data.csv" || p.InputPath(p.Inputs[0]) != "/ml/input/data/d/data.csv" {
		t.Errorf("input %+v", p.Inputs[0])
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	os.WriteFile(spec, []byte("name: x\ninputs:\n  d: nas://${SPEC_DIR}/data/\n"), 0o644)
	p, err := Load(spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Inputs[0].URI.Path != dir+"/data/" {
		t.Errorf("${SPEC_DIR} = %q, want %q", p.Inputs[0].URI.Path, dir+"/data/")
	}
	os.WriteFile(spec, []byte("name: x\nbogus: 1\n"), 0o644)
	_, err = Load(spec, Options{})
	if err == nil || !strings.Contains(err.Error(), spec) || !strings.Contains(err.Error(), "line 2: bogus: unknown key") {
		t.Errorf("err = %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml"), Options{}); err == nil {
		t.Error("missing file accepted")
	}
}

func TestYAMLFlowMapping(t *testing.T) {
	p := mustParse(t, "{name: flow, hyperparameters: {lr: 1e-5}}", Options{})
	if p.Name != "flow" || p.HyperparametersJSON() != `{"lr": "1e-5"}` {
		t.Errorf("plan %+v", p)
	}
}

// TestDotenvWithPythonDotenv reads the dotenv format with the real
// python-dotenv (Debian python3-dotenv): every value comes back exactly
// with interpolation off, and every value without "${" with it on,
// including values that end in a backslash.
func TestDotenvWithPythonDotenv(t *testing.T) {
	p := trickyPlan()
	p.Compat = CompatSageMaker
	p.Hyperparameters = append(p.Hyperparameters, Hyperparameter{"inner-backslashes", `C:\path\n\\x`},
		Hyperparameter{"with space", `x\`}, Hyperparameter{"hash#", `"y\\"`})
	vars, _ := p.Env()
	got := readWithPythonDotenv(t, vars)
	for _, v := range vars {
		if got[0][v.Name] == nil || *got[0][v.Name] != v.Value {
			t.Errorf("python-dotenv read %s = %s, want %q", v.Name, show(got[0][v.Name]), trunc(v.Value))
		}
		if !strings.Contains(v.Value, "${") && (got[1][v.Name] == nil || *got[1][v.Name] != v.Value) {
			t.Errorf("python-dotenv (interpolating) read %s = %s, want %q", v.Name, show(got[1][v.Name]), trunc(v.Value))
		}
	}
	if len(got[0]) != len(vars) {
		t.Errorf("python-dotenv read %d variables, want %d", len(got[0]), len(vars))
	}
}

// TestDotenvTrailingBackslash: a value ending in a backslash never swallows
// the next variable in python-dotenv; it is written unquoted when
// python-dotenv reads that literally, else as a comment line, and names
// python-dotenv cannot read bare are single-quoted.
func TestDotenvTrailingBackslash(t *testing.T) {
	vars := []Var{
		{"A", `ends\`}, {"B", "next"}, {"C", `C:\path\n\\`}, {"D", "line1\nline2\\"},
		{"E", `"quoted\`}, {"F", ` lead\`}, {"G", `a #b\`}, {"H", `a#b\`}, {"I", "\u00a0x\\"},
		{"J", "x\x1c#\\"}, {"K", "x\x1c\\"}, {"L", `\`}, {"M", `'\`}, {"N", "\tx\\"},
		{"SM_HP_WITH SPACE", "x"}, {"SM_HP_A#B", `y\`}, {"SM_HP_IT'S X", "z"}, {"SM_HP_IT'S", `z\`},
		{"SM_HP_学习率", "0.5"}, {"Z", "last"},
	}
	unrepresentable := map[string]bool{"D": true, "E": true, "F": true, "G": true, "I": true, "J": true, "M": true, "N": true, "SM_HP_IT'S X": true}
	var b bytes.Buffer
	if err := WriteEnv(&b, FormatDotenv, vars); err != nil {
		t.Fatal(err)
	}
	ours, err := ParseDotenv(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("ParseDotenv: %v\n%s", err, b.String())
	}
	oursMap := envMap(ours)
	py := readWithPythonDotenv(t, vars)
	for _, v := range vars {
		if unrepresentable[v.Name] {
			if _, ok := py[0][v.Name]; ok {
				t.Errorf("%s: python-dotenv read it, want it left out", v.Name)
			}
			if _, ok := oursMap[v.Name]; ok {
				t.Errorf("%s: ParseDotenv read it, want it left out", v.Name)
			}
			if !strings.Contains(b.String(), "# not representable in dotenv: "+v.Name+"\n") {
				t.Errorf("%s: no comment line", v.Name)
			}
			continue
		}
		if py[0][v.Name] == nil || *py[0][v.Name] != v.Value {
			t.Errorf("python-dotenv read %s = %s, want %q\n%s", v.Name, show(py[0][v.Name]), v.Value, b.String())
		}
		if oursMap[v.Name] != v.Value {
			t.Errorf("ParseDotenv read %s = %q, want %q", v.Name, oursMap[v.Name], v.Value)
		}
	}
	if len(py[0]) != len(vars)-len(unrepresentable) {
		t.Errorf("python-dotenv read %d variables, want %d:\n%s", len(py[0]), len(vars)-len(unrepresentable), b.String())
	}
}

func show(s *string) string {
	if s == nil {
		return "nothing"
	}
	return fmt.Sprintf("%q", trunc(*s))
}

// readWithPythonDotenv writes vars in the dotenv format and reads them
// with python-dotenv, without and with interpolation.
func readWithPythonDotenv(t *testing.T, vars []Var) [2]map[string]*string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteEnv(&b, FormatDotenv, vars); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Debian's interpreter, where python3-dotenv is installed.
	py := `import dotenv, json, sys
print(json.dumps([dotenv.dotenv_values(sys.argv[1], interpolate=False), dotenv.dotenv_values(sys.argv[1])]))`
	out, err := exec.Command("/usr/bin/python3", "-c", py, file).Output()
	if err != nil {
		t.Fatalf("python-dotenv (apt package python3-dotenv): %v", err)
	}
	var got [2]map[string]*string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return got
}
