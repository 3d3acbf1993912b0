package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/mlfsd/mlfsd/mounthelper"
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
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			return mounthelper.Helper{Exe: exe, LogFormat: a.logFormat, Log: a.log}.Mount(cmd.Context(), args[0], args[1], h)
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
			return mounthelper.Helper{Log: a.log}.Umount(cmd.Context(), args[0], lazy)
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
