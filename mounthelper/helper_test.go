package mounthelper

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
	"github.com/mlfsd/mlfsd/node/daemon"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// startDaemon runs a node daemon in this process whose requests may name
// nas roots under nas, and returns its API socket.
func startDaemon(t *testing.T, nas string) string {
	t.Helper()
	root := t.TempDir()
	s := node.Defaults()
	s.Cache.Dir = ""
	s.Output.StagingDir = filepath.Join(root, "staging")
	policy, err := nasroots.Parse([]string{nas + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	o := daemon.Options{Settings: s, StateDir: filepath.Join(root, "state"), Socket: filepath.Join(root, "api.sock"), NASRoots: policy}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.Start(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- d.Wait() }()
	t.Cleanup(func() {
		cancel()
		if err := <-waited; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	return o.Socket
}

// TestHelperThroughDaemon: with daemon=, Helper.Mount has the daemon
// mount and records it; Helper.Umount has the daemon unmount it, and
// falls back to a plain unmount when the daemon the record names does not
// hold the mount (its answer is node.ErrNotMounted).
func TestHelperThroughDaemon(t *testing.T) {
	t.Setenv(RunDirEnv, t.TempDir())
	nas := t.TempDir()
	if err := os.WriteFile(filepath.Join(nas, "a"), []byte("helped"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := startDaemon(t, nas)
	var hp Helper
	mnt := t.TempDir()
	opts := Options{ReadOnly: true, UHelper: true, Daemon: sock}
	if err := hp.Mount(t.Context(), "nas://"+nas+"/", mnt, opts); err != nil {
		t.Fatal(err)
	}
	rec, err := ReadRecord(mnt)
	if err != nil || rec.Daemon != sock || rec.Target != mnt {
		t.Fatalf("record after the mount: %+v, %v", rec, err)
	}
	// Read in another process: this one serves the mount.
	if out, err := exec.Command("cat", filepath.Join(mnt, "a")).Output(); err != nil || string(out) != "helped" {
		t.Fatalf("read %q through the mount (%v)", out, err)
	}
	if err := hp.Umount(t.Context(), mnt, false); err != nil {
		t.Fatal(err)
	}
	if ok, err := MountedAs(mnt, "fuse.mlfsd"); ok || err != nil {
		t.Fatalf("after Umount: mounted %v (%v)", ok, err)
	}
	if _, err := ReadRecord(mnt); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the record is left after Umount: %v", err)
	}

	// A record naming a daemon that does not hold the mount.
	if err := hp.Mount(t.Context(), "nas://"+nas+"/", mnt, opts); err != nil {
		t.Fatal(err)
	}
	stranger := startDaemon(t, nas)
	if err := WriteRecord(Record{Target: mnt, URI: "nas://" + nas + "/", Daemon: stranger}); err != nil {
		t.Fatal(err)
	}
	if err := hp.Umount(t.Context(), mnt, false); err != nil {
		t.Fatalf("Umount with a daemon that does not hold the mount: %v", err)
	}
	if ok, err := MountedAs(mnt, "fuse.mlfsd"); ok || err != nil {
		t.Fatalf("after the plain unmount: mounted %v (%v)", ok, err)
	}
	// The daemon that held it sees the unmount and forgets the mount.
	testwait.EventuallyNoError(t, func() error {
		st, err := api.NewClient(sock).Status(t.Context())
		if err == nil && len(st) != 0 {
			err = errors.New("the daemon still lists the mount")
		}
		return err
	}, "the daemon to forget the mount unmounted under it")
}
