package node

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"

	"golang.org/x/sys/unix"

	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/fs/mountinfo"
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

// DetachStale lazily unmounts target when it is a stale mlfsd mount (its
// daemon died), and reports whether it did; anything else at target, a
// stale mount of another filesystem included, is left as it is for the
// caller's own checks to refuse.
func DetachStale(target string, log *slog.Logger) (bool, error) {
	if !isStale(target) {
		return false, nil
	}
	if t, ok := mountType(target); !ok || t != fuseType {
		return false, nil
	}
	log.Warn("mountpoint is a stale mlfsd mount (its daemon died); detaching it", "mountpoint", target)
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
		return false, fmt.Errorf("lazy unmount of the stale mlfsd mount at %s: %w", target, err)
	}
	return true, nil
}

// isStale reports whether target is a FUSE mount whose daemon is gone.
func isStale(target string) bool {
	var sfs unix.Statfs_t
	return errors.Is(unix.Statfs(target, &sfs), syscall.ENOTCONN)
}

// mountType returns the filesystem type of the mount on top at target.
func mountType(target string) (string, bool) {
	m, ok, err := mountinfo.Lookup(target)
	return m.FSType, ok && err == nil
}
