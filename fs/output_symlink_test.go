package fs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutputStoreLinksDoNotLeaveTheChannel: links already in a NAS output
// that lead out of it (an absolute target, a relative one climbing above
// the channel) are not followed: writing, reading or stat'ing through
// them fails with EACCES (in another process), and the files they point
// at are untouched. The links themselves can be listed, lstat'ed and
// removed; a link inside the channel is followed; a link the job makes
// through the mount is its own and followed, wherever it points. Before,
// the kernel followed the planted links, and "echo >> link" appended to a
// file of the host and created one beside the mountpoint.
func TestOutputStoreLinksDoNotLeaveTheChannel(t *testing.T) {
	top := t.TempDir()
	back := filepath.Join(top, "nas", "out")
	must(t, os.MkdirAll(filepath.Join(back, "sub"), 0o755))
	outside := filepath.Join(top, "outside")
	must(t, os.WriteFile(outside, []byte("host file\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(back, "f"), []byte("inside\n"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(back, "abs")))
	must(t, os.Symlink("../escape", filepath.Join(back, "rel")))
	must(t, os.Symlink("../../escape", filepath.Join(back, "sub", "rel")))
	must(t, os.Symlink("../f", filepath.Join(back, "sub", "inside")))
	must(t, os.Symlink("sub/../f", filepath.Join(back, "inside2")))

	m := testOutputMount(t, newNAS(t, back), t.TempDir(), nil)
	p := func(n string) string { return filepath.Join(m.mnt, n) }
	sh := func(script string) (string, error) {
		out, err := exec.Command("sh", "-c", script).CombinedOutput()
		return string(out), err
	}
	for _, n := range []string{"abs", "rel", "sub/rel"} {
		for _, op := range []string{"echo planted >> ", "echo planted > ", "cat ", "stat -L "} {
			out, err := sh(op + p(n))
			if err == nil || !strings.Contains(out, "Permission denied") {
				t.Errorf("%s%s: %v, %q; want permission denied", op, n, err, out)
			}
		}
		if out, err := sh("stat -c %F " + p(n)); err != nil || out != "symbolic link\n" {
			t.Errorf("lstat of %s: %v %q", n, err, out)
		}
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "host file\n" {
		t.Errorf("the file outside the channel: %q, %v", b, err)
	}
	for _, f := range []string{filepath.Join(filepath.Dir(m.mnt), "escape"), filepath.Join(top, "nas", "escape")} {
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			t.Errorf("%s exists after writes through the links: %v", f, err)
		}
	}
	for _, n := range []string{"sub/inside", "inside2"} {
		if out, err := sh("cat " + p(n)); err != nil || out != "inside\n" {
			t.Errorf("cat %s (a link inside the channel): %v, %q", n, err, out)
		}
	}
	// The job replaces a planted link with its own, and removes another.
	own := filepath.Join(top, "job-chose-this")
	if out, err := sh("rm " + p("abs") + " && ln -s " + own + " " + p("abs") + " && echo mine > " + p("abs") + " && rm " + p("rel")); err != nil {
		t.Fatalf("replacing and removing planted links: %v %s", err, out)
	}
	if b, err := os.ReadFile(own); err != nil || string(b) != "mine\n" {
		t.Errorf("through the job's own link: %q, %v", b, err)
	}
	m.close(t)
	if target, err := os.Readlink(filepath.Join(back, "abs")); err != nil || target != own {
		t.Errorf("abs in the store: %q, %v; want the job's link to %s", target, err, own)
	}
	if _, err := os.Lstat(filepath.Join(back, "rel")); !os.IsNotExist(err) {
		t.Errorf("rel in the store after rm: %v", err)
	}
}
