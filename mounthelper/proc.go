package mounthelper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/fs/mountinfo"
)

// MountedAs reports whether path is a mountpoint of type fstype.
func MountedAs(path, fstype string) (bool, error) {
	m, ok, err := mountinfo.Lookup(path)
	return ok && m.FSType == fstype, err
}

// servesTarget reports whether pid is still the `mlfsd mount` of target
// (not a stale record whose pid was reused).
func servesTarget(pid int, target string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
	return len(args) > 2 && args[len(args)-1] == target && hasArg(args, "mount")
}

func hasArg(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// Unmount unmounts p (lazily: detached at once).
func Unmount(p string, lazy bool) error {
	flags := 0
	if lazy {
		flags = unix.MNT_DETACH
	}
	if err := unix.Unmount(p, flags); err != nil {
		return fmt.Errorf("umount %s: %w", p, err)
	}
	return nil
}

// Server is the `mlfsd mount` process serving a mount, held by a pidfd so
// that waiting for it cannot wait for another process reusing its pid.
type Server struct {
	PID   int
	pidfd int
}

// OpenServer returns the process pid if it still serves target; ok is
// false for a stale record (the process is gone or its pid reused).
func OpenServer(pid int, target string) (s *Server, ok bool) {
	if pid <= 0 || !servesTarget(pid, target) {
		return nil, false
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, false
	}
	return &Server{PID: pid, pidfd: fd}, true
}

// Close releases the pidfd.
func (s *Server) Close() { unix.Close(s.pidfd) }

// Wait blocks until the process exits or ctx is done.
func (s *Server) Wait(ctx context.Context) error {
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(s.pidfd), Events: unix.POLLIN}}, 1000)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		if n > 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
