package fs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	mfs "github.com/mlfsd/mlfsd/fs"
)

// TestInputNASPermissions: a NAS input shows the owners, groups and modes
// the NAS has, and the kernel enforces them (default_permissions), as on
// output mounts. Another local user (65534, in a subprocess) cannot read a
// 0600 file of root's (an /etc/shadow) nor list or enter a 0700 directory;
// it reads what is readable to others and its own 0600 file. Before, every
// file showed as 0444 and every directory as 0555, owned by root, and
// uid 65534 read the 0600 file.
func TestInputNASPermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (FUSE mounts with allow_other, and a subprocess as another user)")
	}
	src := t.TempDir()
	p := func(n string) string { return filepath.Join(src, n) }
	must(t, os.Chmod(src, 0o755))
	must(t, os.WriteFile(p("shadow"), []byte("root:secret"), 0o600))
	must(t, os.WriteFile(p("public"), []byte("public data"), 0o644))
	must(t, os.WriteFile(p("groupread"), []byte("group data"), 0o640))
	must(t, os.Chown(p("groupread"), 0, 65533))
	must(t, os.WriteFile(p("mine"), []byte("nobody's"), 0o600))
	must(t, os.Chown(p("mine"), 65534, 65534))
	must(t, os.WriteFile(p("run.sh"), []byte("#!/bin/sh\n"), 0o750))
	must(t, os.Mkdir(p("private"), 0o700))
	must(t, os.WriteFile(p("private/f"), []byte("f"), 0o644))
	must(t, os.Mkdir(p("shared"), 0o755))
	must(t, os.Chmod(p("shared"), 0o755))
	must(t, os.WriteFile(p("shared/f"), []byte("shared"), 0o644))

	mnt := testMount(t, newNAS(t, src), mfs.InputOptions{})
	// t.TempDir makes 0700 directories: let 65534 reach the mount.
	for d := filepath.Dir(mnt); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		must(t, os.Chmod(d, 0o755))
	}
	m := func(n string) string { return filepath.Join(mnt, n) }

	for _, n := range []string{"", "shadow", "public", "groupread", "mine", "run.sh", "private", "private/f", "shared", "shared/f"} {
		want, got := statT(t, p(n)), statT(t, m(n))
		if got.Mode != want.Mode || got.Uid != want.Uid || got.Gid != want.Gid {
			t.Errorf("%q: mode %o owner %d:%d in the mount, %o %d:%d on the NAS", n, got.Mode, got.Uid, got.Gid, want.Mode, want.Uid, want.Gid)
		}
	}

	mustFail := func(what, name string, args ...string) {
		t.Helper()
		out, err := asNobody(t, name, args...)
		if err == nil {
			t.Errorf("%s as 65534 succeeded: %q", what, out)
		} else if !strings.Contains(out, "Permission denied") {
			t.Errorf("%s as 65534: %v, output %q; want permission denied", what, err, out)
		}
	}
	mustFail("reading root's 0600 file", "cat", m("shadow"))
	mustFail("reading a 0640 file of another group", "cat", m("groupread"))
	mustFail("listing a 0700 directory", "ls", m("private"))
	mustFail("reading in a 0700 directory", "cat", m("private/f"))
	mustFail("running a 0750 script of another user", "sh", "-c", m("run.sh"))
	for n, want := range map[string]string{"public": "public data", "mine": "nobody's", "shared/f": "shared"} {
		if out, err := asNobody(t, "cat", m(n)); err != nil || out != want {
			t.Errorf("reading %s as 65534: %v, %q; want %q", n, err, out, want)
		}
	}
	// Root reads everything, as on the NAS.
	if b, err := os.ReadFile(m("shadow")); err != nil || string(b) != "root:secret" {
		t.Errorf("reading shadow as root: %q, %v", b, err)
	}
}

// TestInputObjectStoreModes: a store that keeps no owners (here a NAS
// backend stripped of them, as OSS, S3 and HDFS inputs are) shows what
// inputs always showed: files 0444 (plus the store's execute bits),
// directories 0555, owned by root, readable by everyone.
func TestInputObjectStoreModes(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "secret"), []byte("s"), 0o600))
	must(t, os.Mkdir(filepath.Join(src, "d"), 0o700))
	mnt := testMount(t, unowned{newNAS(t, src)}, mfs.InputOptions{})
	for n, want := range map[string]uint32{"secret": syscall.S_IFREG | 0o444, "d": syscall.S_IFDIR | 0o555} {
		if st := statT(t, filepath.Join(mnt, n)); st.Mode != want || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s: mode %o owner %d:%d, want %o 0:0", n, st.Mode, st.Uid, st.Gid, want)
		}
	}
}

// unowned hides the owners a NAS backend reports, as a store without them.
type unowned struct{ backends.Backend }

func (u unowned) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	i, err := u.Backend.Stat(ctx, key)
	i.Owned, i.UID, i.GID = false, 0, 0
	return i, err
}

func (u unowned) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	p, err := u.Backend.List(ctx, opt)
	for i := range p.Objects {
		p.Objects[i].Owned, p.Objects[i].UID, p.Objects[i].GID = false, 0, 0
	}
	return p, err
}
