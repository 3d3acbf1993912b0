package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
	nodedaemon "github.com/mlfsd/mlfsd/node/daemon"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

func newDaemonCmd(a *app) *cobra.Command {
	var stateDir, socket, metricsListen string
	var takeover, onStop, retiredFile string
	var protocol int
	var nasRoots []string
	c := &cobra.Command{
		Use:   "daemon --state-dir DIR --socket PATH --cache-dir DIR [--metrics-listen ADDR] [--takeover]",
		Short: "Serve the mounts of this host from one shared cache, through a local API",
		Long: `Run the node daemon: one per host, serving every job's mounts from one shared
block cache. Clients ask for mounts on the API socket (root only):

  mlfsd mount --daemon SOCKET [--read-only] URI TARGET
  mlfsd umount --daemon SOCKET TARGET
  mlfsd status --daemon SOCKET
  mlfsd run --daemon SOCKET --spec job.yaml

The mount table is kept in --state-dir: started again after a crash, the
daemon detaches the stale mounts it left and serves them again at the same
paths, uploading what outputs had pending. Mounts made with a client's
credentials come back with the daemon's own (environment or
--oss-credentials-file), never stored.

Stopping keeps the mounts (--on-stop=keep, the default): SIGINT/SIGTERM
never unmounts a job's volume. Under systemd with a file-descriptor store
(FileDescriptorStoreMax=, systemd 254 or later: deploy/systemd) the daemon
freezes its mounts and leaves their FUSE connections and what it holds of
them in the store; the daemon started next (` + "`systemctl restart`" + `, or a
stop and a later start) takes them over from there: open files stay open.
Anywhere else the daemon stops serving without unmounting: the mounts fail
(ENOTCONN) until the next daemon started with this --state-dir detaches
them and mounts them again from its mount table; pending uploads stay
journaled for it. Only ` + "`mlfsd umount`" + ` (or ` + "`mlfsd drain`" + `, every mount of
the node) unmounts. --on-stop=unmount is the old behaviour: drain every
output and unmount everything (a second signal aborts the drain).

Upgrading without unmounting: start the new binary with --takeover and the
same flags (--state-dir, --socket, --staging-dir above all) while the old
daemon runs; under systemd, ` + "`systemctl reload mlfsd`" + `. It connects to the old
one's handover socket (STATE_DIR/takeover.sock), receives every mount's
FUSE connection and what the kernel holds of it (node IDs and lookup
counts, open handles), each output's tree and the files open for writing,
and serves the same mounts once the old daemon has exited: open files stay
open, reads and writes in flight are answered, uploads pending at the
switch are made by the new daemon. An umount draining at the switch is
sent again by its client to the new daemon, which drains and unmounts
(the client waits up to 60 s for it). If anything fails before the old daemon
lets go, the old daemon goes on serving and the new one exits with the
reason.

Host directories: a client's request may name nas:// channels (and nas://
shared cache tiers) only under a --nas-root; there is none by default.

Logs are JSON unless --log-format says otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case stateDir == "":
				return errors.New("--state-dir is required")
			case socket == "":
				return errors.New("--socket is required")
			}
			if !cmd.Flags().Changed("log-format") && !cmd.Root().PersistentFlags().Changed("log-format") {
				l, err := newLogger(a.stderr, a.logLevel, "json")
				if err != nil {
					return err
				}
				a.log = l
			}
			policy, err := nasroots.Parse(nasRoots)
			if err != nil {
				return fmt.Errorf("--nas-root: %w", err)
			}
			switch takeover {
			case "true", "false", "auto":
			default:
				return fmt.Errorf("--takeover=%s: want true, false or auto", takeover)
			}
			if onStop != "keep" && onStop != "unmount" {
				return fmt.Errorf("--on-stop=%s: want keep or unmount", onStop)
			}
			return runDaemon(cmd.Context(), nodedaemon.Options{
				Settings: a.settings, StateDir: stateDir, Socket: socket, MetricsListen: metricsListen,
				Takeover: takeover != "false", TakeoverAuto: takeover == "auto", KeepMounts: onStop == "keep",
				RetiredFile: retiredFile, Protocol: protocol, NASRoots: policy, Version: version,
				Log: a.log, Progress: a.stderr, ReadyFile: a.readyFile,
			})
		},
	}
	f := c.Flags()
	f.StringVar(&stateDir, "state-dir", "", "directory of the daemon's mount table (required)")
	f.StringVar(&socket, "socket", "", "path of the API's unix socket (required; made mode 0600)")
	f.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics and /healthz on this address, e.g. 127.0.0.1:9469")
	f.StringVar(&takeover, "takeover", "false", "true: take the live mounts of the daemon running with this --state-dir and --socket, which then exits (an upgrade without unmounting); auto: the same if one runs, else start afresh (a DaemonSet's surge pod)")
	f.Lookup("takeover").NoOptDefVal = "true"
	f.StringVar(&onStop, "on-stop", "keep", "on SIGINT/SIGTERM: keep the mounts for the next daemon, or unmount (drain outputs and unmount everything)")
	f.StringVar(&retiredFile, "retired-file", "", "write this file after handing the mounts over; a daemon started while it exists serves nothing until stopped (a DaemonSet pod's emptyDir: the kubelet restarts the container of a daemon that handed over)")
	// For tests of a refused takeover: ask for another handover protocol.
	f.IntVar(&protocol, "handover-protocol", 0, "handover protocol to ask for with --takeover (0: this binary's)")
	f.MarkHidden("handover-protocol")
	addNASRootFlag(f, &nasRoots)
	addReadyFileFlag(f, a)
	node.AddFlags(f, &a.settings, node.GroupCache, node.GroupOSS, node.GroupHDFS, node.GroupOutput, node.GroupMount)
	node.AddFlags(f, &a.settings, node.GroupS3)
	addConfigFlag(c)
	return c
}

// addNASRootFlag adds --nas-root, the administrator's list of host
// directories that requests (a client's, a pod's volume) may name.
func addNASRootFlag(f *pflag.FlagSet, roots *[]string) {
	f.StringArrayVar(roots, "nas-root", nil,
		"a host directory nas:// channels of requests may name: PATH (inputs only), PATH:ro, or PATH:rw (outputs and nas:// shared cache tiers too); repeat for more. None by default")
}

// runDaemon runs the daemon until SIGINT or SIGTERM, which drains and
// unmounts; a second signal cuts the drain short.
func runDaemon(ctx context.Context, o nodedaemon.Options) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.DrainContext = func() (context.Context, context.CancelFunc) {
		return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	}
	return nodedaemon.Run(ctx, o)
}

// serveMetrics serves n's /metrics and /healthz on addr (mlfsd mount and
// run; the daemon serves its own), returning the server and the address
// it listens on (the port the kernel picked for port 0).
func serveMetrics(a *app, n *node.Node, addr string) (*http.Server, string, error) {
	return nodedaemon.ServeMetrics(n, addr, a.log)
}

// daemonCredentials are the credentials a client sends with its mount
// requests: the OSS and S3 keys of its environment, its HDFS user. They
// travel in the request body only.
func daemonCredentials() node.Credentials {
	return node.Credentials{
		OSSAccessKeyID:     os.Getenv("OSS_ACCESS_KEY_ID"),
		OSSAccessKeySecret: os.Getenv("OSS_ACCESS_KEY_SECRET"),
		OSSSecurityToken:   os.Getenv("OSS_SESSION_TOKEN"),
		S3AccessKeyID:      os.Getenv("AWS_ACCESS_KEY_ID"),
		S3SecretAccessKey:  os.Getenv("AWS_SECRET_ACCESS_KEY"),
		S3SessionToken:     os.Getenv("AWS_SESSION_TOKEN"),
		HDFSUser:           os.Getenv("HADOOP_USER_NAME"),
	}
}

func newUmountCmd(a *app) *cobra.Command {
	var socket string
	var noDrain bool
	c := &cobra.Command{
		Use:   "umount --daemon SOCKET TARGET",
		Short: "Unmount a mount of the node daemon (an output is drained first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if socket == "" {
				return errors.New("--daemon is required (a foreground `mlfsd mount` unmounts on SIGINT/SIGTERM)")
			}
			cl := api.NewClient(socket)
			if noDrain {
				return cl.Detach(cmd.Context(), args[0])
			}
			return cl.Unmount(cmd.Context(), args[0])
		},
	}
	c.Flags().StringVar(&socket, "daemon", "", "API socket of the mlfsd daemon")
	c.Flags().BoolVar(&noDrain, "no-drain", false, "do not wait for uploads: what is pending stays journaled for the next mount of the channel")
	return c
}

func newStatusCmd(a *app) *cobra.Command {
	var socket string
	var asJSON bool
	c := &cobra.Command{
		Use:   "status --daemon SOCKET [--json]",
		Short: "Show the node daemon's mounts and their figures",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if socket == "" {
				return errors.New("--daemon is required")
			}
			st, err := api.NewClient(socket).Status(cmd.Context())
			if err != nil {
				return err
			}
			return printStatus(a.stdout, st, asJSON)
		},
	}
	c.Flags().StringVar(&socket, "daemon", "", "API socket of the mlfsd daemon")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newDrainCmd(a *app) *cobra.Command {
	var socket string
	c := &cobra.Command{
		Use:   "drain --daemon SOCKET",
		Short: "Unmount every mount of the node daemon, outputs drained first (before taking a node out of service)",
		Long: `Unmount every mount of the node daemon: each output's pending uploads
are made first. Stopping the daemon keeps the mounts (for the daemon
started next); run this before taking the node out of service, e.g. after
` + "`kubectl drain`" + ` evicted the jobs, or before ` + "`systemctl stop mlfsd`" + ` for good.
It exits non-zero, naming each mount it could not unmount.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if socket == "" {
				return errors.New("--daemon is required")
			}
			cl := api.NewClient(socket)
			mounts, err := cl.List(cmd.Context())
			if err != nil {
				return err
			}
			errs := make([]error, len(mounts))
			var wg sync.WaitGroup
			for i, m := range mounts {
				wg.Go(func() {
					if err := cl.Unmount(cmd.Context(), m.Target); err != nil {
						errs[i] = fmt.Errorf("%s: %w", m.Target, err)
						return
					}
					fmt.Fprintf(a.stdout, "unmounted %s\n", m.Target)
				})
			}
			wg.Wait()
			return errors.Join(errs...)
		},
	}
	c.Flags().StringVar(&socket, "daemon", "", "API socket of the mlfsd daemon")
	return c
}
