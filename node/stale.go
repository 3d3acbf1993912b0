package node

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	mfs "github.com/mlfsd/mlfsd/fs"
)

// fuseType is the filesystem type mlfsd mounts show in /proc/self/mountinfo
// (go-fuse's MountOptions.Name "mlfsd").
const fuseType = "fuse.mlfsd"

// PrepareMountpoint checks target (fs.CheckMountpoint). A stale mount that
// an mlfsd left behind (its daemon died) is detached first, so that the
// mount serves the same path again; a stale mount of any other
// filesystem is refused as before. Mount calls it; it is exported for
// callers that check mountpoints before mounting (a job's layout).
func PrepareMountpoint(target string, log *slog.Logger) error {
	err := mfs.CheckMountpoint(target)
	if err == nil || !isStale(target) {
		return err
	}
	fstype, ok := mountType(target)
	if !ok || fstype != fuseType {
		return err
	}
	log.Warn("mountpoint is a stale mlfsd mount (its daemon died); detaching it and mounting again", "mountpoint", target)
	if uerr := unix.Unmount(target, unix.MNT_DETACH); uerr != nil {
		return fmt.Errorf("%w (lazy unmount of the stale mlfsd mount failed: %v)", err, uerr)
	}
	return mfs.CheckMountpoint(target)
}

// isStale reports whether target is a FUSE mount whose daemon is gone.
func isStale(target string) bool {
	var sfs unix.Statfs_t
	return errors.Is(unix.Statfs(target, &sfs), syscall.ENOTCONN)
}

// mountType returns the filesystem type of the mount at exactly target,
// from /proc/self/mountinfo (the last such mount: the one on top).
func mountType(target string) (string, bool) {
	abs, err := filepath.Abs(target)
	if err != nil {
		return "", false
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	defer f.Close()
	var fstype string
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || unescapeMountinfo(fields[4]) != abs {
			continue
		}
		for i := 6; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				fstype, found = fields[i+1], true
				break
			}
		}
	}
	return fstype, found
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of
// /proc/self/mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
