package job

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// The command runs in a process group of its own, so a forwarded signal
// reaches every process of the job (`sh -c 'python train.py'` has sh wait
// for python: signalling sh alone would orphan python, still writing to
// the outputs while they are drained and unmounted).
//
// When mlfsd runs in the foreground of a terminal, the job's group is made
// the terminal's foreground group while it runs, as a shell does: Ctrl-C
// then reaches the job directly, and the job can read the terminal
// (a debugger, say) without being stopped by SIGTTIN.

// foregroundTTY returns the fd of stdin when it is the controlling terminal
// and this process's group is in its foreground.
func foregroundTTY(stdin any) (fd int, ok bool) {
	f, isFile := stdin.(*os.File)
	if !isFile {
		return 0, false
	}
	fd = int(f.Fd())
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pgrp != unix.Getpgrp() {
		return 0, false
	}
	return fd, true
}

// processGroup returns the SysProcAttr that starts the command in a new
// process group, in the terminal's foreground when fg.
func processGroup(fg bool) *syscall.SysProcAttr {
	if fg {
		// Ctty is the terminal's fd in the child: its stdin.
		return &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	}
	return &syscall.SysProcAttr{Setpgid: true}
}

// reclaimTerminal puts this process's group back in the terminal's
// foreground once the command is done. A background process doing so
// would be stopped by SIGTTOU, hence the brief ignore.
func reclaimTerminal(fd int) error {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	return unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpgrp())
}

// signalGroup sends sig to every process of the group led by pid.
func signalGroup(pid int, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return nil
	}
	return syscall.Kill(-pid, s)
}
