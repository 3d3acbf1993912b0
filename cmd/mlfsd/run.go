package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	"github.com/mlfsd/mlfsd/job"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
)

func newRunCmd(a *app) *cobra.Command {
	var o jobFlags
	var socket, metricsListen string
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

The storage keys and tokens mlfsd reads from its environment (OSS_ACCESS_KEY_*,
OSS_SESSION_TOKEN, ALIBABA_CLOUD_ACCESS_KEY_*, ALIBABA_CLOUD_SECURITY_TOKEN,
ALIBABA_CLOUD_OIDC_TOKEN, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, AWS_SECURITY_TOKEN, AWS_CONTAINER_AUTHORIZATION_TOKEN) are not
passed on to the command.`,
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
			// Output mounts check permissions (default_permissions): what
			// the store holds must belong to the user the job runs as, or
			// it could not write its own output directories.
			var jobOpts map[string]string
			if runAs != nil {
				jobOpts = map[string]string{"output-owner": fmt.Sprintf("%d:%d", runAs.UID, runAs.GID)}
			}
			var mounter job.Mounter
			if socket != "" {
				// The daemon mounts the channels on the node's shared cache.
				if metricsListen != "" {
					return errors.New("--metrics-listen: with --daemon, the daemon serves the metrics")
				}
				opts, err := node.MountFlags(cmd.Flags())
				if err != nil {
					return err
				}
				for k, v := range jobOpts {
					if opts == nil {
						opts = map[string]string{}
					}
					opts[k] = v
				}
				mounter = api.NewClient(socket).JobMounter(opts, daemonCredentials())
			} else {
				n, err := node.New(ctx, node.Options{Settings: a.settings, Version: version, CacheFallback: true, Log: a.log, Progress: a.stderr})
				if err != nil {
					return err
				}
				defer func() {
					if err := n.Close(context.Background()); err != nil {
						a.log.Warn("closing", "err", err)
					}
				}()
				mounter = n.JobMounter(jobOpts, node.Credentials{})
				if metricsListen != "" {
					ms, _, err := serveMetrics(a, n, metricsListen)
					if err != nil {
						return err
					}
					defer ms.Close()
				}
			}
			sigs := make(chan os.Signal, 8)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)

			r := &job.Runner{
				Plan:    p,
				Mounter: mounter,
				Open: func(ctx context.Context, u backends.URI) (backends.Backend, string, error) {
					return all.Open(ctx, u, a.settings.Backend, a.log)
				},
				Command: args,
				Shell:   len(args) == 1,
				Stdin:   a.stdin,
				Stdout:  a.stdout,
				Stderr:  a.stderr,
				Signals: sigs,
				// The job reads storage through its mounts; the keys
				// and tokens mlfsd uses, of every backend, stay with it.
				Withhold: all.AllSecretEnv(),
				Log:      a.log,
				RunAs:    runAs,
				DetachStale: func(mp string) error {
					_, err := node.DetachStale(mp, a.log)
					return err
				},
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
	c.Flags().StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics and /healthz on this address while the job runs")
	c.Flags().StringVar(&socket, "daemon", "", "have the mlfsd daemon on this API socket mount the job's channels (on the node's shared cache)")
	node.AddFlags(c.Flags(), &a.settings, node.GroupCache, node.GroupOSS, node.GroupS3, node.GroupHDFS, node.GroupOutput, node.GroupMount)
	addConfigFlag(c)
	c.Flags().StringVar(&runAsUser, "run-as", "", "run the command as this user (name or uid; with its groups and HOME), so it cannot read mlfsd's memory or environment; mlfsd must run as root")
	return c
}
