package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/mlfsd/mlfsd/internal/ready"
)

// serveForeignFUSE mounts an empty FUSE filesystem that is not mlfsd's
// (type fuse.otherfs) at mnt and serves it until killed. Like mlfsd
// mount, it says so in the file named by --ready-file among its arguments
// (startDaemon adds one).
func serveForeignFUSE(mnt string) int {
	srv, err := gofs.Mount(mnt, &gofs.Inode{}, &gofs.Options{MountOptions: fuse.MountOptions{
		Name: "otherfs", FsName: "otherfs", DirectMount: true}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i, a := range os.Args[:len(os.Args)-1] {
		if a == "--ready-file" {
			if err := ready.Write(os.Args[i+1], ready.Info{Mountpoint: mnt}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	srv.Wait()
	return 0
}

// TestMountRefusesStaleForeignMount: a stale FUSE mount of another
// filesystem is not ours to detach; mlfsd mount refuses it as before.
func TestMountRefusesStaleForeignMount(t *testing.T) {
	mnt := t.TempDir()
	cmd := mlfsdCmd(t)
	cmd.Env = append(os.Environ(), "MLFSD_TEST_FOREIGN_FUSE="+mnt)
	d := startDaemon(t, cmd, mnt) // the foreign server is mounted
	d.cmd.Process.Kill()
	<-d.done
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sfs); err != syscall.ENOTCONN {
		t.Fatalf("statfs of the killed foreign mount = %v, want ENOTCONN", err)
	}
	src := t.TempDir()
	code, _, stderr := runMlfsd(t, "mount", "--read-only", "--cache-dir", t.TempDir(), "nas://"+src+"/", mnt)
	if code == 0 || !strings.Contains(stderr, "stale FUSE mount") || !strings.Contains(stderr, "umount -l "+mnt) {
		t.Errorf("mlfsd mount on a stale foreign mount: exit %d, stderr %q; want the stale-mount refusal", code, stderr)
	}
	if !isMounted(t, mnt) {
		t.Error("mlfsd detached a stale mount that was not its own")
	}
}
