// Package daemon is the lifecycle of `mlfsd daemon`, the node daemon: one
// per host, serving every job's mounts from one node (node.Node) through
// the local API (node/api), taking the mounts of a running daemon over at
// an upgrade (handover), and draining and unmounting everything when
// stopped. cmd/mlfsd only parses the flags into Options.
//
// The sequence of Start: without Takeover, the API socket and the handover
// socket (on which a later daemon takes the mounts over), so that a second
// daemon is refused before it does anything; the node; with Takeover, the
// old daemon's mounts (handover.Take); the metrics server; without
// Takeover, the mount table restored, with it, the two sockets (the old
// daemon held them until it exited). Wait then serves until the context is done (drain
// and unmount), the API server fails, or the mounts were handed over (exit
// without touching them).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/mlfsd/mlfsd/handover"
	"github.com/mlfsd/mlfsd/internal/ready"
	"github.com/mlfsd/mlfsd/internal/sdnotify"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// Options configure a daemon.
type Options struct {
	// Settings are the node's settings and the defaults of every mount.
	Settings node.Settings
	// StateDir keeps the mount table and the handover socket (required).
	StateDir string
	// Socket is the path of the API's unix socket (required).
	Socket string
	// MetricsListen, when set, serves /metrics and /healthz on this
	// address (":0" picks a port: see Daemon.MetricsAddr).
	MetricsListen string
	// Takeover takes the live mounts of the daemon running with this
	// StateDir, which then exits (an upgrade without unmounting).
	Takeover bool
	// TakeoverAuto, with Takeover, starts afresh when no daemon runs with
	// this StateDir (a DaemonSet's surge pod on a node without one).
	TakeoverAuto bool
	// KeepMounts: when the context ends, the mounts are kept for the
	// next daemon rather than drained and unmounted: handed to the
	// service manager's fd store when there is one (systemd, $FDSTORE),
	// else left for the next daemon to restore from the mount table.
	KeepMounts bool
	// RetiredFile, when set, is written once the mounts were handed over;
	// a daemon started while it exists serves nothing until ctx ends.
	RetiredFile string
	// Protocol is the handover protocol to ask for with Takeover (0: this
	// build's; other values are for tests of a refused takeover).
	Protocol int
	// NASRoots is the administrator's list of host directories requests
	// may name with nas:// (the zero policy allows none).
	NASRoots nasroots.Policy
	// Version is this build's version, told to the other side of a
	// handover.
	Version string
	// Log receives diagnostics (nil: discarded).
	Log *slog.Logger
	// Progress receives progress lines of long steps (nil: none).
	Progress io.Writer
	// ReadyFile, when set, is written (atomically, see internal/ready)
	// once the daemon serves its API: its pid, Socket and the metrics
	// address. Its directory must exist.
	ReadyFile string
	// DrainContext, when set, gives the context of the drain at a stop:
	// when it is done, the drain is cut short (what is not uploaded stays
	// journaled). The command cancels it on a second signal. nil: the
	// drain runs to its end.
	DrainContext func() (context.Context, context.CancelFunc)
}

func (o *Options) check() error {
	switch {
	case o.StateDir == "":
		return errors.New("daemon: a state directory is required (--state-dir)")
	case o.Socket == "":
		return errors.New("daemon: an API socket path is required (--socket)")
	}
	return ready.Check(o.ReadyFile)
}

// Daemon is a started node daemon.
type Daemon struct {
	o   Options
	log *slog.Logger
	// ctx is Start's: its end stops the daemon (Wait drains then).
	ctx context.Context
	n   *node.Node

	srv         *api.Server
	l           net.Listener // nil: the API socket could not be had after a takeover
	hl          net.Listener // nil likewise for the handover socket
	ms          *http.Server
	metricsAddr string
	served      chan error
	handedOver  chan struct{}
	retired     bool // RetiredFile existed: nothing runs
}

// Run starts a daemon and serves until ctx is done (it then drains every
// output and unmounts everything), its API server fails, or its mounts
// were handed over to a new daemon (it then returns nil at once, and the
// process must exit without unmounting).
func Run(ctx context.Context, o Options) error {
	d, err := Start(ctx, o)
	if err != nil {
		return err
	}
	return d.Wait()
}

// Start starts a daemon and returns once it serves its API (and, with
// Takeover, the mounts taken over). ctx is the daemon's life: when it is
// done, Wait drains and unmounts. On error nothing is left running.
func Start(ctx context.Context, o Options) (*Daemon, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{o: o, log: log, ctx: ctx, served: make(chan error, 1), handedOver: make(chan struct{})}
	if o.RetiredFile != "" {
		if _, err := os.Stat(o.RetiredFile); err == nil {
			// This container's daemon handed its mounts over to another
			// pod's and the kubelet restarted it: taking them back would
			// undo the upgrade.
			log.Info("this daemon handed its mounts over already; serving nothing until stopped", "retired_file", o.RetiredFile)
			d.retired = true
			return d, nil
		}
	}
	// Mounts a daemon stopped under systemd left in the fd store.
	stored, err := sdnotify.Listen()
	if err != nil {
		log.Warn("fds passed by the service manager", "err", err)
	}
	fromStore := false
	for _, f := range stored {
		fromStore = fromStore || f.Name == handover.StoreStateName
	}
	closeStored := func() {
		for _, f := range stored {
			f.Close()
		}
	}
	takeover := o.Takeover && !fromStore
	hsock := handover.SocketPath(o.StateDir)
	var l, hl net.Listener
	// Both sockets first: a daemon started beside a running one (on its
	// API socket or its state directory) is refused before it touches
	// anything, since its restore and its stop would rewrite the running
	// daemon's mount table. Requests wait in the backlog until the API is
	// served. The handover socket lies in the state directory, which a
	// first start makes.
	listenFirst := func() error {
		if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
			return fmt.Errorf("state dir %s: %w", o.StateDir, err)
		}
		var err error
		if l, err = api.Listen(o.Socket); err != nil {
			l = nil
			return err
		}
		if hl, err = api.Listen(hsock); err != nil {
			l.Close()
			l, hl = nil, nil
			return fmt.Errorf("handover %w", err)
		}
		return nil
	}
	if !takeover {
		if err := listenFirst(); err != nil {
			closeStored()
			return nil, err
		}
	}
	closeListeners := func() {
		if l != nil {
			l.Close()
		}
		if hl != nil {
			hl.Close()
		}
	}
	policy := o.NASRoots
	// Taking over, the cache directory is the old daemon's until it lets
	// go; the node opens it then.
	n, err := node.New(ctx, node.Options{Settings: o.Settings, Version: o.Version, StateDir: o.StateDir, OpenCache: !takeover && !fromStore, Log: log, Progress: o.Progress, NASRoots: &policy})
	if err != nil {
		closeListeners()
		closeStored()
		return nil, err
	}
	d.n = n
	took := false
	if len(stored) > 0 {
		ok, err := handover.FromStore(ctx, stored, n, o.Version, log)
		if err != nil {
			log.Error("the mounts left in the fd store could not be taken over; restoring the mount table instead", "err", err)
		}
		took = ok && err == nil
	}
	if takeover {
		// systemd follows the new process from the moment the old one
		// lets go (NotifyAccess=all in deploy/systemd).
		mainPID := func() {
			if err := ready.Notify(fmt.Sprintf("MAINPID=%d", os.Getpid())); err != nil {
				log.Warn("sd_notify", "err", err)
			}
		}
		err := handover.Take(ctx, hsock, n, o.Version, o.Protocol, log, mainPID)
		switch {
		case o.TakeoverAuto && errors.Is(err, handover.ErrNoDaemon):
			log.Info("--takeover=auto: no daemon runs with this state directory; starting afresh")
			if err := listenFirst(); err != nil {
				return nil, errors.Join(err, d.closeNode())
			}
		case err != nil:
			return nil, errors.Join(fmt.Errorf("takeover: %w", err), d.closeNode())
		default:
			took = true
		}
	}
	takeover = took
	// After a takeover the mounts are served already: a socket that cannot
	// be had is logged, not a reason to unmount them.
	keepServing := func(what string, err error) {
		log.Error(what+" failed after the takeover; serving the mounts taken over without it until stopped", "err", err)
	}
	if o.MetricsListen != "" {
		if ms, addr, err := ServeMetrics(n, o.MetricsListen, log); err != nil && !takeover {
			closeListeners()
			d.closeNode()
			return nil, err
		} else if err != nil {
			keepServing("metrics", err)
		} else {
			d.ms, d.metricsAddr = ms, addr
		}
	}
	if !takeover {
		if restored, err := n.Restore(ctx); err != nil {
			log.Error("some mounts of the mount table could not be restored", "err", err)
		} else if len(restored) > 0 {
			log.Info("mount table restored", "mounts", len(restored))
		}
	}
	// After a takeover from a running daemon: it held both sockets until
	// it exited.
	if l == nil {
		if l, err = api.Listen(o.Socket); err != nil {
			l = nil
			keepServing("the API socket", err)
		}
	}
	if hl == nil {
		if hl, err = api.Listen(hsock); err != nil {
			hl = nil
			keepServing("the handover socket", err)
		}
	}
	if l != nil {
		if err := api.ClearTakeover(o.Socket); err != nil {
			log.Warn("takeover marker", "err", err)
		}
	}
	d.l, d.hl = l, hl
	if hl != nil {
		go d.offerMounts(hl.(*net.UnixListener))
	}
	d.srv = api.NewServer(n, log)
	if l != nil {
		go func() { d.served <- d.srv.Serve(l) }()
	}
	log.Info("daemon ready", "socket", o.Socket, "state_dir", o.StateDir, "cache_dir", o.Settings.Cache.Dir)
	if err := ready.Write(o.ReadyFile, ready.Info{Socket: o.Socket, Metrics: d.metricsAddr}); err != nil {
		log.Error("ready file not written; serving anyway", "err", err)
	}
	if err := ready.Notify("READY=1"); err != nil {
		log.Warn("sd_notify", "err", err)
	}
	return d, nil
}

// Node is the daemon's node.
func (d *Daemon) Node() *node.Node { return d.n }

// MetricsAddr is the address the metrics server listens on ("" without
// one).
func (d *Daemon) MetricsAddr() string { return d.metricsAddr }

// Wait serves until Start's context is done, the API server fails, or the
// mounts were handed over, and then stops as Run says. Call it once.
func (d *Daemon) Wait() error {
	if d.retired {
		<-d.ctx.Done()
		return nil
	}
	defer d.closeMetrics()
	if d.hl != nil {
		defer d.hl.Close()
	}
	log, l := d.log, d.l
	select {
	case <-d.ctx.Done():
	case err := <-d.served:
		log.Error("API server stopped", "err", err)
	case <-d.handedOver:
		// The mounts are the new daemon's: exit without touching them.
		// The API requests under way were cut (ErrHandingOver): they get
		// that answer before the exit, so that their clients send them
		// again to the new daemon, which waits for this exit to listen.
		if l != nil {
			// Clients that find nobody listening until the new daemon
			// does wait for it (the new daemon removes the marker).
			if err := api.MarkTakeover(d.o.Socket); err != nil {
				log.Warn("takeover marker", "err", err)
			}
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			d.srv.Shutdown(sctx)
			cancel()
			l.Close()
		}
		if d.o.RetiredFile != "" {
			if err := os.WriteFile(d.o.RetiredFile, []byte(d.o.Version+"\n"), 0o600); err != nil {
				log.Error("retired file", "err", err)
			}
		}
		log.Info("handed the mounts over to the new daemon; exiting")
		return nil
	}
	_ = ready.Notify("STOPPING=1")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	d.srv.Shutdown(sctx)
	cancel()
	if !d.o.KeepMounts {
		log.Info("stopping: draining outputs and unmounting")
		os.Remove(d.o.Socket)
		return d.closeNode()
	}
	// The handover socket goes first: no new daemon is to take mounts
	// that are leaving for the store.
	if d.hl != nil {
		d.hl.Close()
	}
	if sdnotify.Available() {
		err := handover.ToStore(context.Background(), d.n, d.o.Version, log)
		if err == nil {
			return nil
		}
		log.Error("the mounts could not be kept in the service manager's fd store; leaving them for the next daemon to mount again", "err", err)
	}
	return d.leaveMounts()
}

// leaveMounts stops the node without unmounting: its uploads stop (what
// is pending stays journaled) and its mounts fail once this process
// exits, until the next daemon with this state dir detaches them and
// mounts them again from the mount table.
func (d *Daemon) leaveMounts() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hv, err := d.n.FreezeForHandover(ctx)
	if err != nil {
		return fmt.Errorf("stopping without unmounting: %w", err)
	}
	d.log.Info("stopping without unmounting: the next daemon started with this state directory mounts them again", "mounts", len(hv.Mounts))
	return hv.Commit()
}

// closeNode drains and closes the node. A drain cut short (DrainContext
// done) leaves what is not uploaded journaled, and the mount table keeps
// nothing (a clean stop).
func (d *Daemon) closeNode() error {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if d.o.DrainContext != nil {
		ctx, cancel = d.o.DrainContext()
	}
	defer cancel()
	return d.n.Close(ctx)
}

func (d *Daemon) closeMetrics() {
	if d.ms != nil {
		d.ms.Close()
	}
}

// offerMounts answers new daemons on the handover socket, one at a time,
// until one takes the mounts (handedOver is then closed).
func (d *Daemon) offerMounts(l *net.UnixListener) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		committed, err := handover.Offer(d.ctx, c, d.n, d.o.Version, d.log)
		c.Close()
		if committed {
			close(d.handedOver)
			return
		}
		d.log.Error("handover failed; this daemon goes on serving its mounts", "err", err)
	}
}

// ServeMetrics serves n's /metrics and /healthz on addr, returning the
// server and the address it listens on.
func ServeMetrics(n *node.Node, addr string, log *slog.Logger) (*http.Server, string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	s := &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics serving", "addr", l.Addr().String())
	return s, l.Addr().String(), nil
}
