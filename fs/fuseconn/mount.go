// Package fuseconn is the connection layer of mlfsd's mounts: it owns
// the /dev/fuse connection and everything that is the same for every
// tree. It mounts (directMount, so that it keeps the fd), puts one
// decorator on go-fuse's bridge (the freeze gate, interrupt filtering,
// request observation, lookup counting, open handles: rawfs.go), and
// hands a live connection to another process and takes one over
// (Freeze, Snapshot, Adopt, Serve: handover.go, with the INIT codec in
// init.go). The trees (package fs) know nothing of it but the Tree
// interface they implement and the inode numbers they take from Inodes.
package fuseconn

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// MountOptions are the options common to every mlfsd mount.
type MountOptions struct {
	// FSName is shown as the source in /proc/mounts (for example the URI).
	FSName string
	// ReadOnly mounts with MS_RDONLY, so the kernel refuses writes before
	// they reach us.
	ReadOnly bool
	// Debug logs every FUSE request (very verbose).
	Debug bool
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger

	// ReadAheadKB, when set, is written to the mount's backing-device
	// read_ahead_kb. FUSE mounts start at the kernel default (128 KiB); a
	// deep readahead lets the kernel send large reads ahead of a sequential
	// reader, which roughly halves the daemon's CPU per byte on cold reads.
	ReadAheadKB int

	// EntryTimeout, AttrTimeout and NegativeTimeout tell the kernel how long
	// it may cache names, attributes and failed lookups. Zero values take
	// the defaults of the tree being mounted.
	EntryTimeout, AttrTimeout, NegativeTimeout time.Duration

	// Observe, when set, is told of every request answered (metrics).
	Observe Observer

	// DefaultPermissions makes the kernel check every access against the
	// mode, owner and group the tree reports (mount option
	// default_permissions); without it, anyone allowed on the mount can do
	// anything the daemon can.
	DefaultPermissions bool
}

// Tuning measured to matter for training I/O (see DESIGN.md): 1 MiB requests
// and a deep background queue for parallel prefetch.
const (
	maxWrite      = 1 << 20
	maxBackground = 64
)

// Server is a live FUSE mount and the server answering it.
type Server struct {
	server     *fuse.Server
	mountpoint string
	log        *slog.Logger

	// For a handover (handover.go).
	fd       int    // the /dev/fuse fd the server reads; -1: mounted by fusermount
	rfs      *rawFS // the outermost RawFileSystem
	root     *gofs.Inode
	tree     Tree // nil: the tree's node IDs cannot be given again
	fuseOpts fuse.MountOptions
}

// CheckMountpoint refuses a mountpoint we should not mount on: missing, not
// a directory, not empty, or a stale mount left by a dead daemon.
func CheckMountpoint(path string) error {
	// statfs is never answered from the kernel's attribute cache, so unlike
	// stat it sees a dead FUSE daemon even when the root's attributes are
	// cached (input mounts cache them for an hour).
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); errors.Is(err, syscall.ENOTCONN) {
		return staleMount(path)
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, syscall.ENOTCONN):
		return staleMount(path)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("mountpoint %s does not exist; create it first", path)
	case err != nil:
		return fmt.Errorf("mountpoint %s: %w", path, err)
	case !st.IsDir():
		return fmt.Errorf("mountpoint %s is not a directory", path)
	}
	if mounted, err := isMountpoint(path); err != nil {
		return fmt.Errorf("mountpoint %s: %w", path, err)
	} else if mounted {
		return fmt.Errorf("mountpoint %s is already a mount point; unmount it first", path)
	}
	d, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("mountpoint %s: %w", path, err)
	}
	defer d.Close()
	if names, err := d.Readdirnames(1); err != nil && err != io.EOF {
		return fmt.Errorf("mountpoint %s: %w", path, err)
	} else if len(names) > 0 {
		return fmt.Errorf("mountpoint %s is not empty (it holds %q); mounting would hide its contents", path, names[0])
	}
	return nil
}

// staleMount is the error for a mountpoint whose FUSE daemon died.
func staleMount(path string) error {
	return fmt.Errorf("mountpoint %s is a stale FUSE mount (its daemon died); run `umount -l %s` first", path, path)
}

// isMountpoint compares the mount ids of path and its parent (statx
// STATX_MNT_ID), which also catches bind mounts on the same device.
func isMountpoint(path string) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	if abs == "/" {
		return true, nil
	}
	var a, b unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, abs, 0, unix.STATX_MNT_ID, &a); err != nil {
		return false, err
	}
	if err := unix.Statx(unix.AT_FDCWD, filepath.Dir(abs), 0, unix.STATX_MNT_ID, &b); err != nil {
		return false, err
	}
	if a.Mask&unix.STATX_MNT_ID != 0 && b.Mask&unix.STATX_MNT_ID != 0 {
		return a.Mnt_id != b.Mnt_id, nil
	}
	return a.Dev_major != b.Dev_major || a.Dev_minor != b.Dev_minor, nil
}

// Mount checks mountpoint and mounts root there, serving requests in the
// background until Unmount. Such a mount cannot be handed over (its
// tree's node IDs cannot be given again); MountTree's can.
func Mount(mountpoint string, root gofs.InodeEmbedder, opt MountOptions) (*Server, error) {
	return mount(mountpoint, root, nil, opt)
}

// MountTree checks mountpoint and mounts tree there, serving requests in
// the background until Unmount; the mount can be handed over.
func MountTree(mountpoint string, tree Tree, opt MountOptions) (*Server, error) {
	return mount(mountpoint, tree.Root(), tree, opt)
}

func logOrDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return log
}

// fuseOptions are the go-fuse mount options of a mount.
func fuseOptions(opt MountOptions) fuse.MountOptions {
	fsname := opt.FSName
	if fsname == "" {
		fsname = "mlfsd"
	}
	mo := fuse.MountOptions{
		FsName:        strings.ReplaceAll(fsname, ",", "%2C"), // ',' would split the mount options
		Name:          "mlfsd",
		DirectMount:   true,
		MaxWrite:      maxWrite,
		MaxReadAhead:  maxWrite,
		MaxBackground: maxBackground,
		AllowOther:    os.Geteuid() == 0, // containers run jobs as other users
		Debug:         opt.Debug,
		// Extended attributes are not part of any backend's model.
		DisableXAttrs: true,
	}
	if !opt.ReadOnly {
		// open(O_TRUNC) arrives as one OPEN with O_TRUNC. Without this the
		// kernel sends an OPEN and then a SETATTR(size 0) carrying no file
		// handle, which we could only serve as truncate(2) on the path, a
		// complete change that publishes an empty file: a checkpoint being
		// rewritten would replace the last good one before its close.
		mo.ExtraCapabilities |= fuse.CAP_ATOMIC_O_TRUNC
	}
	if opt.DefaultPermissions {
		mo.Options = append(mo.Options, "default_permissions")
	}
	if opt.ReadOnly {
		mo.DirectMountFlags = syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV
		mo.Options = append(mo.Options, "ro") // for the fusermount fallback
	}
	return mo
}

// newRequestPath is the request path of a mount: go-fuse's bridge over
// root under the one decorator (rawFS). Its interrupt filter is to be
// told the fd the server reads.
func newRequestPath(root gofs.InodeEmbedder, opt MountOptions) (fuse.MountOptions, *rawFS) {
	mo := fuseOptions(opt)
	entry, attr, neg := opt.EntryTimeout, opt.AttrTimeout, opt.NegativeTimeout
	bridge := gofs.NewNodeFS(root, &gofs.Options{
		MountOptions:    mo,
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &neg,
		// A tree that has the kernel check permissions reports exact
		// modes: 0000 stays 0000 instead of go-fuse's 0644/0755.
		NullPermissions: opt.DefaultPermissions,
		// The kernel's node ID is the inode number the tree picks, so
		// that another process can give the same IDs (handover.go).
		ExternalNodeID: true,
	})
	return mo, newRawFS(bridge, opt.Observe)
}

func mount(mountpoint string, root gofs.InodeEmbedder, tree Tree, opt MountOptions) (*Server, error) {
	if err := CheckMountpoint(mountpoint); err != nil {
		return nil, err
	}
	log := logOrDiscard(opt.Log)
	mo, rfs := newRequestPath(root, opt)
	// Mount ourselves to keep the /dev/fuse fd (a handover passes it on),
	// and give it to go-fuse as its magic /dev/fd/N mountpoint; where we
	// may not mount (not root), go-fuse goes through fusermount.
	fd, err := directMount(mountpoint, &mo)
	var server *fuse.Server
	if err != nil {
		log.Debug("direct mount failed; mounting through fusermount (such a mount cannot be handed over)", "mountpoint", mountpoint, "err", err)
		fd = -1
		server, err = fuse.NewServer(rfs, mountpoint, &mo)
	} else {
		rfs.intr.setConn(fd)
		mo2 := mo
		mo2.DirectMount = false
		server, err = fuse.NewServer(rfs, fmt.Sprintf("/dev/fd/%d", fd), &mo2)
		if err != nil {
			// go-fuse closed the fd; the mount must not stay behind.
			syscall.Unmount(mountpoint, syscall.MNT_DETACH)
		}
	}
	if err != nil && fd < 0 && os.Geteuid() != 0 {
		return nil, fmt.Errorf("mount %s on %s: %w", mo.FsName, mountpoint, &NeedRootError{Err: err})
	}
	if err != nil {
		return nil, fmt.Errorf("mount %s on %s: %w", mo.FsName, mountpoint, err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, fmt.Errorf("mount %s on %s: %w", mo.FsName, mountpoint, err)
	}
	if fd >= 0 {
		if err := pollHack(mountpoint); err != nil {
			syscall.Unmount(mountpoint, syscall.MNT_DETACH)
			return nil, fmt.Errorf("mount %s on %s: first access: %w", mo.FsName, mountpoint, err)
		}
	}
	if opt.ReadAheadKB > 0 {
		if err := setReadAhead(mountpoint, opt.ReadAheadKB); err != nil {
			// A tuning, not a requirement: the mount works without it.
			log.Warn("could not set readahead", "mountpoint", mountpoint, "err", err)
		}
	}
	return &Server{server: server, mountpoint: mountpoint, log: log, fd: fd, rfs: rfs,
		root: root.EmbeddedInode(), tree: tree, fuseOpts: mo}, nil
}

// setReadAhead writes kb to the read_ahead_kb of the mount's bdi.
func setReadAhead(mountpoint string, kb int) error {
	p, err := readAheadPath(mountpoint)
	if err != nil {
		return err
	}
	return os.WriteFile(p, []byte(fmt.Sprintf("%d\n", kb)), 0o644)
}

// readAheadPath is the sysfs file of the mount's bdi readahead; sysfs names
// the bdi after the mount's device number.
func readAheadPath(mountpoint string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// ReadAheadKB returns the read_ahead_kb in force on the mount.
func (m *Server) ReadAheadKB() (int, error) {
	p, err := readAheadPath(m.mountpoint)
	if err != nil {
		return 0, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	var kb int
	_, err = fmt.Sscanf(string(data), "%d", &kb)
	return kb, err
}

// Mountpoint returns where the mount is.
func (m *Server) Mountpoint() string { return m.mountpoint }

// Unmount detaches the mount. A busy mount (a process still has a file open
// or its cwd inside) is retried for a few seconds, then detached lazily so
// no stale mount is left behind.
func (m *Server) Unmount() error {
	var err error
	for i := 0; i < 20; i++ {
		if m.fd >= 0 {
			// go-fuse does not unmount its magic /dev/fd/N mountpoints.
			if err = syscall.Unmount(m.mountpoint, 0); err == nil {
				m.server.Wait()
				return nil
			}
		} else if err = m.server.Unmount(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.log.Warn("mount busy; detaching lazily", "mountpoint", m.mountpoint, "err", err)
	if lerr := syscall.Unmount(m.mountpoint, syscall.MNT_DETACH); lerr != nil {
		return fmt.Errorf("unmount %s: %v (lazy unmount: %v)", m.mountpoint, err, lerr)
	}
	m.server.Wait()
	return nil
}

// Wait blocks until the mount is gone (by Unmount or externally).
func (m *Server) Wait() { m.server.Wait() }

// NeedRootError is a mount refused to a user who is not root: the direct
// mount needs CAP_SYS_ADMIN, and the fusermount3 fallback failed too (not
// installed, or not allowed).
type NeedRootError struct{ Err error }

// Error says what is needed before the cause (often only "fusermount
// exited with code 256").
func (e *NeedRootError) Error() string {
	return fmt.Sprintf("FUSE mounts need root: run mlfsd as root (e.g. with sudo), or as a user that fusermount3 may mount for (package fuse3 installed, /dev/fuse readable and writable by you); as uid %d: %s", os.Geteuid(), strings.TrimSpace(e.Err.Error()))
}

// Unwrap returns the fallback's error.
func (e *NeedRootError) Unwrap() error { return e.Err }

// directMount mounts a FUSE filesystem at mountpoint as go-fuse's
// DirectMount does, but keeps the /dev/fuse fd for the caller (go-fuse
// hides it, and a handover must pass it on).
func directMount(mountpoint string, mo *fuse.MountOptions) (int, error) {
	source := mo.FsName
	if source == "" {
		source = mo.Name
	}
	var flags uintptr = syscall.MS_NOSUID | syscall.MS_NODEV
	if mo.DirectMountFlags != 0 {
		flags = mo.DirectMountFlags
	}
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err != nil {
		return -1, err
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	r := []string{
		fmt.Sprintf("fd=%d", fd),
		fmt.Sprintf("rootmode=%o", st.Mode&syscall.S_IFMT),
		fmt.Sprintf("user_id=%d", os.Geteuid()),
		fmt.Sprintf("group_id=%d", os.Getegid()),
		fmt.Sprintf("max_read=%d", mo.MaxWrite),
	}
	for _, o := range mo.Options {
		switch o {
		case "nodev":
			flags |= syscall.MS_NODEV
		case "nosuid":
			flags |= syscall.MS_NOSUID
		case "noexec":
			flags |= syscall.MS_NOEXEC
		default:
			r = append(r, o)
		}
	}
	if mo.AllowOther {
		r = append(r, "allow_other")
	}
	if err := unix.Mount(source, mountpoint, "fuse."+mo.Name, flags, strings.Join(r, ",")); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// pollHack does what go-fuse's WaitMount does for mounts it made itself:
// an open and a poll of its magic file, so that the kernel learns at once
// that POLL is not supported (go-fuse answers it), instead of a Go
// program's netpoller calling into its own mount later.
func pollHack(mountpoint string) error {
	fd, err := unix.Open(path.Join(mountpoint, ".go-fuse-epoll-hack"), unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	return unix.Close(fd)
}
