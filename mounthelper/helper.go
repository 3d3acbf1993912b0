package mounthelper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
)

// Helper is the procedure of mount.fuse.mlfsd and umount.fuse.mlfsd.
type Helper struct {
	// Exe is the mlfsd binary the helper starts as `mlfsd mount` for a
	// mount without -o daemon=.
	Exe string
	// LogFormat, when set, is passed to that child as --log-format.
	LogFormat string
	// Log receives diagnostics (nil: discarded).
	Log *slog.Logger
}

func (hp Helper) log() *slog.Logger {
	if hp.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return hp.Log
}

// Mount mounts source at target as -o asked (h), returning once the mount
// is up: through the daemon h names, or by starting `mlfsd mount` as a
// detached child that serves it.
func (hp Helper) Mount(ctx context.Context, source, target string, h Options) error {
	abs, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	if h.Daemon != "" {
		info, err := api.NewClient(h.Daemon).Mount(ctx, node.MountRequest{URI: source, Target: abs, ReadOnly: h.ReadOnly, Options: h.MountOptions})
		if err != nil {
			return err
		}
		if err := WriteRecord(Record{Target: info.Target, URI: info.URI, Daemon: h.Daemon}); err != nil {
			return err
		}
		return registerUmount(source, info.Target, h)
	}

	args := []string{}
	if hp.LogFormat != "" {
		args = append(args, "--log-format="+hp.LogFormat)
	}
	args = append(args, "mount")
	if h.ReadOnly {
		args = append(args, "--read-only")
	}
	args = append(args, h.Flags...)
	args = append(args, "--", source, abs)
	logFile := h.LogFile
	if logFile == "" {
		logFile = filepath.Join(filepath.Dir(RunDir()), "log", strings.TrimSuffix(filepath.Base(RecordPath(abs)), ".json")+".log")
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
	child := exec.Command(hp.Exe, args...)
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
		mounted, err := MountedAs(abs, "fuse.mlfsd")
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
	if err := WriteRecord(Record{Target: abs, URI: source, PID: child.Process.Pid}); err != nil {
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
func registerUmount(source, target string, h Options) error {
	if h.UHelper {
		return nil
	}
	return RegisterUmount(source, target)
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

// Umount unmounts target, draining an output first: through the daemon
// that mounted it, or by unmounting and waiting for the serving process,
// which drains after the kernel unmount and then exits.
func (hp Helper) Umount(ctx context.Context, target string, lazy bool) error {
	abs, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	rec, rerr := ReadRecord(abs)
	if rerr == nil && rec.Daemon != "" {
		c := api.NewClient(rec.Daemon)
		if err := c.Unmount(ctx, abs); err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || !errors.Is(ae, node.ErrNotMounted) {
				return err
			}
			// The daemon does not know it (any more): plain unmount.
			if err := Unmount(abs, lazy); err != nil {
				return err
			}
		}
		RemoveRecord(abs)
		return nil
	}
	var srv *Server
	if rerr == nil {
		if s, ok := OpenServer(rec.PID, abs); ok {
			srv = s
			defer srv.Close()
		}
	}
	if err := Unmount(abs, lazy); err != nil {
		return err
	}
	if srv != nil {
		hp.log().Info("waiting for the mlfsd serving the mount to upload what was written", "mountpoint", abs, "pid", srv.PID)
		if err := srv.Wait(ctx); err != nil {
			return fmt.Errorf("unmounted %s, but waiting for its mlfsd (pid %d) to finish uploading: %w", abs, srv.PID, err)
		}
	}
	RemoveRecord(abs)
	return nil
}
