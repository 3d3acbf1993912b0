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
	mfs "github.com/mlfsd/mlfsd/fs"
)

func newMountCmd(a *app) *cobra.Command {
	var readOnly, debug bool
	c := &cobra.Command{
		Use:   "mount [--read-only] SOURCE_URI MOUNTPOINT",
		Short: "Mount a channel URI at a mountpoint, in the foreground",
		Long: `Mount SOURCE_URI (oss://, hdfs://, nas:// or file://) at MOUNTPOINT and serve it
until SIGINT or SIGTERM, then unmount cleanly.

With --read-only it is an input channel: an immutable, cached snapshot.
Without it, an output channel: writes land on local disk and are uploaded in the
background; on SIGINT/SIGTERM every closed file is uploaded before exit.

A URI ending in '/' names a directory; otherwise a single object, shown as
MOUNTPOINT/<basename>.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := backends.ParseURI(args[0])
			if err != nil {
				return err
			}
			mnt := args[1]
			if err := mfs.CheckMountpoint(mnt); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if !readOnly {
				return a.serveOutput(ctx, u, mnt)
			}
			srv, release, err := a.mountInput(ctx, u, mnt, debug)
			if err != nil {
				return err
			}
			defer release()
			a.log.Info("mounted", "source", u.String(), "mountpoint", mnt, "read_only", true)
			return a.serveUntilDone(ctx, srv, mnt, func(context.Context) error { return nil })
		},
	}
	c.Flags().BoolVar(&readOnly, "read-only", false, "mount an input channel (read-only, cached)")
	c.Flags().BoolVar(&debug, "fuse-debug", false, "log every FUSE request (very verbose)")
	return c
}

// mountInput opens u's backend and mounts it read-only at mnt. release closes
// what the mount used; call it after the mount is gone.
func (a *app) mountInput(ctx context.Context, u backends.URI, mnt string, debug bool) (*mfs.Server, func(), error) {
	b, key, err := all.Open(ctx, u, a.backends, a.log)
	if err != nil {
		return nil, nil, err
	}
	src, closeSrc, err := a.newSource(ctx)
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	srv, err := mfs.MountInput(mnt, b, mfs.InputOptions{Source: src, Key: key, Log: a.log},
		mfs.MountOptions{FSName: u.String(), Debug: debug, Log: a.log})
	release := func() {
		if err := closeSrc(); err != nil {
			a.log.Warn("closing cache", "err", err)
		}
		b.Close()
	}
	if err != nil {
		release()
		return nil, nil, err
	}
	return srv, release, nil
}

// serveOutput mounts an output channel and serves it until a signal, then
// drains uploads and unmounts.
func (a *app) serveOutput(ctx context.Context, u backends.URI, mnt string) error {
	if !u.IsDir() {
		return fmt.Errorf("output channel %s must be a directory URI (end it with '/')", u)
	}
	m, err := mountOutput(ctx, a, u, mnt)
	if err != nil {
		return err
	}
	a.log.Info("mounted", "source", u.String(), "mountpoint", mnt, "read_only", false)
	return a.serveUntilDone(ctx, m, mnt, m.Drain)
}

// unmounter is what serveUntilDone needs of a mount.
type unmounter interface {
	Unmount() error
	Wait()
}

// serveUntilDone waits for a signal (ctx done) or an external unmount. On a
// signal it drains, then unmounts; a second signal while draining aborts the
// drain (what is not uploaded stays journaled for the next start).
func (a *app) serveUntilDone(ctx context.Context, m unmounter, mnt string, drain func(context.Context) error) error {
	gone := make(chan struct{})
	go func() { m.Wait(); close(gone) }()
	select {
	case <-gone:
		a.log.Warn("unmounted externally", "mountpoint", mnt)
		return nil
	case <-ctx.Done():
	}
	a.log.Info("signal received; draining and unmounting", "mountpoint", mnt)
	dctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	derr := drain(dctx)
	if err := m.Unmount(); err != nil {
		return errors.Join(derr, err)
	}
	<-gone
	if derr != nil {
		return fmt.Errorf("drain %s: %w", mnt, derr)
	}
	a.log.Info("unmounted", "mountpoint", mnt)
	return nil
}
