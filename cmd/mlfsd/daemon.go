package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/handover"
	"github.com/mlfsd/mlfsd/internal/sdnotify"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
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
--oss-credentials-file), never stored. On SIGINT/SIGTERM it drains every
daemon (or the same one started again) and keeps the mounts (see below).

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
			return runDaemon(cmd.Context(), a, daemonConfig{stateDir: stateDir, socket: socket, metricsListen: metricsListen,
				takeover: takeover, onStop: onStop, retiredFile: retiredFile, protocol: protocol, nasRoots: policy})
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
	node.AddFlags(f, &a.settings, node.GroupCache, node.GroupOSS, node.GroupHDFS, node.GroupOutput)
	node.AddFlags(f, &a.settings, node.GroupS3)
	return c
}

// addNASRootFlag adds --nas-root, the administrator's list of host
// directories that requests (a client's, a pod's volume) may name.
func addNASRootFlag(f *pflag.FlagSet, roots *[]string) {
	f.StringArrayVar(roots, "nas-root", nil,
		"a host directory nas:// channels of requests may name: PATH (inputs only), PATH:ro, or PATH:rw (outputs and nas:// shared cache tiers too); repeat for more. None by default")
}

// daemonConfig is what `mlfsd daemon` runs with, besides the node's settings.
type daemonConfig struct {
	stateDir, socket, metricsListen string
	takeover                        string // true, false, auto
	onStop                          string // keep, unmount
	retiredFile                     string
	protocol                        int
	nasRoots                        nasroots.Policy
}

func runDaemon(ctx context.Context, a *app, cfg daemonConfig) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	stateDir, socket := cfg.stateDir, cfg.socket
	if cfg.retiredFile != "" {
		if _, err := os.Stat(cfg.retiredFile); err == nil {
			// This container's daemon handed its mounts over to another
			// pod's; the kubelet restarted it. Taking them back would
			// undo the upgrade: wait to be stopped.
			a.log.Info("this daemon handed its mounts over already; serving nothing until stopped", "retired_file", cfg.retiredFile)
			<-ctx.Done()
			return nil
		}
	}
	// Mounts a daemon stopped under systemd left in the fd store.
	stored, err := sdnotify.Listen()
	if err != nil {
		a.log.Warn("fds passed by the service manager", "err", err)
	}
	fromStore := false
	for _, f := range stored {
		fromStore = fromStore || f.Name == handover.StoreStateName
	}
	takeover := cfg.takeover != "false" && !fromStore
	// Taking over, the cache directory is the old daemon's until it lets
	// go; the node opens it then.
	n, err := node.New(ctx, node.Options{Settings: a.settings, StateDir: stateDir, OpenCache: !takeover && !fromStore, Log: a.log, Progress: a.stderr, NASRoots: &cfg.nasRoots})
	if err != nil {
		for _, f := range stored {
			f.Close()
		}
		return err
	}
	closeNode := func() error {
		// A second signal aborts the drain: what is not uploaded stays
		// journaled, and the mount table keeps nothing (a clean stop).
		dctx, dstop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer dstop()
		return n.Close(dctx)
	}
	hsock := handover.SocketPath(stateDir)
	took := false
	if len(stored) > 0 {
		ok, err := handover.FromStore(ctx, stored, n, version, a.log)
		if err != nil {
			a.log.Error("the mounts left in the fd store could not be taken over; restoring the mount table instead", "err", err)
		}
		took = ok && err == nil
	}
	if takeover {
		// systemd follows the new process from the moment the old one
		// lets go (NotifyAccess=all in deploy/systemd).
		mainPID := func() {
			if err := sdNotify(fmt.Sprintf("MAINPID=%d", os.Getpid())); err != nil {
				a.log.Warn("sd_notify", "err", err)
			}
		}
		err := handover.Take(ctx, hsock, n, version, cfg.protocol, a.log, mainPID)
		switch {
		case cfg.takeover == "auto" && errors.Is(err, handover.ErrNoDaemon):
			a.log.Info("--takeover=auto: no daemon runs with this state directory; starting afresh")
		case err != nil:
			return errors.Join(fmt.Errorf("takeover: %w", err), closeNode())
		default:
			took = true
		}
	}
	// After a takeover the mounts are served already: a socket that cannot
	// be had is logged, not a reason to unmount them.
	keepServing := func(what string, err error) {
		a.log.Error(what+" failed after the takeover; serving the mounts taken over without it until stopped", "err", err)
	}
	var ms *http.Server
	if cfg.metricsListen != "" {
		if ms, err = serveMetrics(a, n, cfg.metricsListen); err != nil && !took {
			closeNode()
			return err
		} else if err != nil {
			keepServing("metrics", err)
		} else {
			defer ms.Close()
		}
	}
	if !took {
		if restored, err := n.Restore(ctx); err != nil {
			a.log.Error("some mounts of the mount table could not be restored", "err", err)
		} else if len(restored) > 0 {
			a.log.Info("mount table restored", "mounts", len(restored))
		}
	}
	l, err := api.Listen(socket)
	if err != nil && !took {
		return errors.Join(err, closeNode())
	} else if err != nil {
		keepServing("the API socket", err)
	} else if err := api.ClearTakeover(socket); err != nil {
		a.log.Warn("takeover marker", "err", err)
	}
	handedOver := make(chan struct{})
	hl, err := api.Listen(hsock)
	if err != nil && !took {
		l.Close()
		return errors.Join(fmt.Errorf("handover %w", err), closeNode())
	} else if err != nil {
		keepServing("the handover socket", err)
	} else {
		defer hl.Close()
		go offerMounts(ctx, a, n, hl.(*net.UnixListener), handedOver)
	}
	srv := api.NewServer(n, a.log)
	served := make(chan error, 1)
	if l != nil {
		go func() { served <- srv.Serve(l) }()
	}
	a.log.Info("daemon ready", "socket", socket, "state_dir", stateDir, "cache_dir", a.settings.Cache.Dir)
	if err := sdNotify("READY=1"); err != nil {
		a.log.Warn("sd_notify", "err", err)
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		a.log.Error("API server stopped", "err", err)
	case <-handedOver:
		// The mounts are the new daemon's: exit without touching them.
		// The API requests under way were cut (ErrHandingOver): they get
		// that answer before the exit, so that their clients send them
		// again to the new daemon, which waits for this exit to listen.
		if l != nil {
			// Clients that find nobody listening until the new daemon
			// does wait for it (the new daemon removes the marker).
			if err := api.MarkTakeover(socket); err != nil {
				a.log.Warn("takeover marker", "err", err)
			}
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			srv.Shutdown(sctx)
			cancel()
			l.Close()
		}
		if cfg.retiredFile != "" {
			if err := os.WriteFile(cfg.retiredFile, []byte(version+"\n"), 0o600); err != nil {
				a.log.Error("--retired-file", "err", err)
			}
		}
		a.log.Info("handed the mounts over to the new daemon; exiting")
		return nil
	}
	_ = sdNotify("STOPPING=1")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	srv.Shutdown(sctx)
	cancel()
	if cfg.onStop == "unmount" {
		a.log.Info("stopping: draining outputs and unmounting (--on-stop=unmount)")
		os.Remove(socket)
		return closeNode()
	}
	// --on-stop=keep. The handover socket goes first: no new daemon is
	// to take mounts that are leaving for the store.
	if hl != nil {
		hl.Close()
	}
	if sdnotify.Available() {
		err := handover.ToStore(context.Background(), n, version, a.log)
		if err == nil {
			return nil
		}
		a.log.Error("the mounts could not be kept in the service manager's fd store; leaving them for the next daemon to mount again", "err", err)
	}
	return leaveMounts(a, n)
}

// leaveMounts stops n without unmounting: its uploads stop (what is
// pending stays journaled) and its mounts fail once this process exits,
// until the next daemon with this state dir detaches them and mounts them
// again from the mount table.
func leaveMounts(a *app, n *node.Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hv, err := n.FreezeForHandover(ctx)
	if err != nil {
		return fmt.Errorf("stopping without unmounting: %w", err)
	}
	a.log.Info("stopping without unmounting: the next daemon started with this state directory mounts them again", "mounts", len(hv.Mounts))
	return hv.Commit()
}

// offerMounts answers new daemons on the handover socket, one at a time,
// until one takes the mounts (handedOver is then closed).
func offerMounts(ctx context.Context, a *app, n *node.Node, l *net.UnixListener, handedOver chan<- struct{}) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		committed, err := handover.Offer(ctx, c, n, version, a.log)
		c.Close()
		if committed {
			close(handedOver)
			return
		}
		a.log.Error("handover failed; this daemon goes on serving its mounts", "err", err)
	}
}

// serveMetrics serves n's /metrics and /healthz on addr.
func serveMetrics(a *app, n *node.Node, addr string) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	s := &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("metrics server", "err", err)
		}
	}()
	a.log.Info("metrics serving", "addr", l.Addr().String())
	return s, nil
}

// sdNotify sends a state to systemd over $NOTIFY_SOCKET (the documented
// sd_notify protocol: one datagram); without it, it does nothing.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:] // abstract namespace
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
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
