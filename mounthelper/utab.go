package mounthelper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// utabPath is libmount's table of userspace mount options.
const utabPath = "/run/mount/utab"

// RegisterUmount makes umount(8) run umount.fuse.mlfsd for target.
// umount(8) looks a FUSE mount's type up by statfs(2) ("fuse", without the
// subtype, so no helper of ours) unless libmount's utab has an entry for
// the target; an entry with uhelper=mlfsd sends it through mountinfo
// (type fuse.mlfsd) to our helper, and umount(8) drops the entry once the
// helper succeeded. The entry is written the way libmount writes it:
// under its lock file, by replacing the file. Not needed when the options
// carry uhelper= (Options.UHelper: mount(8) then writes the entry itself).
func RegisterUmount(source, target string) error {
	dir := filepath.Dir(utabPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("register with umount(8): %w", err)
	}
	lock, err := os.OpenFile(utabPath+".lock", os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("register with umount(8): %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("register with umount(8): lock %s: %w", lock.Name(), err)
	}
	old, err := os.ReadFile(utabPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("register with umount(8): %w", err)
	}
	var b strings.Builder
	want := "TARGET=" + mangle(target) + " "
	for _, l := range strings.Split(string(old), "\n") {
		if l != "" && !strings.Contains(l, want) { // a stale entry for target goes
			b.WriteString(l + "\n")
		}
	}
	fmt.Fprintf(&b, "SRC=%s TARGET=%s ROOT=/ OPTS=uhelper=mlfsd\n", mangle(source), mangle(target))
	if err := atomicfile.Write(utabPath, []byte(b.String()), 0o644, atomicfile.NoSync); err != nil {
		return fmt.Errorf("register with umount(8): %w", err)
	}
	return nil
}

// mangle escapes what separates fields of a utab line, as libmount does.
func mangle(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
