package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunAsWritesOutputs: output mounts enforce permissions, so a job run
// with --run-as must own what the store holds, or it could not create its
// model file or checkpoint directories at all.
func TestRunAsWritesOutputs(t *testing.T) {
	tmp := t.TempDir()
	// The job's user must be able to reach its working directory and mounts.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cleanupMounts(t, tmp)
	root := filepath.Join(tmp, "ml")
	store := filepath.Join(tmp, "store")
	spec := writeSpec(t, `name: runas
command: 'echo hi > "$PAI_OUTPUT_MODEL/m.txt" && mkdir "$PAI_OUTPUT_CHECKPOINTS/c1" && id -u > "$PAI_OUTPUT_CHECKPOINTS/c1/uid"'
`)
	code, stdout, stderr := runMlfsd(t, runArgs(t, "--spec", spec, "--root", root, "--output-path", "nas://"+store+"/", "--run-as", "65534")...)
	if code != 0 {
		t.Fatalf("mlfsd run --run-as 65534: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	got, err := os.ReadFile(filepath.Join(store, "model", "m.txt"))
	if err != nil || string(got) != "hi\n" {
		t.Errorf("model/m.txt in the store: %q, %v", got, err)
	}
	uid, err := os.ReadFile(filepath.Join(store, "checkpoints", "c1", "uid"))
	if err != nil || strings.TrimSpace(string(uid)) != "65534" {
		t.Errorf("checkpoints/c1/uid in the store: %q, %v (the job must run as 65534)", uid, err)
	}
	if m := mountsUnder(t, tmp); len(m) > 0 {
		t.Errorf("still mounted: %v", m)
	}
}
