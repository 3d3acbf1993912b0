// Command mlfsd is the storage data plane of GPU training jobs: it mounts a
// job's input channels read-only with a read-through cache, its output
// channels write-back, and prepares the PAI job environment.
//
// This package is wiring only: subcommands, flags, signals. The work lives in
// job/, fs/, cache/, writeback/ and backends/.
package main

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/node"
)

func main() {
	if err := nonDumpable(); err != nil {
		fmt.Fprintln(os.Stderr, "mlfsd:", err)
		os.Exit(1)
	}
	os.Exit(execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// nonDumpable keeps other processes of mlfsd's user, such as the job it
// runs, from reading its memory and /proc/<pid>/environ, which hold the
// storage credentials: /proc/<pid>/* becomes root's, ptrace is refused,
// and no core dump is written. Children start dumpable again at exec.
// mlfsd itself still reads its own /proc/self.
func nonDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// app carries what every subcommand shares; there are no package globals.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	logLevel       string
	logFormat      string
	cpuProfile     string
	stopProfile    func()
	log            *slog.Logger
	// settings are bound to the flags of the options table (node.Table);
	// each subcommand adds only the groups it uses.
	settings node.Settings
	// readyFile is --ready-file of the serving subcommands (daemon,
	// mount, emulate): where to say, once serving, what is served.
	readyFile string
}

// addReadyFileFlag adds --ready-file to a subcommand that serves until
// stopped.
func addReadyFileFlag(f *pflag.FlagSet, a *app) {
	f.StringVar(&a.readyFile, "ready-file", "", "once serving, write a JSON file here (atomically) naming the pid and the addresses served; wait for it instead of reading the log")
}

// exitError carries a specific exit status (for example the status of the
// command `mlfsd run` ran) up to main without printing anything more.
type exitError struct {
	code int
	err  error // nil when the status alone says it all
}

func (e *exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func execute(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRootCmd(a)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	if cmd, _, ferr := root.Find(args); ferr == nil {
		err = explainNotRoot(cmd.Name(), err)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "mlfsd:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "mlfsd:", err)
	return 1
}

// explainNotRoot adds to a permission error of a mounting subcommand run
// by another user than root what is missing: a first try as a normal user
// fails on /ml, /run/mlfsd or the cache directory before it reaches the
// mount, and "permission denied" alone does not say that root is needed.
func explainNotRoot(cmd string, err error) error {
	var nr *mfs.NeedRootError
	switch cmd {
	case "mount", "run", "daemon", "mount-helper", "csi":
	default:
		return err
	}
	if os.Geteuid() == 0 || !errors.Is(err, iofs.ErrPermission) || errors.As(err, &nr) {
		return err
	}
	return fmt.Errorf("%w (mlfsd %s mounts FUSE filesystems and needs root: run it as root, e.g. with sudo)", err, cmd)
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "mlfsd",
		Short:         "Storage data plane for GPU training jobs",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// mlfsd mount's -o, then a configuration file: flags they set
			// (--log-level too) must be in place before anything uses
			// them, and each sets only what the command line did not.
			if err := applyMountOptionFlag(cmd); err != nil {
				return err
			}
			if f := cmd.Flags().Lookup(node.ConfigFlag); f != nil && f.Value.String() != "" {
				if err := node.ApplyConfigFile(f.Value.String(), cmd.Flags()); err != nil {
					return err
				}
			}
			l, err := newLogger(a.stderr, a.logLevel, a.logFormat)
			if err != nil {
				return err
			}
			a.log = l
			if err := a.startPprof(); err != nil { // pprof.go
				return err
			}
			return a.startProfile()
		},
		PersistentPostRun: func(*cobra.Command, []string) { a.stopProfile() },
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&a.logFormat, "log-format", "text", "log format: text or json")
	pf.StringVar(&a.cpuProfile, "cpuprofile", "", "write a Go CPU profile to this file (for performance work)")

	root.AddCommand(
		newVersionCmd(a),
		newMountCmd(a),
		newUmountCmd(a),
		newDrainCmd(a),
		newStatusCmd(a),
		newCacheCmd(a), // cachecmd.go
		newDaemonCmd(a),
		newRunCmd(a),
		newEnvCmd(a),
		newEmulateCmd(a),
		newBenchCmd(a),
		newCSICmd(a), newMountHelperCmd(a), newUmountHelperCmd(a), // csi.go, mounthelper.go
	)
	addVersionFlag(root) // versionflag.go
	return root
}

// addConfigFlag adds --config to a command that mounts: its flags may then
// come from a YAML file (node.ApplyConfigFile), which the root command
// reads before the command runs.
func addConfigFlag(c *cobra.Command) {
	c.Flags().String(node.ConfigFlag, "", "YAML file of this command's flags, without the dashes (e.g. cache-memory: 4GiB); flags given here override it; unknown keys are errors")
}

// startProfile starts the CPU profile asked for with --cpuprofile.
func (a *app) startProfile() error {
	a.stopProfile = func() {}
	if a.cpuProfile == "" {
		return nil
	}
	f, err := os.Create(a.cpuProfile)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	a.stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
	return nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}
