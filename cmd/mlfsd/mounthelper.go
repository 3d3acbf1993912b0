package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mlfsd/mlfsd/mounthelper"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
)

// The mount(8) helpers: see package mounthelper. These commands are what
// /sbin/mount.fuse.mlfsd and /sbin/umount.fuse.mlfsd run.

func newMountHelperCmd(a *app) *cobra.Command {
	var opts []string
	var install string
	var fake, sloppy, noMtab, verbose bool
	var fstype, namespace string
	c := &cobra.Command{
		Use:   "mount-helper SOURCE_URI MOUNTPOINT [-o OPTIONS]",
		Short: "mount(8) helper for type fuse.mlfsd (run as /sbin/mount.fuse.mlfsd)",
		Long: `The helper mount(8) runs for "mount -t fuse.mlfsd" and fstab lines of type
fuse.mlfsd. Install it with:

  mlfsd mount-helper --install /sbin

which writes /sbin/mount.fuse.mlfsd and /sbin/umount.fuse.mlfsd (both call this
binary). Then:

  mount -t fuse.mlfsd -o ro,cache_dir=/var/cache/mlfsd oss://bucket/prefix/ /mnt/x
  # /etc/fstab:
  oss://bucket/prefix/ /mnt/x fuse.mlfsd ro,cache_dir=/var/cache/mlfsd,_netdev 0 0

Options: ro (an input, read-only and cached; without it an output, write-back),
daemon=SOCKET (the node daemon mounts), log_file=PATH, and any mlfsd flag with
'_' for '-' (cache_dir=, cache_memory=, staging_dir=, upload_concurrency=,
oss_endpoint=, oss_credentials_file=, ...). The command returns once the mount
is up; umount drains an output's uploads before it returns.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if install != "" {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if install != "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				return mounthelper.Install(install, exe, nil)
			}
			if fake {
				return nil
			}
			h, err := mounthelper.ParseOptions(opts)
			if err != nil {
				return err
			}
			return a.helperMount(cmd.Context(), args[0], args[1], h)
		},
	}
	f := c.Flags()
	f.StringArrayVarP(&opts, "options", "o", nil, "mount options, comma-separated")
	f.StringVar(&install, "install", "", "write "+mounthelper.MountHelperName+" and "+mounthelper.UmountHelperName+" into this directory (e.g. /sbin) and exit")
	// Flags mount(8) passes to helpers.
	f.BoolVarP(&fake, "fake", "f", false, "do everything but the mount (mount -f)")
	f.BoolVarP(&sloppy, "sloppy", "s", false, "accepted for mount(8)")
	f.BoolVarP(&noMtab, "no-mtab", "n", false, "accepted for mount(8)")
	f.BoolVarP(&verbose, "verbose", "v", false, "accepted for mount(8)")
	f.StringVarP(&fstype, "types", "t", "", "accepted for mount(8) (fuse.mlfsd)")
	f.StringVarP(&namespace, "namespace", "N", "", "not supported: mount in another mount namespace")
	c.PreRunE = func(*cobra.Command, []string) error {
		if namespace != "" {
			return errors.New("-N (mount in another namespace) is not supported by mount.fuse.mlfsd")
		}
		if fstype != "" && fstype != "fuse.mlfsd" && fstype != "mlfsd" {
			return fmt.Errorf("-t %s: this helper mounts fuse.mlfsd only", fstype)
		}
		return nil
	}
	return c
}

func newUmountHelperCmd(a *app) *cobra.Command {
	var lazy, force, noMtab, verbose, readOnly bool
	var fstype string
	c := &cobra.Command{
		Use:    "umount-helper MOUNTPOINT",
		Short:  "umount(8) helper for type fuse.mlfsd (run as /sbin/umount.fuse.mlfsd)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.helperUmount(cmd.Context(), args[0], lazy)
		},
	}
	f := c.Flags()
	f.BoolVarP(&lazy, "lazy", "l", false, "detach now (umount -l); an output still drains in the background")
	f.BoolVarP(&force, "force", "f", false, "accepted for umount(8)")
	f.BoolVarP(&noMtab, "no-mtab", "n", false, "accepted for umount(8)")
	f.BoolVarP(&verbose, "verbose", "v", false, "accepted for umount(8)")
	f.BoolVarP(&readOnly, "read-only", "r", false, "accepted for umount(8)")
	f.StringVarP(&fstype, "types", "t", "", "accepted for umount(8)")
	return c
}

// helperMount mounts source at target as -o asked, returning once the
// mount is up.
func (a *app) helperMount(ctx context.Context, source, target string, h mounthelper.Options) error {
	abs, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	if h.Daemon != "" {
		info, err := api.NewClient(h.Daemon).Mount(ctx, node.MountRequest{URI: source, Target: abs, ReadOnly: h.ReadOnly, Options: h.MountOptions})
		if err != nil {
			return err
		}
		if err := mounthelper.WriteRecord(mounthelper.Record{Target: info.Target, URI: info.URI, Daemon: h.Daemon}); err != nil {
			return err
		}
		return registerUmount(source, info.Target, h)
	}

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{}
	if a.logFormat != "" {
		args = append(args, "--log-format="+a.logFormat)
	}
	args = append(args, "mount")
	if h.ReadOnly {
		args = append(args, "--read-only")
	}
	args = append(args, h.Flags...)
	args = append(args, "--", source, abs)
	logFile := h.LogFile
	if logFile == "" {
		logFile = filepath.Join(filepath.Dir(mounthelper.RunDir()), "log", strings.TrimSuffix(filepath.Base(mounthelper.RecordPath(abs)), ".json")+".log")
	}
	if err := os.MkdirAll(filepath.Dir(logFile), 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("-o log_file: %w", err)
	}
	defer logf.Close()
	start, _ := logf.Seek(0, 2)
	child := exec.Command(exe, args...)
	child.Env = os.Environ()
	child.Stdout, child.Stderr = logf, logf
	// Its own session: mount(8)'s terminal going away must not signal it.
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	// Ready when the kernel shows the mount; the child exiting first
	// means it failed, and its log says why.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		mounted, err := mounthelper.MountedAs(abs, "fuse.mlfsd")
		if err != nil {
			return err
		}
		if mounted {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("mlfsd mount %s %s failed (%v): %s", source, abs, err, logTail(logFile, start))
		case <-ctx.Done():
			child.Process.Kill()
			return ctx.Err()
		case <-tick.C:
		}
	}
	if err := mounthelper.WriteRecord(mounthelper.Record{Target: abs, URI: source, PID: child.Process.Pid}); err != nil {
		return err
	}
	if err := registerUmount(source, abs, h); err != nil {
		return err
	}
	// The child runs on; this process must not wait for it.
	return child.Process.Release()
}

// registerUmount makes umount(8) call our helper for target, unless
// mount(8) records the mount itself (uhelper= given).
func registerUmount(source, target string, h mounthelper.Options) error {
	if h.UHelper {
		return nil
	}
	return mounthelper.RegisterUmount(source, target)
}

// logTail returns what the child logged since offset, trimmed.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log)"
	}
	defer f.Close()
	f.Seek(offset, 0)
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// helperUmount unmounts target, draining an output first: through the
// daemon that mounted it, or by unmounting and waiting for the serving
// process, which drains after the kernel unmount and then exits.
func (a *app) helperUmount(ctx context.Context, target string, lazy bool) error {
	abs, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	rec, rerr := mounthelper.ReadRecord(abs)
	if rerr == nil && rec.Daemon != "" {
		c := api.NewClient(rec.Daemon)
		if err := c.Unmount(ctx, abs); err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != 404 {
				return err
			}
			// The daemon does not know it (any more): plain unmount.
			if err := mounthelper.Unmount(abs, lazy); err != nil {
				return err
			}
		}
		mounthelper.RemoveRecord(abs)
		return nil
	}
	var srv *mounthelper.Server
	if rerr == nil {
		if s, ok := mounthelper.OpenServer(rec.PID, abs); ok {
			srv = s
			defer srv.Close()
		}
	}
	if err := mounthelper.Unmount(abs, lazy); err != nil {
		return err
	}
	if srv != nil {
		a.log.Info("waiting for the mlfsd serving the mount to upload what was written", "mountpoint", abs, "pid", srv.PID)
		if err := srv.Wait(ctx); err != nil {
			return fmt.Errorf("unmounted %s, but waiting for its mlfsd (pid %d) to finish uploading: %w", abs, srv.PID, err)
		}
	}
	mounthelper.RemoveRecord(abs)
	return nil
}
