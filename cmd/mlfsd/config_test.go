package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/node"
)

// TestSystemdConfig: the systemd unit's daemon command line, with the
// shipped deploy/systemd/config.yaml as its --config, parses with the real
// command tree and gives the daemon the file's settings, so a renamed flag
// fails here rather than on a host. In process: nothing starts.
func TestSystemdConfig(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "systemd")
	unit, err := os.ReadFile(filepath.Join(dir, "mlfsd.service"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Environment="MLFSD_DAEMON_ARGS=([^"]*)"$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("mlfsd.service sets no MLFSD_DAEMON_ARGS")
	}
	args := strings.Fields(string(m[1]))
	if len(args) != 2 || args[0] != "--config" || args[1] != "/etc/mlfsd/config.yaml" {
		t.Fatalf("MLFSD_DAEMON_ARGS=%q: want --config /etc/mlfsd/config.yaml", m[1])
	}
	shipped := filepath.Join(dir, "config.yaml")
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	root := newRootCmd(a)
	sub, rest, err := root.Find([]string{"daemon", "--config", shipped})
	if err != nil || sub.Name() != "daemon" {
		t.Fatalf("daemon: %v", err)
	}
	if err := sub.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	if err := node.ApplyConfigFile(shipped, sub.Flags()); err != nil {
		t.Fatalf("the shipped config.yaml: %v", err)
	}
	for flag, want := range map[string]string{"state-dir": "/var/lib/mlfsd/state", "socket": "/run/mlfsd/api.sock", "metrics-listen": "127.0.0.1:9469"} {
		if got := sub.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("--%s %q from config.yaml, want %q", flag, got, want)
		}
	}
	if a.settings.Cache.Dir != "/var/cache/mlfsd" || a.settings.Output.StagingDir != "/var/lib/mlfsd/staging" {
		t.Errorf("settings from config.yaml: cache-dir %q, staging-dir %q", a.settings.Cache.Dir, a.settings.Output.StagingDir)
	}
}

// TestConfigErrorStopsTheCommand: `mlfsd mount --config FILE` with an
// unknown key fails naming FILE:LINE before anything is mounted; a flag
// of the file reaches the command (here a bad --uid, refused too).
func TestConfigErrorStopsTheCommand(t *testing.T) {
	for text, want := range map[string]string{
		"cache-memory: 1GiB\nread-onyl: true\n": `:2: unknown key "read-onyl"`,
		"uid: root\n":                           `:1: invalid argument "root" for "--uid"`,
	} {
		p := filepath.Join(t.TempDir(), "mount.yaml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		mnt := t.TempDir()
		var stderr bytes.Buffer
		a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr}
		root := newRootCmd(a)
		root.SetArgs([]string{"mount", "--config", p, "--read-only", "nas:///nonexistent/", mnt})
		err := root.Execute()
		if err == nil || !strings.HasPrefix(err.Error(), p) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want an error starting with %s and containing %s", text, err, p, want)
		}
	}
}

// TestMountDashO: `mlfsd mount -o` takes an fstab line's options: ro is
// --read-only, the rest the flags of their names; a flag given as a flag
// beats -o, which beats --config, which fills in what neither gave. A bad
// option stops the command naming it. In process: nothing is mounted.
func TestMountDashO(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "mount.yaml")
	if err := os.WriteFile(cfg, []byte("uid: 3000\ngid: 7\nfile-mode: 0400\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	root := newRootCmd(a)
	sub, rest, err := root.Find([]string{"mount", "-o", "ro,allow_other,uid=1000,file_mode=0440,_netdev", "-o", "cache_memory=64MiB",
		"--uid", "2000", "--config", cfg, "nas:///x/", "/mnt/x"})
	if err != nil || sub.Name() != "mount" {
		t.Fatalf("mount: %v", err)
	}
	if err := sub.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	if err := applyMountOptionFlag(sub); err != nil {
		t.Fatal(err)
	}
	if err := node.ApplyConfigFile(cfg, sub.Flags()); err != nil {
		t.Fatal(err)
	}
	if ro := sub.Flags().Lookup("read-only").Value.String(); ro != "true" {
		t.Errorf("-o ro: --read-only %s", ro)
	}
	acc := a.settings.Access
	if acc.UID != "2000" || acc.FileMode != "0440" || acc.GID != "7" || !acc.AllowOther || a.settings.Cache.MemoryBytes != 64<<20 {
		t.Errorf("settings %+v, cache-memory %d: want uid 2000 (the flag), file-mode 0440 (-o), gid 7 (the file), allow-other, 64MiB", acc, a.settings.Cache.MemoryBytes)
	}

	for opts, want := range map[string]string{"ro,uid=alice": "-o uid", "ro,log_file=/x.log": "log_file", "ro,suid": "nosuid"} {
		root := newRootCmd(&app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard})
		root.SetArgs([]string{"mount", "-o", opts, "nas:///nonexistent/", t.TempDir()})
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-o %s: %v; want an error naming %s", opts, err, want)
		}
	}
}
