// Package mounthelper is the mount(8) integration of mlfsd: `mount -t fuse.mlfsd
// -o ro SOURCE TARGET` and fstab lines of type fuse.mlfsd run /sbin/mount.fuse.mlfsd (the helper
// mount(8) looks for first, before the generic mount.fuse), and umount(8)
// runs /sbin/umount.fuse.mlfsd for a mount of that type. Both helpers are
// two-line scripts calling `mlfsd mount-helper` / `mlfsd umount-helper`,
// written by `mlfsd mount-helper --install`.
//
// Without -o daemon=SOCKET the helper starts `mlfsd mount` as a detached
// child, returns once the mount is up (or with the child's error), and
// records the child in the run directory, so that umount.fuse.mlfsd can
// wait for it: the child drains an output after the kernel unmount before
// it exits, and umount returns only then. With -o daemon=SOCKET the node
// daemon mounts, and umount asks it to drain and unmount.
//
// This package holds everything but the command wiring: the mount and
// umount procedures (Helper), option parsing, the helper scripts, the
// mount records, the utab entry that makes umount(8) call our helper, and
// waiting for the serving process.
package mounthelper

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	// MountHelperName is what mount(8) runs for type fuse.mlfsd.
	MountHelperName = "mount.fuse.mlfsd"
	// UmountHelperName is what umount(8) runs for a fuse.mlfsd mount
	// recorded in utab (RegisterUmount).
	UmountHelperName = "umount.fuse.mlfsd"
	// RunDirEnv overrides where mount records are kept (tests).
	RunDirEnv     = "MLFSD_MOUNT_RUN_DIR"
	defaultRunDir = "/run/mlfsd/mounts"
	// helperMarker marks helper scripts written by --install, so that a
	// reinstall replaces them and nothing else.
	helperMarker = "# written by mlfsd mount-helper --install"
)

// Install writes the two helper scripts into dir (e.g. /sbin), each
// calling exe (mlfsd). A script there not written by Install is left alone
// and reported. env lines
// (NAME=value) are set for the helper (tests).
func Install(dir, exe string, env []string) error {
	for name, sub := range map[string]string{MountHelperName: "mount-helper", UmountHelperName: "umount-helper"} {
		p := filepath.Join(dir, name)
		if old, err := os.ReadFile(p); err == nil && !strings.Contains(string(old), helperMarker) {
			return fmt.Errorf("%s exists and was not written by mlfsd; remove it first", p)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "#!/bin/sh\n%s\n", helperMarker)
		for _, e := range env {
			fmt.Fprintf(&b, "export %s\n", shellQuote(e))
		}
		fmt.Fprintf(&b, "exec %s %s \"$@\"\n", shellQuote(exe), sub)
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(b.String()), 0o755); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
