package job

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// goldenSpecDir stands in for the spec file's directory: it has a space and
// a '%', which ${SPEC_DIR} must carry through URI escaping.
const goldenSpecDir = "/specs dir/100%"

// goldenHost stands in for the machine in the SageMaker variables.
var goldenHost = Host{Name: DefaultHostName, NumCPUs: 4, NetworkInterface: "eth0"}

// goldenCases are the valid specs under testdata/specs and their options.
var goldenCases = []struct {
	file string
	opt  Options
}{
	{"pai-docs.yaml", Options{RequireCommand: true}},
	{"hps-file-example.yaml", Options{}},
	{"names.yaml", Options{}},
	{"values.yaml", Options{}},
	{"channels.yaml", Options{RequireCommand: true}},
	{"sagemaker.yaml", Options{}},
	{"minimal.yaml", Options{Root: "/tmp/job root"}},
	{"json-spec.json", Options{RequireCommand: true}},
	{"pai-docs.yaml", Options{Compat: CompatSageMaker, Root: "/r"}},
}

// checkGolden compares got with testdata/golden/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./job -update to create it, then review it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func goldenName(file string, opt Options) string {
	base := strings.TrimSuffix(file, filepath.Ext(file))
	if opt.Compat != "" {
		base += "." + opt.Compat
	}
	return base
}

// TestGolden checks hyperparameters.json and every variable, in all three
// formats, for each spec under testdata/specs.
func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		name := goldenName(c.file, c.opt)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "specs", c.file))
			if err != nil {
				t.Fatal(err)
			}
			opt := c.opt
			opt.SpecDir = goldenSpecDir
			p, err := Parse(data, opt)
			if err != nil {
				t.Fatal(err)
			}
			h := goldenHost
			p.Host = &h
			checkGolden(t, name+".hyperparameters.json", []byte(p.HyperparametersJSON()))
			vars, warnings := p.Env()
			if len(warnings) > 0 {
				t.Errorf("unexpected warnings: %q", warnings)
			}
			for _, f := range []string{FormatShell, FormatDotenv, FormatJSON} {
				var b bytes.Buffer
				if err := WriteEnv(&b, f, vars); err != nil {
					t.Fatal(err)
				}
				checkGolden(t, name+".env."+f, b.Bytes())
			}
		})
	}
}

// TestGoldenInvalid checks the complete error message of each invalid spec.
func TestGoldenInvalid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "invalid", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid specs: %v", err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			opt := Options{RequireCommand: true}
			if base == "spec-dir.yaml" {
				opt.RequireCommand = false // the only problem: no spec directory
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(data, opt)
			if err == nil {
				t.Fatalf("Parse accepted %s: %+v", base, p)
			}
			if _, ok := err.(*SpecError); !ok {
				t.Errorf("error is %T, want *SpecError", err)
			}
			checkGolden(t, "invalid/"+strings.TrimSuffix(base, filepath.Ext(base))+".err", []byte(err.Error()+"\n"))
		})
	}
}
