package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// configFlags is a command's flag set as cmd builds one: the options
// table's rows and flags of its own (a string, a repeatable one).
func configFlags(s *Settings, own *string, repeated *[]string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.StringVar(own, "state-dir", "", "")
	fs.StringArrayVar(repeated, "nas-root", nil, "")
	fs.String(ConfigFlag, "", "")
	AddFlags(fs, s, GroupCache, GroupOSS, GroupS3, GroupHDFS, GroupOutput, GroupMount)
	return fs
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestApplyConfigFile: a YAML file sets flags by their names (table rows
// and a command's own flags, lists for comma-separated and repeatable
// flags); a flag on the command line overrides the file; mount-scope
// options set by the file are mount options of a client's request.
func TestApplyConfigFile(t *testing.T) {
	var s Settings
	var stateDir string
	var roots []string
	fs := configFlags(&s, &stateDir, &roots)
	p := writeConfig(t, `# the node's settings
cache-memory: 4GiB
cache-dir: /var/cache/mlfsd
state-dir: /var/lib/mlfsd/state
nas-root:
  - /mnt/nfs/datasets:ro
  - /mnt/nfs/runs:rw
hdfs-namenodes: [nn1:8020, nn2:8020]
upload-concurrency: 8
no-passthrough: true
uid: 1000
file-mode: "0440"
allow-other: false
`)
	if err := fs.Parse([]string{"--upload-concurrency=2", "--config", p}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyConfigFile(p, fs); err != nil {
		t.Fatal(err)
	}
	if s.Cache.MemoryBytes != 4<<30 || s.Cache.Dir != "/var/cache/mlfsd" || !s.Cache.NoPassthrough {
		t.Errorf("cache settings from the file: %+v", s.Cache)
	}
	if stateDir != "/var/lib/mlfsd/state" || strings.Join(roots, " ") != "/mnt/nfs/datasets:ro /mnt/nfs/runs:rw" {
		t.Errorf("the command's own flags: state-dir %q, nas-root %q", stateDir, roots)
	}
	if strings.Join(s.Backend.HDFS.Namenodes, ",") != "nn1:8020,nn2:8020" {
		t.Errorf("a list for a comma-separated flag: %q", s.Backend.HDFS.Namenodes)
	}
	if s.Output.Concurrency != 2 {
		t.Errorf("upload-concurrency %d: the command line's 2 must override the file's 8", s.Output.Concurrency)
	}
	if s.Access.UID != "1000" || s.Access.FileMode != "0440" || s.Access.AllowOther {
		t.Errorf("access settings from the file: %+v", s.Access)
	}
	opts, err := MountFlags(fs)
	if err == nil {
		t.Errorf("MountFlags: %v, want the node-wide cache-memory of the file refused for a client", opts)
	}
}

// TestApplyConfigFileErrors: an unknown or repeated key, a bad value, a
// value that is a mapping, a flag that is no option (config itself) and a
// file that is not a mapping are errors naming the file and the line.
func TestApplyConfigFileErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"cache-memory: 1GiB\ncache-memroy: 2GiB\n", ":2: unknown key \"cache-memroy\""},
		{"uid: 1\n\nuid: 2\n", ":3: \"uid\" is already set on line 1"},
		{"cache-dir: /x\nupload-concurrency: many\n", ":2: invalid argument \"many\""},
		{"file-mode: 0999\n", ":1: invalid argument \"0999\""},
		{"cache-memory:\n  size: 1GiB\n", ":1: cache-memory: want a value or a list of values"},
		{"cache-memory:\n", ":1: cache-memory: needs a value"},
		{"config: /etc/other.yaml\n", ":1: unknown key \"config\""},
		{"- cache-memory\n", ":1: want a mapping"},
		{"cache-memory: [1\n", "config.yaml"},
	} {
		var s Settings
		var own string
		var roots []string
		fs := configFlags(&s, &own, &roots)
		p := writeConfig(t, tc.text)
		err := ApplyConfigFile(p, fs)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), p) {
			t.Errorf("%q: %v; want an error starting with the file and containing %q", tc.text, err, tc.want)
		}
	}
	var s Settings
	var own string
	var roots []string
	fs := configFlags(&s, &own, &roots)
	if err := ApplyConfigFile(writeConfig(t, "# nothing set\n"), fs); err != nil {
		t.Errorf("an empty file: %v", err)
	}
	if err := ApplyConfigFile(filepath.Join(t.TempDir(), "missing.yaml"), fs); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}
