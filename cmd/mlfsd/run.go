package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/job"
)

func newRunCmd(a *app) *cobra.Command {
	var o jobFlags
	var runAsUser string // --run-as
	c := &cobra.Command{
		Use:   "run --spec job.yaml [--root R] [-- CMD ARGS...]",
		Short: "Run a training job with its channels mounted",
		Long: `Run a training job as PAI would: create the layout under the root (default /ml),
write input/config/hyperparameters.json, mount every input channel read-only under
input/data/<channel> and every output channel under output/<channel>, copy the code
into usercode, and run the command there with the PAI_* environment added to this
one. The command runs in its own process group (owning the terminal, if mlfsd
runs in one); SIGINT and SIGTERM sent to mlfsd are forwarded to that group. When
the command exits, mlfsd waits until every output is durable (a second signal
aborts the wait), unmounts everything and exits with the command's status (128+N
if signal N killed it; 3 if an output could not be made durable).

The command comes from the spec, or from the arguments after --, which replace it:
one argument runs with sh -c (so -- 'python train.py $PAI_USER_ARGS' works), several
run as an argv list. In an argv list an argument that is exactly $PAI_USER_ARGS is
replaced by the hyperparameters as separate arguments (--name value ...), losslessly.

The storage credentials mlfsd reads from its environment (OSS_ACCESS_KEY_ID,
OSS_ACCESS_KEY_SECRET, OSS_SESSION_TOKEN) are not passed on to the command.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return fmt.Errorf("unexpected argument %q: put the command after --", args[0])
			}
			p, err := o.load(len(args) == 0)
			if err != nil {
				return err
			}
			var runAs *job.Identity
			if runAsUser != "" {
				if runAs, err = job.LookupIdentity(runAsUser); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			src, closeSrc, err := a.newSource(ctx)
			if err != nil {
				return err
			}
			defer func() {
				if err := closeSrc(); err != nil {
					a.log.Warn("closing cache", "err", err)
				}
			}()
			sigs := make(chan os.Signal, 8)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)

			r := &job.Runner{
				Plan:    p,
				Mounter: &runMounter{a: a, src: src},
				Open: func(ctx context.Context, u backends.URI) (backends.Backend, string, error) {
					return all.Open(ctx, u, a.backends, a.log)
				},
				Command: args,
				Shell:   len(args) == 1,
				Stdin:   a.stdin,
				Stdout:  a.stdout,
				Stderr:  a.stderr,
				Signals: sigs,
				// The job reads storage through its mounts; the keys
				// mlfsd uses (backends/oss/config.go) stay with mlfsd.
				Withhold: []string{"OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SESSION_TOKEN"},
				Log:      a.log,
				RunAs:    runAs,
			}
			status, err := r.Run(ctx)
			switch {
			case err != nil && status == 0:
				return err // nothing ran, nothing stays mounted
			case err != nil:
				return &exitError{code: status, err: err}
			case status != 0:
				return &exitError{code: status}
			}
			return nil
		},
	}
	addJobFlags(c.Flags(), &o)
	c.Flags().StringVar(&runAsUser, "run-as", "", "run the command as this user (name or uid; with its groups and HOME), so it cannot read mlfsd's memory or environment; mlfsd must run as root")
	return c
}

// runMounter mounts a job's channels: inputs read-only through the read
// path, outputs through mountOutput.
type runMounter struct {
	a   *app
	src mfs.Source
}

func (m *runMounter) MountInput(ctx context.Context, ch job.Channel, mountpoint string) (job.Mounted, error) {
	b, key, err := all.Open(ctx, ch.URI, m.a.backends, m.a.log)
	if err != nil {
		return nil, err
	}
	srv, err := mfs.MountInput(mountpoint, b, mfs.InputOptions{Source: m.src, Key: key, Log: m.a.log},
		mfs.MountOptions{FSName: ch.URI.String(), ReadOnly: true, Log: m.a.log})
	if err != nil {
		b.Close()
		return nil, err
	}
	return &inputMount{srv: srv, b: b}, nil
}

func (m *runMounter) MountOutput(ctx context.Context, ch job.Channel, mountpoint string) (job.Mounted, error) {
	if ch.URI.Scheme == backends.SchemeNAS {
		// A job's output directory need not exist yet (an OSS prefix never
		// has to); the NAS backend opens only existing roots.
		if err := os.MkdirAll(ch.URI.Path, 0o755); err != nil {
			return nil, fmt.Errorf("create output directory: %w", err)
		}
	}
	return mountOutput(ctx, m.a, ch.URI, mountpoint)
}

// inputMount is a mounted input channel and the backend it reads.
type inputMount struct {
	srv *mfs.Server
	b   backends.Backend
}

func (m *inputMount) Drain(context.Context) error { return nil }

func (m *inputMount) Unmount() error {
	err := m.srv.Unmount()
	m.b.Close()
	return err
}
