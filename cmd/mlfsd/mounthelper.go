package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
)

// The mount(8) integration: `mount -t fuse.mlfsd -o ro SOURCE TARGET` and
// fstab lines of type fuse.mlfsd run /sbin/mount.fuse.mlfsd (the helper
// mount(8) looks for first, before the generic mount.fuse), and umount(8)
// runs /sbin/umount.fuse.mlfsd for a mount of that type. Both helpers are
// two-line scripts calling `mlfsd mount-helper` / `mlfsd umount-helper`,
// written by `mlfsd mount-helper --install`.
//
// Without -o daemon=SOCKET the helper starts `mlfsd mount` as a detached
// child, returns once the mount is up (or with the child's error), and
// records the child in the run directory, so that umount.fuse.mlfsd can
// wait for it: the child drains an output after the kernel unmount before
// it exits, and umount returns only then. With -o daemon=SOCKET the node
// daemon mounts, and umount asks it to drain and unmount.

const (
	mountHelperName  = "mount.fuse.mlfsd"
	umountHelperName = "umount.fuse.mlfsd"
	// runDirEnv overrides where mount records are kept (tests).
	runDirEnv     = "MLFSD_MOUNT_RUN_DIR"
	defaultRunDir = "/run/mlfsd/mounts"
	// helperMarker marks helper scripts written by --install, so that a
	// reinstall replaces them and nothing else.
	helperMarker = "# written by mlfsd mount-helper --install"
)

// mountRecord is what the mount helper leaves for the umount helper. It
// holds no credentials.
type mountRecord struct {
	Target string `json:"target"`
	URI    string `json:"uri"`
	PID    int    `json:"pid,omitempty"`    // the serving `mlfsd mount` process
	Daemon string `json:"daemon,omitempty"` // or the daemon's API socket
}

// helperOptions is a parsed -o option string.
type helperOptions struct {
	readOnly bool
	uhelper  bool // uhelper= given: mount(8) records the mount in utab itself
	daemon   string
	logFile  string
	flags    []string          // --name=value flags for `mlfsd mount`
	mount    map[string]string // mount-scope options for the daemon
	node     []string          // node-scope option names (refused with daemon=)
}

// ignoredMountOptions are generic options mount(8) and fstab carry that
// mean nothing to a FUSE channel (or are handled by mount(8) itself).
var ignoredMountOptions = map[string]bool{
	"rw": true, "defaults": true, "auto": true, "noauto": true, "user": true, "nouser": true,
	"users": true, "_netdev": true, "nofail": true, "exec": true, "noexec": true, "suid": true,
	"nosuid": true, "dev": true, "nodev": true, "atime": true, "noatime": true,
	"relatime": true, "norelatime": true, "strictatime": true, "nodiratime": true,
	"diratime": true, "async": true, "sync": true, "owner": true, "group": true, "loud": true,
	"helper": true,
}

// parseHelperOptions maps -o options to mlfsd flags: ro (an input; without
// it, an output), daemon=SOCKET, log_file=PATH, and every option of the
// options table with '_' for '-' (cache_dir=..., cache_memory=4GiB,
// upload_concurrency=8, no_passthrough). Values are validated here, so a
// bad fstab line fails before anything starts. Unknown options are errors
// naming them; credentials cannot be given here (they would show in
// /proc/PID/cmdline and in fstab): use oss_credentials_file.
func parseHelperOptions(list []string) (helperOptions, error) {
	h := helperOptions{mount: map[string]string{}}
	table := map[string]node.Option{}
	for _, o := range node.Table() {
		table[o.Name] = o
	}
	for _, group := range list {
		for _, o := range splitOptions(group) {
			name, val, hasVal := strings.Cut(o, "=")
			switch {
			case o == "":
				continue
			case name == "ro" && !hasVal:
				h.readOnly = true
				continue
			case name == "uhelper":
				h.uhelper = true
				continue
			case ignoredMountOptions[name] || strings.HasPrefix(name, "x-") || name == "comment":
				continue
			case name == "daemon":
				if !hasVal || val == "" {
					return h, errors.New("-o daemon: want daemon=/path/to/mlfsd.sock")
				}
				h.daemon = val
				continue
			case name == "log_file":
				if !hasVal || !filepath.IsAbs(val) {
					return h, errors.New("-o log_file: want log_file=/absolute/path")
				}
				h.logFile = val
				continue
			}
			flag := strings.ReplaceAll(name, "_", "-")
			opt, ok := table[flag]
			if !ok {
				return h, fmt.Errorf("-o %s: unknown mlfsd mount option (want ro, daemon=, log_file=, or an mlfsd flag with '_' for '-', e.g. cache_dir=, upload_concurrency=)", name)
			}
			if !hasVal {
				if opt.Kind != "bool" {
					return h, fmt.Errorf("-o %s: needs a value (%s=...)", name, name)
				}
				val = "true"
			}
			s := node.Defaults()
			if err := opt.Set(&s, val); err != nil {
				return h, fmt.Errorf("-o %s: %w", name, err)
			}
			h.flags = append(h.flags, "--"+flag+"="+val)
			if opt.Scope == node.ScopeMount {
				h.mount[flag] = val
			} else {
				h.node = append(h.node, name)
			}
		}
	}
	if h.daemon != "" && len(h.node) > 0 {
		return h, fmt.Errorf("-o %s: node settings of the daemon at %s; set them on `mlfsd daemon`, not per mount", strings.Join(h.node, ","), h.daemon)
	}
	return h, nil
}

// splitOptions splits a comma-separated option list; a value may hold a
// comma when quoted ("x=\"a,b\"").
func splitOptions(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	return append(out, cur.String())
}

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
				return installMountHelpers(install, exe, nil)
			}
			if fake {
				return nil
			}
			h, err := parseHelperOptions(opts)
			if err != nil {
				return err
			}
			return a.helperMount(cmd.Context(), args[0], args[1], h)
		},
	}
	f := c.Flags()
	f.StringArrayVarP(&opts, "options", "o", nil, "mount options, comma-separated")
	f.StringVar(&install, "install", "", "write "+mountHelperName+" and "+umountHelperName+" into this directory (e.g. /sbin) and exit")
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

// installMountHelpers writes the two helper scripts into dir. env lines
// (NAME=value) are set for the helper (tests).
func installMountHelpers(dir, exe string, env []string) error {
	for name, sub := range map[string]string{mountHelperName: "mount-helper", umountHelperName: "umount-helper"} {
		p := filepath.Join(dir, name)
		if old, err := os.ReadFile(p); err == nil && !strings.Contains(string(old), helperMarker) {
			return fmt.Errorf("%s exists and was not written by mlfsd; remove it first", p)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "#!/bin/sh\n%s\n", helperMarker)
		for _, e := range env {
			fmt.Fprintf(&b, "export %s\n", shellQuote(e))
		}
		fmt.Fprintf(&b, "exec %s %s \"$@\"\n", shellQuote(exe), sub)
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(b.String()), 0o755); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func runDir() string {
	if d := os.Getenv(runDirEnv); d != "" {
		return d
	}
	return defaultRunDir
}

// recordPath names the record of the mount at target.
func recordPath(target string) string {
	esc := strings.ReplaceAll(strings.Trim(target, "/"), "-", "--")
	esc = strings.ReplaceAll(esc, "/", "-")
	if esc == "" {
		esc = "-"
	}
	return filepath.Join(runDir(), esc+".json")
}

func writeRecord(r mountRecord) error {
	if err := os.MkdirAll(runDir(), 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	p := recordPath(r.Target)
	if err := os.WriteFile(p+".tmp", data, 0o600); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}

func readRecord(target string) (mountRecord, error) {
	var r mountRecord
	data, err := os.ReadFile(recordPath(target))
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(data, &r)
}

// helperMount mounts source at target as -o asked, returning once the
// mount is up.
func (a *app) helperMount(ctx context.Context, source, target string, h helperOptions) error {
	abs, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	if h.daemon != "" {
		info, err := api.NewClient(h.daemon).Mount(ctx, node.MountRequest{URI: source, Target: abs, ReadOnly: h.readOnly, Options: h.mount})
		if err != nil {
			return err
		}
		if err := writeRecord(mountRecord{Target: info.Target, URI: info.URI, Daemon: h.daemon}); err != nil {
			return err
		}
		return registerUmountHelper(source, info.Target, h)
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
	if h.readOnly {
		args = append(args, "--read-only")
	}
	args = append(args, h.flags...)
	args = append(args, "--", source, abs)
	logFile := h.logFile
	if logFile == "" {
		logFile = filepath.Join(filepath.Dir(runDir()), "log", strings.TrimSuffix(filepath.Base(recordPath(abs)), ".json")+".log")
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
		mounted, err := mountedAs(abs, "fuse.mlfsd")
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
	if err := writeRecord(mountRecord{Target: abs, URI: source, PID: child.Process.Pid}); err != nil {
		return err
	}
	if err := registerUmountHelper(source, abs, h); err != nil {
		return err
	}
	// The child runs on; this process must not wait for it.
	return child.Process.Release()
}

// utabPath is libmount's table of userspace mount options.
const utabPath = "/run/mount/utab"

// registerUmountHelper makes umount(8) run umount.fuse.mlfsd for target.
// umount(8) looks a FUSE mount's type up by statfs(2) ("fuse", without the
// subtype, so no helper of ours) unless libmount's utab has an entry for
// the target; an entry with uhelper=mlfsd sends it through mountinfo
// (type fuse.mlfsd) to our helper, and umount(8) drops the entry once the
// helper succeeded. The entry is written the way libmount writes it:
// under its lock file, by replacing the file. Skipped when the options
// carry uhelper= already (mount(8) then writes the entry itself).
func registerUmountHelper(source, target string, h helperOptions) error {
	if h.uhelper {
		return nil
	}
	dir := filepath.Dir(utabPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("register with umount(8): %w", err)
	}
	lock, err := os.OpenFile(utabPath+".lock", os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("register with umount(8): %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("register with umount(8): lock %s: %w", lock.Name(), err)
	}
	old, err := os.ReadFile(utabPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("register with umount(8): %w", err)
	}
	var b strings.Builder
	want := "TARGET=" + mangle(target) + " "
	for _, l := range strings.Split(string(old), "\n") {
		if l != "" && !strings.Contains(l, want) { // a stale entry for target goes
			b.WriteString(l + "\n")
		}
	}
	fmt.Fprintf(&b, "SRC=%s TARGET=%s ROOT=/ OPTS=uhelper=mlfsd\n", mangle(source), mangle(target))
	tmp, err := os.CreateTemp(dir, "utab.")
	if err != nil {
		return fmt.Errorf("register with umount(8): %w", err)
	}
	_, werr := tmp.WriteString(b.String())
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("register with umount(8): %w", err)
	}
	if err := os.Rename(tmp.Name(), utabPath); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("register with umount(8): %w", err)
	}
	return nil
}

// mangle escapes what separates fields of a utab line, as libmount does.
func mangle(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
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

// mountedAs reports whether path is a mountpoint of type fstype.
func mountedAs(path, fstype string) (bool, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && len(g) > 0 && unescapeOctal(f[4]) == path && g[0] == fstype {
			return true, nil
		}
	}
	return false, nil
}

func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			okOct := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					okOct = false
				}
				v = v<<3 | (c - '0')
			}
			if okOct {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// helperUmount unmounts target, draining an output first: through the
// daemon that mounted it, or by unmounting and waiting for the serving
// process, which drains after the kernel unmount and then exits.
func (a *app) helperUmount(ctx context.Context, target string, lazy bool) error {
	abs, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	rec, rerr := readRecord(abs)
	if rerr == nil && rec.Daemon != "" {
		c := api.NewClient(rec.Daemon)
		if err := c.Unmount(ctx, abs); err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != 404 {
				return err
			}
			// The daemon does not know it (any more): plain unmount.
			if err := unmountPath(abs, lazy); err != nil {
				return err
			}
		}
		os.Remove(recordPath(abs))
		return nil
	}
	var pidfd int = -1
	if rerr == nil && rec.PID > 0 && servesTarget(rec.PID, abs) {
		if fd, err := unix.PidfdOpen(rec.PID, 0); err == nil {
			pidfd = fd
			defer unix.Close(fd)
		}
	}
	if err := unmountPath(abs, lazy); err != nil {
		return err
	}
	if pidfd >= 0 {
		a.log.Info("waiting for the mlfsd serving the mount to upload what was written", "mountpoint", abs, "pid", rec.PID)
		if err := waitPidfd(ctx, pidfd); err != nil {
			return fmt.Errorf("unmounted %s, but waiting for its mlfsd (pid %d) to finish uploading: %w", abs, rec.PID, err)
		}
	}
	os.Remove(recordPath(abs))
	return nil
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

func unmountPath(p string, lazy bool) error {
	flags := 0
	if lazy {
		flags = unix.MNT_DETACH
	}
	if err := unix.Unmount(p, flags); err != nil {
		return fmt.Errorf("umount %s: %w", p, err)
	}
	return nil
}

// waitPidfd blocks until the process behind pidfd exits or ctx is done.
func waitPidfd(ctx context.Context, pidfd int) error {
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 1000)
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
