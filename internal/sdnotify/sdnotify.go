// Package sdnotify speaks the parts of systemd's service protocol the
// daemon uses: sd_notify states on $NOTIFY_SOCKET, file descriptors kept
// for it in the service's file-descriptor store (FDSTORE=1, FDNAME=) and
// given back at its next start ($LISTEN_FDS, $LISTEN_FDNAMES). Written
// here rather than taken from go-systemd, whose SdNotify sends no fds.
package sdnotify

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// listenFdsStart is the first fd systemd passes (SD_LISTEN_FDS_START).
const listenFdsStart = 3

// Notify sends state (lines like READY=1 or FDSTORE=1\nFDNAME=x) to the
// service manager with fds beside it, then waits (up to a minute) until
// the manager has read it (BARRIER=1): a process that exits right after
// would otherwise race the manager, which attributes a message to its
// service by the sender's pid. Without $NOTIFY_SOCKET it does nothing.
func Notify(state string, fds ...int) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if err := send(path, state, fds); err != nil {
		return err
	}
	return barrier(path, time.Minute)
}

// Available says whether the service manager keeps fds for this process:
// systemd (254 and later) sets $FDSTORE to the unit's
// FileDescriptorStoreMax= when it is not 0. Fds sent to a manager without
// a store are closed by it.
func Available() bool {
	n, err := strconv.Atoi(os.Getenv("FDSTORE"))
	return os.Getenv("NOTIFY_SOCKET") != "" && err == nil && n > 0
}

func send(path, state string, fds []int) error {
	// An unconnected datagram socket: Go's net refuses ancillary data on
	// a connected one. A path beginning with @ is in the abstract
	// namespace, which SockaddrUnix knows.
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(s, []byte(state), oob, &unix.SockaddrUnix{Name: path}, 0); err != nil {
		return fmt.Errorf("NOTIFY_SOCKET %s: %w", path, err)
	}
	return nil
}

// barrier is sd_notify_barrier(3): the manager closes the pipe's write end
// sent with BARRIER=1 once it has processed every message before it.
func barrier(path string, timeout time.Duration) error {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	defer unix.Close(p[0])
	err := send(path, "BARRIER=1", []int{p[1]})
	unix.Close(p[1])
	if err != nil {
		return err
	}
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLHUP}}, int(timeout/time.Millisecond))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return err
		case n == 0:
			return errors.New("the service manager did not answer the notify barrier")
		}
		return nil
	}
}

// File is an fd the service manager passed, with its FDNAME.
type File struct {
	Name string
	*os.File
}

// Listen returns the fds the service manager passed this process
// ($LISTEN_FDS, named by $LISTEN_FDNAMES; none unless $LISTEN_PID is this
// process), made close-on-exec, and unsets those variables so that no
// child takes them for its own.
func Listen() ([]File, error) {
	defer func() {
		os.Unsetenv("LISTEN_PID")
		os.Unsetenv("LISTEN_FDS")
		os.Unsetenv("LISTEN_FDNAMES")
	}()
	if pid, err := strconv.Atoi(os.Getenv("LISTEN_PID")); err != nil || pid != os.Getpid() {
		return nil, nil
	}
	n, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	if err != nil || n < 0 {
		return nil, fmt.Errorf("LISTEN_FDS=%q: not a count of fds", os.Getenv("LISTEN_FDS"))
	}
	var names []string
	if v := os.Getenv("LISTEN_FDNAMES"); v != "" {
		names = strings.Split(v, ":")
	}
	files := make([]File, 0, n)
	for i := range n {
		fd := listenFdsStart + i
		unix.CloseOnExec(fd)
		name := "unknown"
		if i < len(names) {
			name = names[i]
		}
		files = append(files, File{Name: name, File: os.NewFile(uintptr(fd), name)})
	}
	return files, nil
}
