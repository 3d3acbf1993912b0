package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmulatorKeys: the emulator's key pair comes from the flags, else
// OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET; both unset means the demo
// pair (empty here); half a pair is refused naming what is missing.
func TestEmulatorKeys(t *testing.T) {
	t.Setenv("OSS_ACCESS_KEY_ID", "")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "")
	if id, secret, err := emulatorKeys("", ""); err != nil || id != "" || secret != "" {
		t.Fatalf("nothing set: %q %q %v, want the default (empty) pair", id, secret, err)
	}
	t.Setenv("OSS_ACCESS_KEY_ID", "env-id")
	if _, _, err := emulatorKeys("", ""); err == nil || !strings.Contains(err.Error(), "OSS_ACCESS_KEY_SECRET") {
		t.Fatalf("id without secret: %v", err)
	}
	t.Setenv("OSS_ACCESS_KEY_SECRET", "env-secret")
	if id, secret, err := emulatorKeys("", ""); err != nil || id != "env-id" || secret != "env-secret" {
		t.Fatalf("from the environment: %q %q %v", id, secret, err)
	}
	f := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(f, []byte("file-secret\n"), 0o600)
	if id, secret, err := emulatorKeys("flag-id", f); err != nil || id != "flag-id" || secret != "file-secret" {
		t.Fatalf("from the flags: %q %q %v", id, secret, err)
	}
	os.WriteFile(f, nil, 0o600)
	if _, _, err := emulatorKeys("flag-id", f); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty secret file: %v", err)
	}
	t.Setenv("OSS_ACCESS_KEY_ID", "")
	if _, _, err := emulatorKeys("", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing secret file: no error")
	}
}
