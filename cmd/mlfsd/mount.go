package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mlfsd/mlfsd/internal/ready"
	"github.com/mlfsd/mlfsd/mounthelper"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
)

func newMountCmd(a *app) *cobra.Command {
	var readOnly, debug bool
	var socket, metricsListen string
	c := &cobra.Command{
		Use:   "mount [--read-only] [-o OPTIONS] SOURCE_URI MOUNTPOINT",
		Short: "Mount a channel URI at a mountpoint, in the foreground",
		Long: `Mount SOURCE_URI (oss://, s3://, hdfs://, nas:// or file://) at MOUNTPOINT and serve it
until SIGINT or SIGTERM, then unmount cleanly.

With --read-only it is an input channel: an immutable, cached snapshot.
Without it, an output channel: writes land on local disk and are uploaded in the
background; on SIGINT/SIGTERM every closed file is uploaded before exit.

A URI ending in '/' names a directory; otherwise a single object, shown as
MOUNTPOINT/<basename>.

A stale mount that a dead mlfsd left at MOUNTPOINT is detached and mounted
again; a stale mount of another filesystem is refused.

-o takes options as an fstab line writes them (ro,allow_other,uid=1000,
file_mode=0440,cache_dir=...): ro is --read-only, daemon= is --daemon, any other
is the flag of its name with '_' for '-'. A flag given as a flag overrides
them; they override --config.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if socket != "" {
				return mountThroughDaemon(cmd, a, socket, node.MountRequest{URI: args[0], Target: args[1], ReadOnly: readOnly}, debug)
			}
			if err := ready.Check(a.readyFile); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			n, err := node.New(ctx, node.Options{Settings: a.settings, Version: version, CacheFallback: true, Log: a.log, Progress: a.stderr, FUSEDebug: debug})
			if err != nil {
				return err
			}
			// The node's Close only has mounts left to undo on an error
			// path; the normal end is the unmount below.
			defer n.Close(context.Background())
			var metricsAddr string
			if metricsListen != "" {
				var ms *http.Server
				if ms, metricsAddr, err = serveMetrics(a, n, metricsListen); err != nil {
					return err
				}
				defer ms.Close()
			}
			info, err := n.Mount(ctx, node.MountRequest{URI: args[0], Target: args[1], ReadOnly: readOnly})
			if err != nil {
				return err
			}
			if err := ready.Write(a.readyFile, ready.Info{Mountpoint: info.Target, Metrics: metricsAddr}); err != nil {
				return err // n.Close unmounts
			}
			return serveUntilDone(ctx, a, n, info.Target)
		},
	}
	c.Flags().BoolVar(&readOnly, "read-only", false, "mount an input channel (read-only, cached)")
	c.Flags().BoolVar(&debug, "fuse-debug", false, "log every FUSE request (very verbose)")
	c.Flags().StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus /metrics and /healthz on this address, e.g. 127.0.0.1:9469")
	addReadyFileFlag(c.Flags(), a)
	c.Flags().StringVar(&socket, "daemon", "", "ask the mlfsd daemon on this API socket to mount (returns once mounted); mount-scope flags given here apply to this mount")
	node.AddFlags(c.Flags(), &a.settings, node.GroupCache, node.GroupOSS, node.GroupS3, node.GroupHDFS, node.GroupOutput, node.GroupMount)
	c.Flags().StringArrayP(mountOptionsFlag, "o", nil, "mount options as an fstab line writes them, comma-separated (ro,allow_other,uid=1000,file_mode=0440,...); flags override them")
	addConfigFlag(c)
	return c
}

// mountOptionsFlag is -o of `mlfsd mount`.
const mountOptionsFlag = "options"

// applyMountOptionFlag sets the flags the -o options of cmd name, parsed
// as the mount helper parses them (mounthelper.ParseOptions), except
// those given as flags themselves. It runs before --config is read, which
// then sets only what neither gave.
func applyMountOptionFlag(cmd *cobra.Command) error {
	fs := cmd.Flags()
	// Only `mlfsd mount`'s -o: the mount helper's is its own (it passes
	// the options on to the `mlfsd mount` it starts).
	if cmd.Name() != "mount" || fs.Lookup(mountOptionsFlag) == nil {
		return nil
	}
	list, err := fs.GetStringArray(mountOptionsFlag)
	if err != nil || len(list) == 0 {
		return err
	}
	h, err := mounthelper.ParseOptions(list)
	if err != nil {
		return err
	}
	if h.LogFile != "" {
		return errors.New("-o log_file: the mount helper's option; mlfsd mount logs to stderr")
	}
	set := func(name, v string) error {
		if fs.Changed(name) {
			return nil // the flag overrides the option
		}
		return fs.Set(name, v)
	}
	if h.ReadOnly {
		if err := set("read-only", "true"); err != nil {
			return err
		}
	}
	if h.Daemon != "" {
		if err := set("daemon", h.Daemon); err != nil {
			return err
		}
	}
	for _, f := range h.Flags { // --name=value, validated by ParseOptions
		name, v, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if err := set(name, v); err != nil {
			return fmt.Errorf("-o %s: %w", strings.ReplaceAll(name, "-", "_"), err)
		}
	}
	return nil
}

// mountThroughDaemon asks the daemon at socket for req, with the
// mount-scope flags given on the command line and the credentials of this
// process's environment (sent in the request body only).
func mountThroughDaemon(cmd *cobra.Command, a *app, socket string, req node.MountRequest, debug bool) error {
	if debug || cmd.Flags().Changed("metrics-listen") || cmd.Flags().Changed("ready-file") {
		return errors.New("--fuse-debug, --metrics-listen and --ready-file are the daemon's: they cannot be asked for with --daemon (which returns once mounted)")
	}
	opts, err := node.MountFlags(cmd.Flags())
	if err != nil {
		return err
	}
	req.Options = opts
	req.Credentials = daemonCredentials()
	info, err := api.NewClient(socket).Mount(cmd.Context(), req)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "mounted %s at %s\n", info.URI, info.Target)
	return nil
}

// serveUntilDone waits for a signal (ctx done) or an external unmount. On a
// signal it drains, then unmounts; a second signal while draining aborts the
// drain (what is not uploaded stays journaled for the next start).
func serveUntilDone(ctx context.Context, a *app, n *node.Node, target string) error {
	gone, err := n.Done(target)
	if err != nil {
		return err
	}
	select {
	case <-gone:
		return nil // the node logged it
	case <-ctx.Done():
	}
	a.log.Info("signal received; draining and unmounting", "mountpoint", target)
	dctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = n.Unmount(dctx, target)
	if errors.Is(err, node.ErrNotMounted) {
		return nil // unmounted externally meanwhile
	}
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	return nil
}
